"""Export time series from the monitoring platform into partitioned datasets."""

__version__ = "0.1.0"
