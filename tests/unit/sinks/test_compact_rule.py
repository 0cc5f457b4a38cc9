"""Which day partitions a run's upkeep compacts (etl/sinks/lake/common.py: to_compact)."""

from etl.sinks.lake.common import MANY_FILES, DayFiles, to_compact
from etl.timeutil import DAY_MS


def day(n: int, small: int) -> DayFiles:
    return DayFiles(day=n, files=small, small=small)


def test_a_day_that_is_over_keeps_one_file_per_bucket_and_loses_more():
    horizon = 10 * DAY_MS  # days 0..9 are over
    days = [day(1, 4), day(2, 5), day(3, 1), day(10, 4), day(11, MANY_FILES + 1)]
    picked = to_compact(days, horizon, None, keep=4)
    # day 1: a backfill's four bucket files stay; day 2: one more than that is merged; day 10 is not over;
    # day 11 is not over either but has too many small files
    assert [d.day for d in picked] == [11, 2]
    assert [d.day for d in to_compact(days, horizon, None)] == [11, 2, 1]  # keep 1: every day with several
    assert [d.day for d in to_compact(days, None, None, keep=4)] == [11, 10, 2, 1]  # etl compact: all
    assert [d.day for d in to_compact(days, horizon, 1, keep=4)] == [11]  # newest first, at most the limit
