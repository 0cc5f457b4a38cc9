"""Debian packages the tests start servers of (postgresql, squid), installed by a `make` target that
`make test` runs."""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest


def require(find: Callable[[], object], missing: type[Exception], package: str, target: str) -> None:
    """`find()` the package's programs: where they are missing, the test fails naming `make TARGET`, or is
    skipped on a machine without apt to install them."""
    try:
        find()
    except missing as exc:
        if shutil.which("apt-get") is None:
            pytest.skip(f"{package} is not installed and this machine has no apt to install it: {exc}")
        pytest.fail(f"{package} is not installed ({exc}): `make {target}` installs Debian's {package}")
