"""What a run's record says when it is stopped before the run itself could say so."""

from __future__ import annotations

import pytest

import etl
from etl.errors import Interrupted
from etl.pipeline.coordinator import Coordinator
from tests.support.configs import make_config


def test_a_ctrl_c_before_the_signal_handlers_leaves_a_record_that_says_interrupted(tmp_path, monkeypatch):
    def ctrl_c(self: Coordinator) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Coordinator, "_handle_signals", ctrl_c)  # the signal lands before they are in place
    config = make_config("http://127.0.0.1:9", tmp_path / "out")  # never asked anything
    with pytest.raises(Interrupted) as caught:
        etl.run(config)
    summary = caught.value.summary
    assert summary is not None and summary.status == "interrupted" and summary.error == "interrupted"
