"""The packages of the `scale` and `lake` extras, imported only by the features that need them; and pandas,
which pyarrow imports on its own."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
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


def require(module: str, feature: str) -> ModuleType:
    """`module`, imported for `feature`; if it is missing or older than the extra asks, one line that
    names it and the command that installs it."""
    extra = "lake" if module in LAKE_REQUIREMENTS else "scale"
    requirement = {**REQUIREMENTS, **LAKE_REQUIREMENTS}[module]
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
