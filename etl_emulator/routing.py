"""Routing: the routes of the platform's paths, the parsed call a handler gets, and the router."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import overload

from etl_emulator.accounts import Account
from etl_emulator.answers import Answer, Refusal, bad, not_found
from etl_emulator.faults import Decision


@dataclass
class Call:
    """One API call as a handler sees it: path arguments, query, the form body of a sign-in, the
    signed-in account."""

    method: str
    path: str
    query: dict[str, list[str]]
    args: tuple[int, ...]
    form: dict[str, list[str]] = field(default_factory=dict)
    account: Account | None = None
    decision: Decision | None = None

    @property
    def user(self) -> Account:
        """The signed-in account (every route but sign-in has one)."""
        if self.account is None:
            raise RuntimeError(f"{self.path}: no signed-in account")
        return self.account

    @property
    def faults(self) -> Decision:
        """What the fault draw decided for this call (every API call has one)."""
        if self.decision is None:
            raise RuntimeError(f"{self.path}: no fault decision")
        return self.decision

    def one(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    @overload
    def integer(self, name: str, default: int) -> int: ...

    @overload
    def integer(self, name: str, default: None = None) -> int | None: ...

    def integer(self, name: str, default: int | None = None) -> int | None:
        value = self.one(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except ValueError:
            raise bad(f"{name} must be an integer, got {value!r}") from None

    def integers(self, name: str) -> list[int]:
        try:
            return [int(v) for values in self.query.get(name, []) for v in values.split(",") if v]
        except ValueError:
            raise bad(f"{name} must hold integers") from None

    def strings(self, name: str) -> list[str]:
        return [v for values in self.query.get(name, []) for v in values.split(",") if v]

    def flag(self, name: str) -> bool | None:
        value = self.one(name)
        if value is None or value == "":
            return None
        if value.lower() in ("true", "1"):
            return True
        if value.lower() in ("false", "0"):
            return False
        raise bad(f"{name} must be true or false, got {value!r}")


@dataclass
class Route:
    method: str
    template: str
    handler: Callable[[Call], Answer | bytes]
    sign_in: bool = False
    series: tuple[str, str] | None = None  # (source, kind)


class Router:
    """Routes by segment count and literal segments; integer segments are parsed (400 if not)."""

    def __init__(self, routes: list[Route]) -> None:
        self._by_len: dict[int, list[tuple[tuple[tuple[int, str], ...], tuple[int, ...], Route]]] = {}
        for route in routes:
            segs = route.template.strip("/").split("/")
            literals = tuple((i, s) for i, s in enumerate(segs) if not s.startswith("{"))
            params = tuple(i for i, s in enumerate(segs) if s.startswith("{"))
            self._by_len.setdefault(len(segs), []).append((literals, params, route))
        for candidates in self._by_len.values():
            candidates.sort(key=lambda c: -len(c[0]))

    def match(self, method: str, path: str) -> tuple[Route, tuple[int, ...]]:
        segs = path.strip("/").split("/")
        allowed = False
        for literals, params, route in self._by_len.get(len(segs), ()):
            if all(segs[i] == s for i, s in literals):
                if route.method != method:
                    allowed = True
                    continue
                try:
                    return route, tuple(int(segs[i]) for i in params)
                except ValueError:
                    raise bad(f"path segments {[segs[i] for i in params]} must be integers") from None
        if allowed:
            raise Refusal(405, "method_not_allowed", f"{method} is not allowed on {path}")
        raise not_found(f"path {path}")
