"""Settings for every test. The servers' fixtures (emulator, S3, Dask) are in tests/e2e/conftest.py, so
that tests/unit can use none of them; the helpers tests share are in tests/support."""

from __future__ import annotations

from hypothesis import settings

# Property tests assert properties, not timings: a loaded 2-core CI machine must not fail them.
settings.register_profile("etl", deadline=None)
settings.load_profile("etl")
