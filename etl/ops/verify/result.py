"""What `etl verify` found: figures per series, the differing windows (the first `SHOWN` with examples,
all of them as arrays for `--repair`), the verdict in one line, and the record kept in `_verify/`."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from etl.errors import ExitCode
from etl.model import SERIES, Series
from etl.ops.verify.compare import Example, WindowDiff
from etl.timeutil import iso

SHOWN = 20  # differing windows described with their examples; the others are counted
Status = Literal["equal", "differs", "repaired", "failed"]
Work = dict[Series, tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass
class SeriesFigures:
    windows: int = 0  # compared
    differing: int = 0
    source_rows: int = 0
    output_rows: int = 0
    missing: int = 0
    extra: int = 0
    changed: int = 0

    def add(self, diff: WindowDiff) -> None:
        self.windows += 1
        self.differing += diff.differs
        self.source_rows += diff.source_rows
        self.output_rows += diff.output_rows
        self.missing += diff.missing
        self.extra += diff.extra
        self.changed += diff.changed


@dataclass
class Result:
    verify_id: str
    source: str
    output: str
    start: int = 0
    end: int = 0
    sample: float = 1.0  # the share of the candidates asked for (1: all)
    seed: int = 0
    shard: str | None = None
    candidates: int = 0  # windows the checkpoints claim, settled, in [start, end)
    sampled: int = 0
    not_verified: int = 0  # sampled, left out when --max-requests was spent
    failed: int = 0  # sampled windows the source did not serve (errors)
    first_failure: str | None = None
    failed_code: int | None = None
    max_requests: int | None = None
    requests: int = 0
    seconds: float = 0.0
    finished: int = 0  # epoch ms
    unsettled: int = 0
    unlisted: int = 0
    series: dict[str, SeriesFigures] = field(default_factory=dict)
    shown: list[WindowDiff] = field(default_factory=list)
    repaired: dict[str, Any] | None = None  # the repair's run and what verifying it again found
    _work: dict[Series, tuple[array[int], array[int], array[int]]] = field(default_factory=dict, repr=False)

    def add(self, diff: WindowDiff) -> None:
        series = diff.window.series
        self.series.setdefault(series.value, SeriesFigures()).add(diff)
        if diff.differs:
            pids, starts, ends = self._work.setdefault(series, (array("q"), array("q"), array("q")))
            pids.append(diff.window.param_id)
            starts.append(diff.window.start)
            ends.append(diff.window.end)
            if len(self.shown) < SHOWN:
                self.shown.append(diff)

    def work(self) -> Work:
        """The differing windows per series, (param_id, start, end): what --repair rewrites."""
        return {
            series: (
                np.frombuffer(pids, np.int64),
                np.frombuffer(starts, np.int64),
                np.frombuffer(ends, np.int64),
            )
            for series, (pids, starts, ends) in self._work.items()
        }

    def total(self, name: str) -> int:
        return sum(int(getattr(f, name)) for f in self.series.values())

    @property
    def verified(self) -> int:
        return self.total("windows")

    @property
    def differing(self) -> int:
        return self.total("differing")

    @property
    def remaining(self) -> int:
        """Windows that differ now: those found, or after a repair those that still did when read again."""
        return self.differing if self.repaired is None else int(self.repaired["differing"])

    @property
    def status(self) -> Status:
        if self.remaining:
            return "differs"
        if self.repaired is not None:
            return "repaired"
        return "failed" if self.failed else "equal"

    @property
    def exit_code(self) -> int:
        if self.repaired is not None and "exit_code" in self.repaired:  # the repair's run failed
            return int(self.repaired["exit_code"])
        if self.remaining:
            return ExitCode.DIFFERS
        if self.failed:
            return self.failed_code or ExitCode.DATA
        return ExitCode.OK

    # -- for people -----------------------------------------------------------------------------------

    def scope(self) -> str:
        sample = "all" if self.sample >= 1 else f"a sample of {self.sample:g}"
        return (
            f"{self.verified:,} of {self.candidates:,} checkpointed window(s) from {iso(self.start)} to "
            f"{iso(self.end)} ({sample}, seed {self.seed})"
        )

    def verdict(self, command: str = "etl verify -c CONFIG") -> str:
        """One line: what was compared and how it came out."""
        counts = (
            f"{self.total('missing'):,} row(s) missing, {self.total('extra'):,} extra, "
            f"{self.total('changed'):,} changed"
        )
        unverified = (
            f"; {self.not_verified:,} sampled window(s) not read, --max-requests {self.max_requests} spent"
            if self.not_verified
            else ""
        )
        if not self.candidates:
            return (
                f"verify: nothing to compare: no window is checkpointed from {iso(self.start)} to "
                f"{iso(self.end)} (but the newest stretch the next run reads again)"
            )
        found = (
            f"{self.differing:,} window(s) differ from the source in {self.scope()} ({counts}){unverified}"
        )
        if self.repaired is None:
            if self.differing:
                return f"verify: {found}; {command} --seed {self.seed} --repair rewrites them"
        elif "error" in self.repaired:
            return f"verify: {found}; the repair failed: {self.repaired['error']}"
        elif self.remaining:
            return (
                f"verify: {found}; repaired by run {self.repaired['run_id']}, {self.remaining:,} still "
                "differ when read again (the source changes as it is read?)"
            )
        elif self.repaired.get("not_verified"):
            return (
                f"verify: {found}; repaired by run {self.repaired['run_id']}; "
                f"{self.repaired['not_verified']:,} of them not read again, --max-requests spent"
            )
        else:
            return f"verify: {found}; repaired by run {self.repaired['run_id']}: read again, they equal it"
        if self.failed:
            return (
                f"verify: {self.failed:,} window(s) could not be read from the source (first: "
                f"{self.first_failure}); the others equal it in {self.scope()}{unverified}"
            )
        return f"verify: the output equals the source in {self.scope()}, {self.total('source_rows'):,} rows{unverified}"

    def text(self, command: str = "etl verify -c CONFIG") -> str:
        lines = [f"verify of {self.source} ({self.output}): {self.scope()}; {self.requests} request(s)"]
        for name in (s.value for s in SERIES if s.value in self.series):
            f = self.series[name]
            lines.append(
                f"  {name:<8} {f.windows:>7,} window(s)  {f.differing:>5,} differ   rows: {f.source_rows:,} at the "
                f"source, {f.output_rows:,} in the output; {f.missing:,} missing, {f.extra:,} extra, "
                f"{f.changed:,} changed"
            )
        if self.shown:
            more = (
                f" (the first {len(self.shown)} of {self.differing:,})"
                if self.differing > len(self.shown)
                else ""
            )
            lines.append(f"differing windows{more}:")
            lines += [f"  {describe(d)}" for d in self.shown]
        left = []
        if self.unsettled:
            left.append(
                f"the newest stretch of {self.unsettled:,} (parameter, series), which the next run reads again"
            )
        if self.unlisted:
            left.append(f"{self.unlisted:,} checkpointed parameter(s) the platform no longer lists")
        if left:
            lines.append("left out: " + "; ".join(left))
        lines.append(self.verdict(command))
        return "\n".join(lines)

    # -- for schedulers ---------------------------------------------------------------------------------

    def as_dict(self, command: str = "etl verify -c CONFIG") -> dict[str, Any]:
        return {
            "verify_id": self.verify_id,
            "source": self.source,
            "output": self.output,
            "shard": self.shard,
            "status": self.status,
            "exit_code": self.exit_code,
            "verdict": self.verdict(command),
            "from": iso(self.start),
            "to": iso(self.end),
            "sample": "all" if self.sample >= 1 else self.sample,
            "seed": self.seed,
            "candidates": self.candidates,
            "sampled": self.sampled,
            "verified": self.verified,
            "not_verified": self.not_verified,
            "failed": self.failed,
            "first_failure": self.first_failure,
            "max_requests": self.max_requests,
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
            "finished": iso(self.finished) if self.finished else None,
            "differing": self.differing,
            "missing": self.total("missing"),
            "extra": self.total("extra"),
            "changed": self.total("changed"),
            "series": {name: vars(f).copy() for name, f in self.series.items()},
            "windows": [window_record(d) for d in self.shown],
            "left_out": {"unsettled": self.unsettled, "unlisted": self.unlisted},
            "repaired": self.repaired,
        }


def _example(e: Example) -> dict[str, Any]:
    return {"ts": iso(e.ts), "source": e.source, "output": e.output}


def window_record(d: WindowDiff) -> dict[str, Any]:
    w = d.window
    return {
        "series": w.series.value,
        "param_id": w.param_id,
        "object_id": w.object_id,
        "kind": w.kind.value,
        "start": iso(w.start),
        "end": iso(w.end),
        "source_rows": d.source_rows,
        "output_rows": d.output_rows,
        "missing": d.missing,
        "extra": d.extra,
        "changed": d.changed,
        "examples": {
            kind: [_example(e) for e in examples] for kind, examples in d.examples.items() if examples
        },
    }


def _values(values: tuple[float, ...] | None) -> str:
    if values is None:
        return "-"
    return "/".join(f"{v:g}" for v in values)


def describe(d: WindowDiff) -> str:
    """One differing window, with an example of each kind of difference."""
    w = d.window
    parts = []
    for kind, count in (("missing", d.missing), ("extra", d.extra), ("changed", d.changed)):
        if count:
            e = d.examples[kind][0]
            example = (
                f"{_values(e.source)} at the source, {_values(e.output)} in the output"
                if kind == "changed"
                else _values(e.source if kind == "missing" else e.output)
            )
            parts.append(f"{count:,} {kind} (e.g. {iso(e.ts)} {example})")
    return (
        f"{w.series.value} param {w.param_id} (object {w.object_id}, {w.kind.value}) "
        f"{iso(w.start)}..{iso(w.end)}: " + ", ".join(parts)
    )
