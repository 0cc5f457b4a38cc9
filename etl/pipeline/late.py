"""Late and revised data: what a run reads again, besides the new time, so that points that reach the
platform late land too (docs/late-data.md).

A parameter's points reach the platform in the order of their stamps, some of them late: a slow link, a
calculation that waits for its inputs, a controller that was offline and uploads its backlog at once.
So each (parameter, series) is read again from the newest row received (`state.Arrivals.newest`; just
after it for raw points, from its half-hour for averages and candles, whose last bucket may still
change) up to its checkpoint, at most `window.late_max` back. A punctual parameter's newest row is
close to its checkpoint: reading from it costs no request more than the new time does.

- A tail that starts on the checkpoint's UTC day or the day before joins the run's windows as it is.
- A longer one (a parameter quiet for days) is probed first: one request for its 30-minute averages
  over the tail, whose buckets say where points have arrived since; only those spans are read, so a
  quiet parameter costs one small request a run, whatever `late_max`.
- Calculated parameters are probed over the last `window.revisions` too: each block of that time holds a
  fingerprint of its averages up to where all their raw points had arrived (`prints`); a block whose
  averages changed since was revised, and is read again in every series.

A run's probes go out before its slabs are planned. Their findings are work for the plan, and figures
for the summary: parameters quiet past a day, past `late_max`, and blocks revised.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import numpy as np

from etl.client import MonitoringClient
from etl.errors import EtlError
from etl.model import PARAM_KINDS, ParamKind, Series, Window, Windows, union
from etl.pipeline.clean import WindowData, clean
from etl.pipeline.counts import Counts
from etl.pipeline.fetch import fetch_window
from etl.pipeline.plan import not_due
from etl.state.arrivals import Arrivals, Rows
from etl.state.coverage import NONE, Coverage, key_of
from etl.timeutil import DAY_MS, MINUTE_MS, iso

log = logging.getLogger(__name__)

BUCKET_MS = 30 * MINUTE_MS  # the platform's averages and candles
Work = tuple[np.ndarray, np.ndarray, np.ndarray]  # (param_id, start, end)
_EMPTY = np.empty(0, np.int64)
_NO_WORK: Work = (_EMPTY, _EMPTY, _EMPTY)


@dataclass(frozen=True)
class LateOptions:
    start: int  # the run's window: nothing is read before its start...
    end: int  # ...nor after its end
    now: int  # the server's clock (less the horizon's margin): late_max and revisions reach back from it
    late_max: int  # 0: no tail is read
    revisions: int  # 0: no revision is looked for
    series: tuple[Series, ...]
    max_points: int = 10_000
    quiet_after: int = 0  # a parameter whose newest point is this old is quiet (0: none is)
    quiet_max: int = 0  # a quiet parameter is polled at least this often (0: every run, as others)
    every: tuple[tuple[Series, int], ...] = ()  # a series' new time is asked once this old (cadence.series)


def block_of(revisions: int) -> int:
    """The length of the blocks a revision fingerprint covers: a quarter of `window.revisions` (so a
    revised block is read again rather than the whole span), in whole half-hours, at least an hour."""
    return max(2 * BUCKET_MS, revisions // 4 // BUCKET_MS * BUCKET_MS)


QUIET_SHARE = 4  # a quiet parameter is polled after a quarter of its silence (up to quiet_max)


@dataclass(frozen=True)
class Quiet:
    """The quiet parameters of a run: those not due (`resting`: their new time waits for a later run,
    and costs nothing now) and those due (`polled`: one probe of their averages from their newest point on
    tells where they sent anything; only that is read, the rest is checkpointed as empty)."""

    resting: np.ndarray
    polled: np.ndarray

    @classmethod
    def none(cls) -> Quiet:
        return cls(_EMPTY, _EMPTY)

    @property
    def ids(self) -> np.ndarray:
        return np.union1d(self.resting, self.polled)


def quiet_of(
    coverage: Coverage, arrivals: Arrivals, ids: np.ndarray, options: LateOptions, silent: np.ndarray
) -> Quiet:
    """Which parameters are quiet, and which of them are due. A parameter is quiet when its newest point
    is `quiet_after` older than its checkpoint (none yet: older than the window's start); its cadence is a
    quarter of its silence, at most `quiet_max`. One whose object says no point can come (`silent`: no
    controller, every controller offline) is polled every `quiet_max` once it has been silent a quarter of
    `quiet_after`. It is due once its checkpoint is a cadence old. A parameter without checkpoints is never
    quiet: it has a window to load."""
    if not options.quiet_max or not len(ids):
        return Quiet.none()
    ref = Series.RAW if Series.RAW in options.series else options.series[0]
    hw = coverage.high_waters(ref, ids)
    newest = arrivals.newest_of(ref, ids)
    silence = hw - np.where(newest == NONE, options.start, newest + 1)
    cadence = np.where(
        silence >= options.quiet_after, np.minimum(silence // QUIET_SHARE, options.quiet_max), 0
    )
    # The object's word counts once the parameter itself has been silent a while (a record can lag, or
    # an object without a controller still have calculated values).
    told = np.isin(ids, silent) & (silence >= options.quiet_after // QUIET_SHARE)
    cadence = np.where(told, options.quiet_max, cadence)
    quiet = (hw != NONE) & (cadence > 0)
    due = options.end - hw >= cadence
    return Quiet(ids[quiet & ~due], ids[quiet & due])


def tails(
    coverage: Coverage,
    arrivals: Arrivals,
    series: Series,
    ids: np.ndarray,
    options: LateOptions,
    quiet: Quiet | None = None,
) -> tuple[Work, Work]:
    """(short, long) tails of a series: from just after each parameter's newest row to its checkpoint's
    end, cut at `late_max` before the server's clock and at the run's start. Short ones start on the checkpoint's
    day or the day before; long ones are probed first, as are a quiet parameter's; a resting one's wait."""
    quiet = quiet or Quiet.none()
    ids = ids[~np.isin(ids, quiet.resting)]
    if not options.late_max or not len(ids):
        return _NO_WORK, _NO_WORK
    if (every := dict(options.every).get(series)) is not None:  # its tails wait with its new time
        ids = ids[~not_due(coverage, series, ids, options.end, every)]
    hw = coverage.high_waters(series, ids)
    hw = np.where(hw == NONE, NONE, np.minimum(hw, options.end))
    newest = arrivals.newest_of(series, ids)
    # Raw: the newest point came already; aggregates: its half-hour may still change.
    after = newest + 1 if series is Series.RAW else newest // BUCKET_MS * BUCKET_MS
    lo = np.maximum(np.where(newest == NONE, NONE, after), max(options.start, options.now - options.late_max))
    has = (hw != NONE) & (lo < hw)
    # Quiet for longer than late_max: probed, so that its coming back is seen (and what it brings older).
    beyond = newest < options.now - options.late_max
    short = (lo >= (hw - 1) // DAY_MS * DAY_MS - DAY_MS) & ~beyond & ~np.isin(ids, quiet.polled)
    pick_s, pick_l = has & short, has & ~short
    return (ids[pick_s], lo[pick_s], hw[pick_s]), (ids[pick_l], lo[pick_l], hw[pick_l])


@dataclass
class Probe:
    """What a run asks of the averages before it plans, per parameter."""

    param_id: np.ndarray
    kind: np.ndarray  # positions in PARAM_KINDS
    start: np.ndarray
    end: np.ndarray


@dataclass
class Findings:
    """What the probes found: work for the plan, figures for the summary, prints to keep."""

    work: dict[Series, Work] = field(default_factory=dict)
    quiet: int = 0  # parameters whose raw tail was long enough to be probed
    beyond: int = 0  # parameters quiet for longer than late_max
    backlog: int = 0  # of those, parameters back with points older than late_max (fetched)
    revised: int = 0  # blocks whose averages changed since they were read
    probes: int = 0
    failed: int = 0  # probes that failed (their parameters' tails are read whole instead)
    buckets: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # for prints
    # Quiet parameters whose new time the plan leaves out (resting, or polled: their probe's spans with
    # data are in `work`), and the new time their probes found empty, checkpointed without a request.
    rest: np.ndarray = field(default_factory=lambda: _EMPTY)
    empty: dict[Series, Work] = field(default_factory=dict)
    # The probes' averages up to the run's end, which the average series takes instead of asking again.
    averages: dict[int, WindowData] = field(default_factory=dict)


def _work(parts: list[Work]) -> Work:
    if not parts:
        return _NO_WORK
    return union(*(np.concatenate([p[i] for p in parts]).astype(np.int64) for i in range(3)))


def plan_probes(
    coverage: Coverage,
    arrivals: Arrivals,
    ids: np.ndarray,
    kinds: np.ndarray,
    options: LateOptions,
    quiet: Quiet | None = None,
) -> tuple[dict[Series, Work], dict[Series, Work], Probe]:
    """The short tails (work as they are), the long ones, and the probes to send: over the long tails,
    the polled quiet parameters' new time, and the calculated parameters' revision span."""
    quiet = quiet or Quiet.none()
    short, long = {}, {}
    for series in options.series:
        short[series], long[series] = tails(coverage, arrivals, series, ids, options, quiet)
    spans: list[Work] = [long[s] for s in options.series]
    if len(quiet.polled):
        first = np.min([coverage.high_waters(s, quiet.polled) for s in options.series], axis=0)
        first = np.where(first == NONE, options.start, np.minimum(first, options.end))
        spans.append((quiet.polled, first, np.full(len(first), options.end)))
    if options.revisions:
        calculated = ids[(kinds == PARAM_KINDS.index(ParamKind.CALCULATED)) & ~np.isin(ids, quiet.resting)]
        block = block_of(options.revisions)
        first = max(options.start, options.now - options.revisions) // block * block
        if first < options.end and len(calculated):
            n = len(calculated)
            spans.append((calculated, np.full(n, max(first, options.start)), np.full(n, options.end)))
    pid, start, end = (np.concatenate([s[i] for s in spans]) if spans else _EMPTY for i in range(3))
    if not len(pid):
        return short, long, Probe(_EMPTY, np.empty(0, np.int8), _EMPTY, _EMPTY)
    # One request a parameter: from its earliest need to its latest.
    order = np.lexsort((start, pid))
    pid, start, end = pid[order], start[order], end[order]
    heads = np.flatnonzero(np.r_[True, pid[1:] != pid[:-1]])
    p = pid[heads]
    kind = kinds[np.searchsorted(ids, p)]
    return (
        short,
        long,
        Probe(p, kind, np.minimum.reduceat(start, heads), np.maximum.reduceat(end, heads)),
    )


def hashes(ts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each (bucket, average) pair: a block's fingerprint is the sum of its buckets'."""
    x = ts.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x ^= np.ascontiguousarray(values, np.float64).view(np.uint64)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    return x


def fingerprint(buckets: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> int:
    """The fingerprint of the averages with bucket starts in [lo, hi), as a signed 64-bit int."""
    ts, h = buckets
    a, b = np.searchsorted(ts, [lo, hi])
    return int(np.sum(h[a:b], dtype=np.uint64).astype(np.int64))


def revised_blocks(
    prints: Rows,
    param_id: int,
    buckets: tuple[np.ndarray, np.ndarray],
    block: int,
    since: int,
    newest: int,
) -> tuple[list[tuple[int, int]], int]:
    """The spans to read again of the parameter's prints from `since` (where the probe began) whose
    averages changed, and how many of them were revised blocks. A block's print covers its settled
    half-hours; the half-hour of the newest point has a print of its own (at its start + 1 ms), whose
    change may be points that came late after that point: only the part up to it (`newest`, the newest
    point received) is read again, the rest is the tail's."""
    a, b = np.searchsorted(prints.param_id, [param_id, param_id + 1])
    spans: list[tuple[int, int]] = []
    revised = 0
    for at, cutoff, kept in zip(
        prints.at[a:b].tolist(), prints.values[0][a:b].tolist(), prints.values[1][a:b].tolist(), strict=True
    ):
        edge = at % BUCKET_MS == 1
        lo = at - 1 if edge else at
        hi = cutoff if edge else min(at + block, cutoff)
        if lo < since or fingerprint(buckets, lo, hi) == kept:
            continue
        if edge:
            if newest >= lo:
                spans.append((lo, min(hi, newest + 1)))
        else:
            spans.append((lo, hi))
            revised += 1
    return spans, revised


def new_prints(
    buckets: dict[int, tuple[np.ndarray, np.ndarray]],
    newest: dict[int, int],
    block: int,
    since: int,
    end: int,
) -> Rows:
    """Prints of each probed calculated parameter's averages from `since`: one per block up to the
    half-hour of its newest point (`newest`: the newest raw point received, all earlier half-hours are
    complete), and one of that half-hour (at its start + 1 ms)."""
    pids, ats, cutoffs, prints = [], [], [], []
    for pid, b in buckets.items():
        last = newest.get(pid)
        if last is None or last < since:
            continue
        settled = min(last // BUCKET_MS * BUCKET_MS, end)
        for at in range(since // block * block, settled, block):
            pids.append(pid)
            ats.append(at)
            cutoffs.append(settled)
            prints.append(fingerprint(b, at, min(at + block, settled)))
        if settled < end:
            pids.append(pid)
            ats.append(settled + 1)
            cutoffs.append(settled + BUCKET_MS)
            prints.append(fingerprint(b, settled, settled + BUCKET_MS))
    return Rows(
        np.array(pids, np.int64),
        np.array(ats, np.int64),
        (np.array(cutoffs, np.int64), np.array(prints, np.int64)),
    )


def _spans_with_data(bucket_ts: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """The part of [lo, hi) from the first to the last half-hour the probe's buckets say hold points (the
    time between costs no request more). The half-hour `lo` is in (a raw tail starts just after its
    newest point, which that half-hour's average holds) counts only when a later one holds points too:
    a point that came late after the newest in its half-hour is read once the parameter sends anything
    later."""
    starts = bucket_ts[(bucket_ts + BUCKET_MS > lo) & (bucket_ts < hi)]
    if not len(starts) or (len(starts) == 1 and starts[0] <= lo):
        return []
    return [(max(int(starts[0]), lo), min(int(starts[-1]) + BUCKET_MS, hi))]


class _Averages:
    """A run's probes: each one request for a parameter's averages over a span, through the client's
    limits; a probe that fails is None (its parameter's tails are then read whole)."""

    def __init__(self, client: MonitoringClient, options: LateOptions, counts: Counts) -> None:
        self.client, self.options, self.counts = client, options, counts
        self.sent = 0

    async def many(self, asks: list[tuple[int, int, int, int]]) -> list[WindowData | None]:
        """(param_id, kind, start, end) each: the averages over the half-hours from start's to end."""
        self.sent += len(asks)
        return list(await asyncio.gather(*(self._one(*ask) for ask in asks)))

    async def _one(self, pid: int, kind: int, start: int, end: int) -> WindowData | None:
        window = Window(pid, 0, PARAM_KINDS[kind], Series.AVERAGE, start // BUCKET_MS * BUCKET_MS, end)
        try:
            answer = await fetch_window(self.client, window, self.options.max_points, self.counts)
            return clean(window, answer, self.counts)
        except EtlError as exc:
            if exc.fatal:
                raise
            log.debug("probe of %s failed: %s", window.describe(), exc)
            return None


def _buckets(data: WindowData | None) -> tuple[np.ndarray, np.ndarray] | None:
    """A probe's bucket starts and their hashes."""
    return None if data is None else (data.ts, hashes(data.ts, data.values["value"]))


def _new_time_with_data(bucket_ts: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """The part of a quiet parameter's new time [lo, hi) from the first to the last half-hour its probe
    says holds points; the half-hour `lo` is in counts (what it holds may be after lo)."""
    starts = bucket_ts[(bucket_ts + BUCKET_MS > lo) & (bucket_ts < hi)]
    if not len(starts):
        return []
    return [(max(int(starts[0]), lo), min(int(starts[-1]) + BUCKET_MS, hi))]


def _add_spans(
    extra: dict[Series, list[Work]], pid: int, spans: list[tuple[int, int]], series: list[Series]
) -> None:
    if spans:
        work = (np.full(len(spans), pid), np.array([a for a, _ in spans]), np.array([b for _, b in spans]))
        for s in series:
            extra[s].append(work)


async def probe(
    client: MonitoringClient,
    coverage: Coverage,
    arrivals: Arrivals,
    ids: np.ndarray,
    kinds: np.ndarray,
    options: LateOptions,
    counts: Counts,
    silent: np.ndarray = _EMPTY,
) -> Findings:
    """Send the run's probes (through the client's own limits) and turn the answers into work. `silent`:
    parameters of objects that say no point can come (no controller, every controller offline)."""
    quiet = quiet_of(coverage, arrivals, ids, options, silent)
    short, long, probes = plan_probes(coverage, arrivals, ids, kinds, options, quiet)
    findings = Findings()
    extra: dict[Series, list[Work]] = {s: [short[s]] for s in options.series}
    empty: dict[Series, list[Work]] = {s: [] for s in options.series}
    averages = _Averages(client, options, counts)
    answers = await averages.many(
        [
            (int(p), int(k), int(a), int(b))
            for p, k, a, b in zip(probes.param_id, probes.kind, probes.start, probes.end, strict=True)
        ]
    )
    block = block_of(options.revisions) if options.revisions else 0
    calculated = PARAM_KINDS.index(ParamKind.CALCULATED)
    cut = options.now - options.late_max
    backlog: list[tuple[int, int, int, int]] = []  # quiet for longer than late_max, and back
    rest = [quiet.resting]
    polled = set(quiet.polled.tolist())
    raw_long = long.get(Series.RAW, _NO_WORK)[0]
    for i, data in enumerate(answers):
        pid, kind = int(probes.param_id[i]), int(probes.kind[i])
        buckets = _buckets(data)
        if data is not None and Series.AVERAGE in options.series and data.window.end == options.end:
            findings.averages[pid] = data
        for series in options.series:
            tails_of = long[series]
            a, b = np.searchsorted(tails_of[0], [pid, pid + 1])
            for lo, hi in zip(tails_of[1][a:b].tolist(), tails_of[2][a:b].tolist(), strict=True):
                # A failed probe's tail is read whole.
                spans = [(lo, hi)] if buckets is None else _spans_with_data(buckets[0], lo, hi)
                _add_spans(extra, pid, spans, [series])
        if buckets is None:
            findings.failed += 1
            continue  # a polled quiet parameter's new time is read as anyone's
        if pid in polled:
            rest.append(np.array([pid]))
            for series in options.series:
                high = int(coverage.high_waters(series, np.array([pid]))[0])
                if high == NONE or high >= options.end:
                    continue
                spans = _new_time_with_data(buckets[0], high, options.end)
                _add_spans(extra, pid, spans, [series])
                holes = [(high, spans[0][0]), (spans[0][1], options.end)] if spans else [(high, options.end)]
                _add_spans(empty, pid, [(lo, hi) for lo, hi in holes if lo < hi], [series])
        newest = int(arrivals.newest_of(Series.RAW, np.array([pid]))[0])
        since = max(newest + 1, options.start)
        if options.late_max and since < cut and len(buckets[0]) and pid in raw_long:
            # Back after more than late_max: what it uploads for times before that is looked for once.
            backlog.append((pid, kind, since, cut))
        if block and kind == calculated:
            findings.buckets[pid] = buckets
            since = int(probes.start[i]) // BUCKET_MS * BUCKET_MS
            spans, revised = revised_blocks(arrivals.prints, pid, buckets, block, since, newest)
            findings.revised += revised
            _add_spans(extra, pid, spans, list(options.series))
    findings.quiet = len(np.unique(raw_long))
    if options.late_max:
        findings.beyond = int(np.count_nonzero(arrivals.newest_of(Series.RAW, np.unique(raw_long)) < cut))
    for (pid, _, lo, hi), data in zip(backlog, await averages.many(backlog), strict=True):
        spans = [(lo, hi)] if data is None else _spans_with_data(data.ts, lo, hi)
        if data is not None and len(data.ts):
            findings.backlog += 1
            log.warning(
                "param %d came back after more than window.late_max with points from %s to %s: fetched",
                pid,
                iso(int(data.ts[0])),
                iso(int(data.ts[-1]) + BUCKET_MS),
            )
        _add_spans(extra, pid, spans, list(options.series))
    findings.probes = averages.sent
    findings.rest = np.unique(np.concatenate(rest))
    findings.work = {s: _work([w for w in parts if len(w[0])]) for s, parts in extra.items()}
    findings.empty = {s: _work([w for w in parts if len(w[0])]) for s, parts in empty.items()}
    return findings


class OpenTails:
    """The late work a run re-reads after each (parameter, series)'s newest point, until it is committed.

    Tails start just after the newest point received: a slab that commits a newer point (today's, fetched
    first) while a tail of the same series is still open would, if the run stopped then, move the next
    run's tails past the time never re-read. So until every tail of a key is committed, the newest point
    committed with other slabs is held back to just before its first open tail; the slab that closes the
    last one commits the newest the run received."""

    def __init__(self, key: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        order = np.lexsort((lo, key))
        self.key, self.lo, self.hi = key[order], lo[order], hi[order]
        self.left = self.hi - self.lo  # time of each tail not yet committed
        self.keys = np.unique(self.key)
        self.best = np.full(len(self.keys), NONE, np.int64)  # the newest point the run received, per key

    @classmethod
    def of(cls, work: dict[Series, Work], arrivals: Arrivals) -> OpenTails:
        """The tails in `work` (the probes' findings) that start after their key's newest point."""
        parts = []
        for series, (pids, lo, hi) in work.items():
            after = lo > arrivals.newest_of(series, pids)
            parts.append((key_of(pids[after], series), lo[after], hi[after]))
        if not parts:
            return cls(_EMPTY, _EMPTY, _EMPTY)
        return cls(*(np.concatenate(column).astype(np.int64) for column in zip(*parts, strict=True)))

    def settle(self, done: Windows, arrivals: Arrivals) -> None:
        """Count `done` (a slab's committed windows) against the open tails, and hold back or release the
        newest points `arrivals` (the slab's) carry into the same commit."""
        if not len(self.keys) or not len(done):
            return
        before = self._open_keys()
        key = key_of(done.param_id, done.series)
        first, last = np.searchsorted(self.key, key), np.searchsorted(self.key, key, "right")
        count = last - first
        if count.any():
            window = np.repeat(np.arange(len(key)), count)
            tail = (
                np.arange(int(count.sum()))
                - np.repeat(np.cumsum(count) - count, count)
                + np.repeat(first, count)
            )
            overlap = np.minimum(done.end[window], self.hi[tail]) - np.maximum(
                done.start[window], self.lo[tail]
            )
            np.subtract.at(self.left, tail, np.maximum(overlap, 0))
        at = np.searchsorted(self.keys, arrivals.key)
        hit = at < len(self.keys)
        hit[hit] = self.keys[at[hit]] == arrivals.key[hit]
        self.best[at[hit]] = np.maximum(self.best[at[hit]], arrivals.newest[hit])
        still = self._first_open()
        held = hit.copy()
        held[hit] = still[at[hit]] != NONE
        arrivals.newest[held] = np.minimum(arrivals.newest[held], still[at[held]] - 1)
        closed = before & (still == NONE) & (self.best != NONE)
        if closed.any():  # the last tail of these keys is in: the newest point they brought, whichever slab
            arrivals.add_newest(self.keys[closed], self.best[closed])

    def _first_open(self) -> np.ndarray:
        """Per key, the start of its first tail not yet committed (NONE: all are)."""
        starts = np.where(self.left > 0, self.lo, np.iinfo(np.int64).max)
        heads = np.searchsorted(self.key, self.keys)
        first = np.minimum.reduceat(starts, heads)
        return np.where(first == np.iinfo(np.int64).max, NONE, first)

    def _open_keys(self) -> np.ndarray:
        open_: np.ndarray = self._first_open() != NONE
        return open_
