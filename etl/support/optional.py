"""The packages of the `scale`, `plot`, `lake`, `postgres`, `lineage` and `otel` extras, imported only by the
features that need them; and pandas, which pyarrow imports on its own."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
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
    "postgres": {  # sink.format postgres
        "adbc_driver_postgresql": "adbc-driver-postgresql>=1.6,<2",
        "adbc_driver_manager": "adbc-driver-manager>=1.6,<2",
    },
    "lineage": {"openlineage.client": "openlineage-python>=1.30,<2"},  # a config's `lineage:` section
    "otel": {  # a config's `telemetry:` section
        "opentelemetry.sdk": "opentelemetry-sdk>=1.20,<2",
        "opentelemetry.exporter.otlp.proto.http": "opentelemetry-exporter-otlp-proto-http>=1.20,<2",
    },
}


def _entry(module: str) -> tuple[str, str, str]:
    """(extra, key, requirement) of a module: its own entry, or its package's (adbc_driver_postgresql.dbapi)."""
    for key in (module, module.split(".", 1)[0]):
        for extra, found in EXTRAS.items():
            if key in found:
                return extra, key, found[key]
    raise KeyError(module)


def require(module: str, feature: str) -> ModuleType:
    """`module` (or a module of a package listed: `package.sub`), imported for `feature`; if it is missing
    or older than the extra asks, one line that names it and the command that installs it."""
    extra, key, requirement = _entry(module)
    try:
        imported = importlib.import_module(module)
    except ImportError:
        # A package, or for a module inside one (openlineage.client) the project pip knows
        name = key if "." not in key else requirement.split(">")[0]
        raise ConfigError(f"{feature} needs {name}: pip install 'etl[{extra}]'") from None
    version = getattr(importlib.import_module(key), "__version__", "")
    minimum = re.search(r">=([\d.]+)", requirement)
    if version and minimum and _release(version) < _release(minimum.group(1)):
        raise ConfigError(
            f"{feature} needs {requirement}, found {key} {version}: pip install --upgrade '{requirement}'"
        )
    return imported


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version: '3.10.0rc1' -> (3, 10, 0)."""
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])


def pyarrow_looks_for_pandas(find: bool = True) -> None:
    """pyarrow imports pandas (some 300 modules, a good part of a small run's CPU) at its first conversion
    of a value that is no numpy array, only to ask whether it is a pandas object, and keeps the answer. It
    looks here, before a run rather than in one of its threads. With `find` False (`etl run`: nothing in a
    run is a pandas object) it finds none, unless pandas is loaded already, and works without it; a later
    `import pandas` (etl.timeutil's parser of odd stamps) loads it as usual."""
    import pyarrow as pa

    refuse = not find and "pandas" not in sys.modules
    if refuse:
        sys.meta_path.insert(0, _NO_PANDAS)
    try:
        pa.array([])  # its first look; later calls ask no more
    finally:
        if refuse:
            sys.meta_path.remove(_NO_PANDAS)


class _NoPandas:
    """Refuses pandas for the one call above. (A None in sys.modules, which refuses a module to Python's
    own import, would not do: pyarrow's compiled import takes the None for the module.)"""

    @staticmethod
    def find_spec(
        name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == "pandas":
            raise ImportError("pandas is not looked for by an etl run")
        return None


_NO_PANDAS = _NoPandas()
