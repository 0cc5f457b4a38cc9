"""The server: the probes of etl/ops/probe.py against the config, and the last checkpointed day against what
the server has now."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from etl.client import MonitoringClient
from etl.config import Config
from etl.errors import EtlError
from etl.model import ParamKind, Series, Window
from etl.ops.doctor.deployment import SOURCE_SAMPLES, Deployment
from etl.ops.findings import Finding, fail, ok, warn
from etl.ops.init import report as probe_report
from etl.ops.probe import Findings, Prober
from etl.pipeline.counts import Counts
from etl.pipeline.fetch import fetch_window
from etl.timeutil import DAY_MS, MINUTE_MS, iso


def compare(config: Config, found: Findings) -> list[Finding]:
    """The probe's findings against the config: what a run would stumble on, and what it could do better."""
    source, extract = config.source, config.extract
    out: list[Finding] = []
    if found.base_url != source.base_url:
        out.append(
            fail(
                "server.base_url",
                f"{source.base_url}/auth/login is not there; the service lives at {found.base_url}",
                f"set source.base_url: {found.base_url}",
            )
        )
    if found.sign_in != source.sign_in:
        ways = {"query": "query parameters", "form": "a form body"}
        out.append(
            fail(
                "server.sign_in",
                f"the server refuses credentials as {ways[source.sign_in]}; it takes {ways[found.sign_in]}",
                f"set source.sign_in: {found.sign_in}",
            )
        )
    if found.count_cap is not None and extract.max_points > found.count_cap:
        out.append(
            warn(
                "server.count",
                f"answers are cut at {found.count_cap} points but extract.max_points asks {extract.max_points}: "
                "runs learn the cap with extra requests",
                f"set extract.max_points: {found.count_cap}",
            )
        )
    elif found.count_refused_over is not None and extract.max_points >= found.count_refused_over:
        out.append(
            warn(
                "server.count",
                f"the server refuses count={found.count_refused_over}; extract.max_points asks {extract.max_points}",
                f"set extract.max_points below {found.count_refused_over}",
            )
        )
    if extract.concurrency != "auto" and extract.concurrency * 2 < found.suggested_concurrency:
        out.append(
            warn(
                "server.latency",
                f"answers take {found.latency_ms} ms; extract.concurrency {extract.concurrency} leaves runs waiting",
                f"set extract.concurrency: {found.suggested_concurrency}",
            )
        )
    # The rest as the probe reports it, but what was compared (and the probe's own request count: the
    # doctor gives its total).
    compared = {f.check.removeprefix("server.") for f in out} | {"requests"}
    for line in probe_report(found):
        if line.check not in compared:
            out.append(Finding(f"server.{line.check}", line.status, line.message, line.fix))
    return out


async def checkpoints_ahead_of_source(client: MonitoringClient, d: Deployment) -> list[Finding]:
    """The last checkpointed day of a few raw parameters, up to where the next run reads again (from
    just after their newest point, at most window.late_max back, less the overlap): the server must not
    hold points there that the output lacks. If it does, they reached it after a run had read past them
    and the next run will not: out of order, later than late_max, or its clock is behind ours."""
    check = "checkpoints.source"
    overlap, late_max = d.config.window.overlap, d.config.window.late_max
    candidates: list[tuple[int, int, int]] = []
    for store, coverage in d.stores:
        ids, starts, ends = coverage.of_series(Series.RAW)
        if not len(ids):
            continue
        last = np.r_[ids[1:] != ids[:-1], True]  # each parameter's last interval
        newest = store.arrivals.newest_of(Series.RAW, ids[last])
        for pid, start, end, seen in zip(
            ids[last].tolist(), starts[last].tolist(), ends[last].tolist(), newest.tolist(), strict=True
        ):
            again = max(seen + 1, d.now - late_max) if late_max else end  # the next run reads from here
            low, high = max(start, end - DAY_MS), min(end, d.now, again) - overlap
            if high - low >= MINUTE_MS:
                candidates.append((pid, low, high))
    if not candidates or "raw" not in d.views():
        return [ok(check, "no raw checkpoint with stored data to compare with the server")]
    picked = [
        candidates[round(i * (len(candidates) - 1) / max(SOURCE_SAMPLES - 1, 1))]
        for i in range(SOURCE_SAMPLES)
    ]
    out, compared = [], 0
    for pid, low, high in dict.fromkeys(picked):
        stored, kind, object_id = _stored(d, pid, low, high)
        if kind is None:
            continue
        window = Window(pid, object_id, ParamKind(kind), Series.RAW, low, high)
        data = await fetch_window(client, window, d.config.extract.max_points, Counts())
        server = int(np.count_nonzero(data.ts < high))
        compared += 1
        if server > stored:
            out.append(
                fail(
                    check,
                    f"param {pid}: the server has {server - stored} point(s) in {iso(low)}..{iso(high)} that the "
                    "output lacks and no run will read again: they reached the server after a run had read past "
                    "them (out of order, later than window.late_max), or its clock is behind",
                    f"etl run {d.cmd} --full-refresh --from {iso(low)} --to {iso(high)}; then set "
                    "window.overlap (out of order) or window.late_max (late) to cover how late they come",
                )
            )
        elif server < stored:
            out.append(
                warn(
                    check,
                    f"param {pid}: the output holds {stored - server} point(s) more than the server now has in "
                    f"{iso(low)}..{iso(high)}",
                    "the server dropped data, or another instance wrote under this source name",
                )
            )
    return out or [ok(check, f"the last checkpointed day of {compared} parameter(s) matches the server")]


def _stored(d: Deployment, pid: int, low: int, high: int) -> tuple[int, str | None, int]:
    """Stored raw points of a parameter in [low, high), its kind and object (from any of its rows)."""
    name = d.config.source.name
    since = datetime.fromtimestamp(low / 1000, UTC)
    until = datetime.fromtimestamp(high / 1000, UTC)
    [(count, kind, object_id)] = d.query(
        "select count(*), any_value(kind), any_value(object_id) from raw where param_id = ? "
        "and ts >= ? and ts < ? and coalesce(source, ?) = ?",
        [pid, since, until, name, name],
    )
    if kind is None:
        row = d.query(
            "select kind, object_id from raw where param_id = ? and coalesce(source, ?) = ? limit 1",
            [pid, name, name],
        )
        kind, object_id = row[0] if row else (None, 0)
    return int(count), kind, int(object_id or 0)


async def server_checks(d: Deployment) -> tuple[list[Finding], int]:
    source, build = d.config.source, d.build
    prober = Prober(source.base_url, source.username, build.password, build.client_options)
    async with prober:
        try:
            found = await prober.run()
        except EtlError as exc:
            return [fail("server", str(exc), "fix what it says, then etl doctor again")], prober.requests
        out = compare(d.config, found)
        if "checkpoints" in d.checks:
            try:
                out += await checkpoints_ahead_of_source(prober.client, d)
            except EtlError as exc:
                out.append(fail("checkpoints.source", f"could not compare: {exc}"))
        return out, prober.requests
