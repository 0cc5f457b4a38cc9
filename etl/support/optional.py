"""The packages of the `scale`, `plot` and `lake` extras, imported only by the features that need them."""

from __future__ import annotations

import importlib
import re
from types import ModuleType

from etl.errors import ConfigError

# Extra -> module -> the requirement of that pyproject extra that brings it
# (tests/unit/support/test_optional_extras.py keeps them equal).
EXTRAS = {
    "scale": {"distributed": "dask[distributed]>=2024.4", "s3fs": "s3fs>=2024.2"},  # object storage, Dask
    "plot": {"matplotlib": "matplotlib>=3.8,<4"},  # etl plot
    "lake": {  # sink.format delta / iceberg
        "deltalake": "deltalake>=1.1,<2",
        "pyiceberg": "pyiceberg[sql-sqlite,sql-postgres,pyarrow,pyiceberg-core]>=0.12,<0.13",
    },
}


def require(module: str, feature: str) -> ModuleType:
    """`module`, imported for `feature`; if it is missing or older than the extra asks, one line that
    names it and the command that installs it."""
    extra, requirement = next((e, r[module]) for e, r in EXTRAS.items() if module in r)
    try:
        imported = importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"{feature} needs {module}: pip install 'etl[{extra}]'") from None
    version = getattr(imported, "__version__", "")
    minimum = re.search(r">=([\d.]+)", requirement)
    if version and minimum and _release(version) < _release(minimum.group(1)):
        raise ConfigError(
            f"{feature} needs {requirement}, found {module} {version}: pip install --upgrade '{requirement}'"
        )
    return imported


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version: '3.10.0rc1' -> (3, 10, 0)."""
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])
