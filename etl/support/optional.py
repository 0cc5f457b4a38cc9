"""The packages of the `scale`, `lake`, `lineage` and `otel` extras, imported only by the features that need
them."""

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

# Module -> the requirement of the `lineage` extra (a config's `lineage:` section).
LINEAGE_REQUIREMENTS = {"openlineage.client": "openlineage-python>=1.30,<2"}
# Module -> the requirement of the `otel` extra (a config's `telemetry:` section).
OTEL_REQUIREMENTS = {
    "opentelemetry.sdk": "opentelemetry-sdk>=1.20,<2",
    "opentelemetry.exporter.otlp.proto.http": "opentelemetry-exporter-otlp-proto-http>=1.20,<2",
}
EXTRAS = {
    "scale": REQUIREMENTS,
    "lake": LAKE_REQUIREMENTS,
    "lineage": LINEAGE_REQUIREMENTS,
    "otel": OTEL_REQUIREMENTS,
}


def require(module: str, feature: str) -> ModuleType:
    """`module`, imported for `feature`; if it is missing or older than the extra asks, one line that
    names it and the command that installs it."""
    extra = next(name for name, modules in EXTRAS.items() if module in modules)
    requirement = EXTRAS[extra][module]
    try:
        imported = importlib.import_module(module)
    except ImportError:
        # A package's module, or for a module inside one (openlineage.client) the project pip knows
        name = module if "." not in module else requirement.split(">")[0]
        raise ConfigError(f"{feature} needs {name}: pip install 'etl[{extra}]'") from None
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
