"""Decode measurement answers straight into numpy columns: no per-point objects survive parsing."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson

from etl.client.models import Candles, Points
from etl.errors import InvalidResponse
from etl.timeutil import parse_iso_ms


def decode_json(body: bytes) -> Any:
    """orjson first; the stdlib parser second because it accepts the bare NaN some servers send."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidResponse(f"answer is not valid JSON ({len(body)} bytes: {_excerpt(body)})") from None


def _excerpt(body: bytes, size: int = 60) -> str:
    text = body[:size].decode("utf-8", "replace").replace("\n", " ")
    return repr(text + ("..." if len(body) > size else ""))


def _items(doc: Any, key: str) -> list:
    # The signal answer's shape is not documented: accept {key: [...]} and a bare list.
    items = doc.get(key) if isinstance(doc, dict) else doc
    if items is None and isinstance(doc, dict):
        items = doc.get("points") or doc.get("candles") or []
    if not isinstance(items, list):
        raise InvalidResponse(f"answer has no '{key}' list")
    if items and not all(isinstance(p, dict) for p in items):
        raise InvalidResponse(f"'{key}' holds something other than records")
    return items


def _floats(items: list, key: str) -> np.ndarray:
    values = [p.get(key) for p in items]
    try:
        return np.array(values, dtype=np.float64)  # None -> nan
    except (TypeError, ValueError):
        raise InvalidResponse(f"non-numeric '{key}' in answer") from None


def _stamps(items: list) -> np.ndarray:
    try:
        return parse_iso_ms([p.get("timestmp") for p in items])
    except (ValueError, TypeError) as exc:
        raise InvalidResponse(str(exc)) from None


def parse_points(doc: Any) -> Points:
    items = _items(doc, "points")
    return Points(ts=_stamps(items), value=_floats(items, "value"))


def parse_candles(doc: Any) -> Candles:
    items = _items(doc, "candles")
    return Candles(
        ts=_stamps(items),
        open=_floats(items, "open"),
        high=_floats(items, "high"),
        low=_floats(items, "low"),
        close=_floats(items, "close"),
    )
