"""Export time series from the monitoring platform into partitioned datasets."""

import os

# Arrow's C++ default pool (mimalloc) reserves a 1 GiB arena and keeps freed pages in it: 30 MB and more
# of a run's peak RSS that no later phase gets back. Read once, when Arrow first allocates: so it is set
# here, before anything imports pyarrow. A host application that chose a pool keeps its choice.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

__version__ = "0.1.0"
