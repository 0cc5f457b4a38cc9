"""The packages of the `scale`, `lake` and `postgres` extras, imported only by the features that need them."""

from __future__ import annotations

import importlib
import re
from types import ModuleType

from etl.errors import ConfigError

# Module -> the requirement of pyproject's `scale` extra that brings it
# (tests/unit/support/test_optional_extras.py keeps the two equal).
REQUIREMENTS = {
    "distributed": "dask[distributed]>=2024.4",
    "s3fs": "s3fs>=2024.2",
    "matplotlib": "matplotlib>=3.8,<4",
}
# Module -> the requirement of the `lake` extra (sink.format delta / iceberg).
LAKE_REQUIREMENTS = {
    "deltalake": "deltalake>=1.1,<2",
    "pyiceberg": "pyiceberg[sql-sqlite,sql-postgres,pyarrow,pyiceberg-core]>=0.12,<0.13",
}

# Module -> the requirement of the `postgres` extra (sink.format postgres).
POSTGRES_REQUIREMENTS = {
    "adbc_driver_postgresql": "adbc-driver-postgresql>=1.6,<2",
    "adbc_driver_manager": "adbc-driver-manager>=1.6,<2",
}
EXTRAS = {"scale": REQUIREMENTS, "lake": LAKE_REQUIREMENTS, "postgres": POSTGRES_REQUIREMENTS}


def require(module: str, feature: str) -> ModuleType:
    """`module` (or a module of its package: `package.sub`), imported for `feature`; if it is missing or
    older than the extra asks, one line that names it and the command that installs it."""
    package = module.split(".", 1)[0]
    extra, requirement = next((name, found[package]) for name, found in EXTRAS.items() if package in found)
    try:
        imported = importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"{feature} needs {package}: pip install 'etl[{extra}]'") from None
    version = getattr(importlib.import_module(package), "__version__", "")
    minimum = re.search(r">=([\d.]+)", requirement)
    if version and minimum and _release(version) < _release(minimum.group(1)):
        raise ConfigError(
            f"{feature} needs {requirement}, found {package} {version}: pip install --upgrade '{requirement}'"
        )
    return imported


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version: '3.10.0rc1' -> (3, 10, 0)."""
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])
