"""etl verify's sample and comparison, without a server: the sample's size, strata and order, drawn again
by its seed; settled candidates; rows missing, extra and changed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from etl.config import parse_config
from etl.model import PARAM_KINDS, ParamKind, Params, Series, Window
from etl.ops.verify.compare import compare
from etl.ops.verify.sample import Sample, candidates
from etl.pipeline.clean import WindowData
from etl.state import Coverage
from etl.state.arrivals import Arrivals
from etl.state.coverage import key_of
from etl.timeutil import DAY_MS, HOUR_MS

T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
DAYS = 30


def fleet(count: int = 40) -> Params:
    ids = np.arange(1001, 1001 + count, dtype=np.int64)
    kinds = np.array(
        [PARAM_KINDS.index(ParamKind.CALCULATED if i % 10 == 0 else ParamKind.PHYSICAL) for i in ids], np.int8
    )
    return Params(ids, ids // 100, kinds)


def config(**window):
    return parse_config(
        {
            "source": {"base_url": "http://127.0.0.1:1/x", "username": "u", "password": "p"},
            "window": {"start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z", **window},
            "sink": {"path": "/tmp/never-written"},
        }
    )


def covered(params: Params, days: int = DAYS) -> Coverage:
    """Every parameter's series covered from T0 for `days` days, the odd ones with a day missing."""
    keys, starts, ends = [], [], []
    for series in Series:
        for pid in params.id.tolist():
            key = int(key_of(np.array([pid]), series)[0])
            if pid % 2:
                keys += [key, key]
                starts += [T0, T0 + 11 * DAY_MS]
                ends += [T0 + 10 * DAY_MS, T0 + days * DAY_MS]
            else:
                keys.append(key)
                starts.append(T0)
                ends.append(T0 + days * DAY_MS)
    return Coverage.of(np.array(keys), np.array(starts), np.array(ends))


def drawn(fraction: float, seed: int, params: Params | None = None, **window) -> tuple[Sample, list]:
    params = params if params is not None else fleet()
    found, _ = candidates(
        config(late_max="off", revisions="off", **window),
        covered(params),
        Arrivals(),
        params,
        T0,
        T0 + DAYS * DAY_MS,
        T0 + 40 * DAY_MS,
    )
    sample = Sample(found, params, fraction, seed)
    windows = [
        (w.series.value, int(p), int(s), int(e))
        for w in sample.spans()
        for p, s, e in zip(w.param_id, w.start, w.end, strict=True)
    ]
    return sample, windows


def test_all_is_every_checkpointed_window_once_newest_span_first():
    sample, windows = drawn(1.0, 1)
    raw = [w for w in windows if w[0] == "raw"]
    assert len(raw) == 40 * DAYS - 20  # the odd parameters lack a day
    assert len(set(windows)) == len(windows) == sample.size == sample.candidates
    ends = [w[3] for w in windows]
    assert ends[0] == T0 + DAYS * DAY_MS and raw[-1][2] == T0  # the newest first, the oldest last
    assert all(e - s <= DAY_MS and s // DAY_MS == (e - 1) // DAY_MS for _, _, s, e in raw)


@pytest.mark.parametrize("fraction", [0.01, 0.2, 0.5])
def test_a_fraction_is_exactly_its_share_with_each_stratum_s_newest_window_when_it_fits(fraction):
    sample, windows = drawn(fraction, 7)
    assert len(windows) == len(set(windows)) == math.ceil(round(fraction * sample.candidates, 6))
    newest = {(series, pid) for series, pid, _, e in windows if e == T0 + DAYS * DAY_MS}
    strata = 40 * 3
    if len(windows) >= strata:  # every (parameter, series), its newest window
        assert len(newest) == strata
    else:  # as many strata as fit, each by its newest window
        assert len(newest) == len(windows)


def test_the_seed_draws_the_same_sample_again_and_another_seed_another():
    _, first = drawn(0.1, 42)
    _, again = drawn(0.1, 42)
    _, other = drawn(0.1, 43)
    assert first == again and first != other


def test_the_stretch_the_next_run_reads_again_is_left_out():
    """A calculated parameter's last `window.revisions`, and a parameter's late tail from its newest point."""
    params = fleet(10)
    coverage = covered(params, 2)
    now = T0 + 2 * DAY_MS
    newest = np.full(len(params), now - 1, np.int64)  # each parameter's newest point came at the end...
    newest[1] = now - 5 * HOUR_MS  # ...but 1002's, 5 h before: those 5 h are its late tail
    arrivals = Arrivals()
    for series in Series:
        arrivals.add_newest(key_of(params.id, series), newest)
    found, scope = candidates(config(), coverage, arrivals, params, T0, now, now)
    raw = next(c for c in found if c.series is Series.RAW)
    ends = dict(zip(raw.param_id.tolist(), raw.end.tolist(), strict=False))
    assert ends[1002] == newest[1] + 1  # the tail starts just after the newest point
    assert ends[1003] == now  # a punctual parameter: all of it
    assert ends[1010] == now - 6 * HOUR_MS  # calculated: revisions (6 h by default) are the next run's
    assert scope.unsettled >= 2 and scope.unlisted == 0


def window_data(ts, values) -> WindowData:
    window = Window(1001, 1, ParamKind.PHYSICAL, Series.RAW, 0, 100)
    return WindowData(window, np.array(ts, np.int64), {"value": np.array(values, np.float64)})


def test_rows_missing_extra_twice_and_changed_are_told_apart():
    source = window_data([10, 20, 30, 40], [1.0, 2.0, 3.0, 4.0])
    diff = compare(
        source, np.array([10, 20, 20, 35, 40], np.int64), {"value": np.array([1.0, 2.0, 2.0, 9.0, 4.5])}
    )
    assert (diff.missing, diff.extra, diff.changed) == (1, 2, 1)
    assert [e.ts for e in diff.examples["missing"]] == [30]
    assert sorted(e.ts for e in diff.examples["extra"]) == [20, 35]
    assert [(e.ts, e.source, e.output) for e in diff.examples["changed"]] == [(40, (4.0,), (4.5,))]
    same = compare(source, source.ts, source.values)
    assert not same.differs and same.examples == {}
