"""A documentation page generated from the code (docs/config.md, docs/output.md): written, or checked."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def main(page: Path, render: Callable[[], str], target: str, argv: list[str]) -> int:
    """Write `page` from `render`, or with --check exit 1 when it differs (`target` makes it again)."""
    text = render()
    if "--check" in argv:
        if not page.exists() or page.read_text(encoding="utf-8") != text:
            print(f"{page} is out of date: make {target}", file=sys.stderr)
            return 1
        return 0
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}")
    return 0
