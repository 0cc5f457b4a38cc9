"""The state: checkpoints past now, the last runs, locks held by runs that are gone."""

from __future__ import annotations

import os
from datetime import datetime
from typing import TypedDict

import numpy as np
import orjson

from etl.dataset import verified
from etl.model import SERIES
from etl.ops.doctor.deployment import HOST, Deployment, alive, human, shard_of
from etl.ops.findings import Finding, fail, ok, warn
from etl.pipeline.summary import Backfill
from etl.state.lock import LOCK_FILE, Holder
from etl.timeutil import MINUTE_MS, iso, parse_time


class StoredLate(TypedDict, total=False):
    points: int
    longest_seconds: float
    quiet_past_late_max: int
    back_past_late_max: int


class StoredRun(TypedDict, total=False):
    """A run's record as read back from `_runs/` (`RunSummary.as_dict`): the keys the checks read, any
    of which a record another version wrote may lack."""

    run_id: str
    source: str
    shard: str | None
    status: str
    error: str | None
    started: str
    seconds: float
    failed_window_count: int
    failed_windows: list[str]
    late: StoredLate


def checkpoints_ahead_of_now(d: Deployment) -> list[Finding]:
    out = []
    for store, coverage in d.stores:
        ahead = coverage.end > d.now + d.limits.future_ms
        if not ahead.any():
            continue
        keys = np.unique(coverage.key[ahead]).tolist()
        params = sorted({k // 4 for k in keys})
        series = sorted({SERIES[k % 4].value for k in keys})
        shard = shard_of(store)
        options = " ".join(
            [f"--param {p}" for p in params[:5]]
            + [f"--series {s}" for s in series]
            + ([f"--shard {shard}"] if shard else [])
        )
        out.append(
            fail(
                "checkpoints.now",
                f"{len(keys)} checkpoint(s) of {len(params)} parameter(s)"
                + (f" (shard {shard})" if shard else "")
                + f" reach past now, up to {iso(int(coverage.end[ahead].max()))}: runs skip that span until "
                "the clock gets there",
                f"etl state reset {d.cmd} {options} --yes"
                + (" (and the other parameters)" if len(params) > 5 else "")
                + "; then find what set window.end or the clock ahead",
            )
        )
    if out:
        return out
    count = sum(len(c) for _, c in d.stores)
    return [ok("checkpoints.now", f"{count} checkpoint(s), none past now" if count else "no checkpoint yet")]


def runs(d: Deployment) -> list[Finding]:
    """The last runs' records: how the last one ended, the windows that failed, the last success's age."""
    storage, limits = d.build.data, d.limits
    names = sorted(n for n in storage.listdir("_runs") if n.endswith(".json"))[-limits.runs :]
    records: list[StoredRun] = []
    for body in storage.read_many([f"_runs/{n}" for n in names]):
        try:
            record: StoredRun | None = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            record = None
        if (
            isinstance(record, dict)
            and "run_id" in record
            and record.get("source") in (None, d.config.source.name)
        ):
            records.append(record)
    killed = _killed(d, records)
    if not records:
        status = fail if limits.max_age_ms else warn
        if killed:
            return [status("runs.last", *_killed_finding(d, *next(iter(killed.items()))))]
        return [status("runs.last", f"no run recorded in {storage.display('_runs')}", f"etl run {d.cmd}")]
    out = []
    latest: dict[str | None, StoredRun] = {}
    for record in records:  # oldest first: the last of each shard stays
        latest[record.get("shard")] = record
    for shard, record in sorted(latest.items(), key=lambda kv: str(kv[0])):
        where = f" (shard {shard})" if shard else ""
        if shard in killed:  # after this record, a run that left none
            out.append(warn("runs.last", *_killed_finding(d, shard, killed[shard])))
            continue
        path = storage.display(f"_runs/{record.get('run_id')}.json")
        failed = int(record.get("failed_window_count") or 0)
        if failed:
            first = (record.get("failed_windows") or ["?"])[0]
            again = _failing_again(records, shard, set(record.get("failed_windows") or []))
            out.append(
                fail(
                    "runs.last",
                    f"the last run {record['run_id']}{where} left {failed} window(s) failed (first: {first})"
                    + (f"; {again} of them failed in the run before too" if again else ""),
                    f"the next run retries them; if they keep failing, read the errors in {path}",
                )
            )
        elif record.get("status") == "failed":
            out.append(
                fail(
                    "runs.last",
                    f"the last run {record['run_id']}{where} failed: {record.get('error')}",
                    f"fix the cause (see {path}), then etl run {d.cmd}",
                )
            )
        elif record.get("status") == "interrupted":
            out.append(
                warn(
                    "runs.last",
                    f"the last run {record['run_id']}{where} was interrupted; the next run resumes",
                )
            )
    if not out:
        last = records[-1]
        out.append(ok("runs.last", f"the last run {last['run_id']} was ok ({len(records)} run(s) read)"))
    out.append(_age(d, records))
    out.append(_late(d, records))
    out.extend(_backfill(d))
    return out


STALLED_AFTER = 3  # runs in a row that loaded no history while some was left: a backfill has stopped


def _backfill(d: Deployment) -> list[Finding]:
    """The history still to load (etl/state/store.py `progress`): a warning while a backfill makes
    progress, a failure once the last runs stopped loading any."""
    out = []
    for store, _ in d.stores:
        runs = store.progress()
        if not runs or not runs[-1].left_ms:
            continue
        shard = shard_of(store)
        where = f" (shard {shard})" if shard else ""
        left = Backfill.of(runs)
        recent = runs[-STALLED_AFTER:]
        if len(recent) == STALLED_AFTER and recent[-1].left_ms >= recent[0].left_ms:
            out.append(
                fail(
                    "runs.backfill",
                    f"the history still to load{where} did not shrink in the last {STALLED_AFTER} runs: "
                    f"{left.text()}",
                    "see what stops the runs (failed windows, retry.run_deadline reached before any history "
                    f"is fetched: etl doctor's runs.last, etl plan {d.cmd})",
                )
            )
        else:
            out.append(warn("runs.backfill", f"history still loading{where}: {left.text()}"))
    return out or [ok("runs.backfill", "no history left to load")]


def last_verify(d: Deployment) -> list[Finding]:
    """The last `etl verify` of this source: when, and whether the output equalled the source."""
    record = verified.last(d.build, d.config.source.name)
    if record is None:
        return [
            ok(
                "runs.verify",
                f"no verify yet: 'etl verify {d.cmd} --sample 0.01' every night proves the output equals the "
                "source at a known cost",
            )
        ]
    finished = str(record.get("finished") or "")
    age = f", {human(d.now - parse_time(finished))} ago" if finished else ""
    when = f"the last verify ({finished or record.get('verify_id')}{age})"
    figures = (
        f"{record.get('verified', 0)} of {record.get('candidates', 0)} checkpointed window(s), seed "
        f"{record.get('seed')}"
    )
    status = record.get("status")
    if status == "differs":
        return [
            fail(
                "runs.verify",
                f"{when} found {record.get('differing')} window(s) different from the source "
                f"({record.get('missing')} row(s) missing, {record.get('extra')} extra, "
                f"{record.get('changed')} changed) in {figures}",
                f"etl verify {d.cmd} --seed {record.get('seed')} --repair",
            )
        ]
    if status == "failed":
        return [
            warn(
                "runs.verify",
                f"{when} could not read {record.get('failed')} window(s) from the source: {record.get('first_failure')}",
            )
        ]
    return [ok("runs.verify", f"{when}: {status}, {figures}")]


def _late(d: Deployment, records: list[StoredRun]) -> Finding:
    """How late the last runs found points to be, and parameters quiet for longer than late_max."""
    late = [r.get("late") or {} for r in records]
    points = sum(int(f.get("points") or 0) for f in late)
    longest = max((float(f.get("longest_seconds") or 0) for f in late), default=0.0)
    back = sum(int(f.get("back_past_late_max") or 0) for f in late)
    quiet = int(late[-1].get("quiet_past_late_max") or 0)
    late_max = d.config.window.late_max
    text = (
        f"{points} point(s) reached the platform late in the last {len(records)} run(s), the longest "
        f"{human(int(longest * 1000))} after its stamp"
        if points
        else f"no point reached the platform late in the last {len(records)} run(s)"
    )
    if back:
        return warn(
            "runs.late",
            f"{text}; {back} time(s) a parameter came back after more than window.late_max "
            f"({human(late_max)}) with older points (fetched once, when it came back)",
            f"if parameters often stay quiet that long, raise window.late_max above {human(int(longest * 1000))}",
        )
    if quiet:
        return warn(
            "runs.late",
            f"{text}; {quiet} parameter(s) quiet for longer than window.late_max ({human(late_max)})",
            "what they upload for older times is fetched once they send again; check the devices",
        )
    return ok("runs.late", text)


def _killed(d: Deployment, records: list[StoredRun]) -> dict[str | None, Holder]:
    """Per shard, the holder of a local state lock that is free now, written by a run that left no record:
    a run killed before it could write one (SIGKILL, out of memory, a reboot). A run's record spans the
    moment it took the lock; the lock keeps its last holder."""
    killed: dict[str | None, Holder] = {}
    for store, _ in d.stores:
        storage = store.storage
        if not storage.local or _flocked(storage.full(LOCK_FILE)):
            continue  # object stores: a lease left behind is the locks check's
        holder = _holder(storage.read(LOCK_FILE))
        took = _ms(str(holder.get("since") or ""))
        if holder.get("command") != "run" or not took:
            continue
        shard = shard_of(store)
        name = str(shard) if shard else None
        spans = [
            (_ms(r["started"]), _ms(r["started"]) + int(float(r.get("seconds") or 0) * 1000))
            for r in records
            if r.get("shard") == name and r.get("started")
        ]
        # `started` is written to the second: a record may start up to a second after the lock's stamp.
        if not any(start - 1000 <= took <= end + 1000 for start, end in spans):
            killed[name] = holder
    return killed


def _killed_finding(d: Deployment, shard: str | None, holder: Holder) -> tuple[str, str]:
    where = f" (shard {shard})" if shard else ""
    return (
        f"a run{where} that started at {holder.get('since')} (pid {holder.get('pid')} on {holder.get('host')}) "
        "was killed before it finished: it left no record (SIGKILL, out of memory, a reboot?)",
        f"etl run {d.cmd} resumes from its checkpoints; if runs keep dying, look at the scheduler's "
        "logs and the machine's memory",
    )


def _failing_again(records: list[StoredRun], shard: str | None, failed: set[str]) -> int:
    mine = [r for r in records if r.get("shard") == shard]
    return len(failed & set(mine[-2].get("failed_windows") or [])) if len(mine) > 1 else 0


def _age(d: Deployment, records: list[StoredRun]) -> Finding:
    finished = [
        _ms(r["started"]) + int(float(r.get("seconds") or 0) * 1000)
        for r in records
        if r.get("status") == "ok" and r.get("started")
    ]
    max_age = d.limits.max_age_ms
    if not finished:
        status = fail if max_age else warn
        return status(
            "runs.age",
            f"none of the last {len(records)} run(s) succeeded",
            "read the last run's error in _runs/",
        )
    age = d.now - max(finished)
    text = f"the last successful run finished {human(age)} ago ({iso(max(finished))})"
    if max_age and age > max_age:
        return fail(
            "runs.age",
            f"{text}, more than --max-age {human(max_age)}",
            "check the scheduler (cron, Airflow) and the last runs' errors",
        )
    return ok("runs.age", text)


def _ms(stamp: str) -> int:
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except (ValueError, TypeError):
        return 0  # a record from elsewhere: as old as can be


def locks(d: Deployment) -> list[Finding]:
    """A run lock held by a run that is gone. Locally the lock is an flock the kernel drops when its holder
    dies, unless a process the run started keeps the file open; on object stores a lease that expires."""
    out = []
    for store, _ in d.stores:
        storage = store.storage
        holder = _holder(storage.read(LOCK_FILE))
        where = storage.display(LOCK_FILE)
        pid, host, since = holder.get("pid"), holder.get("host"), holder.get("since")
        gone = host == HOST and isinstance(pid, int) and not alive(pid)
        if storage.local:
            if not _flocked(storage.full(LOCK_FILE)):
                continue
            if gone:
                out.append(
                    fail(
                        "locks",
                        f"the state lock {where} is held, but the run that took it (pid {pid}, since {since}) is "
                        "gone: a process it started keeps the lock open, and runs exit 8 until it ends",
                        f"find it with: fuser -v {storage.full(LOCK_FILE)}; stop it",
                    )
                )
            else:
                out.append(
                    ok("locks", f"a run holds the state lock now (pid {pid} on {host}, since {since})")
                )
            continue
        if "token" not in holder:
            continue
        expires = float(holder.get("expires") or 0) * 1000
        if expires <= d.now:
            out.append(
                warn(
                    "locks",
                    f"the state lock {where} was left by a run that did not finish (pid {pid} on {host}, "
                    f"since {since}); the next run takes it over",
                )
            )
        elif gone:
            status = fail if expires - d.now > 10 * MINUTE_MS else warn
            out.append(
                status(
                    "locks",
                    f"a run that is gone (pid {pid} on {host}) holds the state lock {where} until "
                    f"{iso(int(expires))}: runs exit 8 until then",
                    f"wait, or remove {where} if no run of this state is alive",
                )
            )
        else:
            out.append(ok("locks", f"a run holds the state lock (pid {pid} on {host}, since {since})"))
    return out or [ok("locks", f"no run holds the state lock ({len(d.stores)} store(s))")]


def _holder(data: bytes | None) -> Holder:
    try:
        held: Holder = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError:
        held = {}
    return held if isinstance(held, dict) else {}


def _flocked(path: str) -> bool:
    """Whether some process holds an flock on the file, read from /proc/locks: taking the lock even for a
    moment could make a run starting then exit 8."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    try:
        with open("/proc/locks") as handle:
            table = handle.read()
    except OSError:  # not Linux: a shared lock taken and dropped at once
        import fcntl

        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any("FLOCK" in line.split() and device in line.split() for line in table.splitlines())
