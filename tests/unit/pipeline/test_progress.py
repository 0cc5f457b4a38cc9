"""The progress line counts as the summary does (issue 54): windows written, failed, left open by a stop."""

from __future__ import annotations

from etl.pipeline.progress import NOTHING_NEW, Progress, ProgressLine


def test_the_line_says_what_is_written_failed_and_left_open():
    assert (
        ProgressLine(54, 11, 3697, left=12.4).text() == "windows 11/54 written, 3,697 points, about 12s left"
    )
    stopped = ProgressLine(54, 11, 3697, failed=2, left_open=41, stopped="run_deadline")
    assert (
        stopped.text()
        == "windows 11/54 written, 3,697 points, 2 failed, 41 left open (stopped: run deadline)"
    )
    assert '<progress value="11" max="54"' in stopped._repr_html_()


def test_nothing_to_fetch_is_said_not_drawn():
    line = ProgressLine(0)
    assert line.text() == NOTHING_NEW and "<progress" not in line._repr_html_()


def test_progress_counts_windows_written_and_failed_not_planned():
    progress = Progress(10, enabled=False)
    progress.advance(3, 300, failed=1)
    progress.advance(0, 0, failed=2)
    progress.close(left_open=4, stopped="signal")
    line = progress.line
    assert (line.done, line.failed, line.points, line.left_open, line.left) == (3, 3, 300, 4, None)
