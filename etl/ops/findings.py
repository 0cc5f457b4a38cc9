"""One shape for whatever a check finds: `Finding` (check, status, message, fix), one line for people or
a JSON record for schedulers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail"]
# ok: nothing to do; warn: worth knowing, fixes itself or can wait; fail: a person must act.
ORDER: dict[str, int] = {"fail": 0, "warn": 1, "ok": 2}


@dataclass(frozen=True)
class Finding:
    check: str  # which check: "server.sign_in", "checkpoints.now", "lock", ...
    status: Status
    message: str  # what was found, one sentence
    fix: str | None = None  # what to do, when there is something to do

    def line(self) -> str:
        text = f"{self.status.upper():<4}  {self.check:<22} {self.message}"
        return f"{text} -> {self.fix}" if self.fix and self.status != "ok" else text

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)


def ok(check: str, message: str) -> Finding:
    return Finding(check, "ok", message)


def warn(check: str, message: str, fix: str | None = None) -> Finding:
    return Finding(check, "warn", message, fix)


def fail(check: str, message: str, fix: str | None = None) -> Finding:
    return Finding(check, "fail", message, fix)


def worst(findings: Iterable[Finding]) -> Status:
    return min((f.status for f in findings), key=ORDER.__getitem__, default="ok")
