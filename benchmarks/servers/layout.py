"""Where a recording keeps each answer (standard library only: servers/threaded.py imports it)."""

from __future__ import annotations

import hashlib

LONGEST_NAME = 200  # bytes of "@" + query kept as a file name (file systems allow 255)


def file_of(path: str, query: str) -> str:
    """The answer's file, relative to the root: `files/<path>/@<query>`, or `files/long/<sha1>`."""
    name = "@" + query
    if len(name.encode()) > LONGEST_NAME:
        return "files/long/" + hashlib.sha1(f"{path}?{query}".encode()).hexdigest()
    return "files" + path + "/" + name
