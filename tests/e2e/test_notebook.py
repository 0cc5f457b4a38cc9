"""A notebook that behaves (issue 43): a real Jupyter kernel (ipykernel, driven by nbclient) runs cells that
use etl against the emulator, as an analyst's notebook would. A run shows its progress in the cell and its
summary as a short line and a table; an error is its one line; the kernel's interrupt stops a run that is
fetching, with the checkpoint promise of Ctrl-C, its progress line ending as its summary does (issue 54), and
the run after it resumes exactly; a run with nothing to fetch says so."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator

import pytest

from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.checks import assert_exact, assert_output_matches_state
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import emulator_config
from tests.support.expected import SOURCE
from tests.support.output import checkpoints
from tests.support.pipeline import run

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


@pytest.fixture
def slow_emulator() -> Iterator[RunningEmulator]:
    """A fraction of a second per answer: a run lasts long enough to be interrupted while it fetches."""
    with run_emulator(emulator_config()) as running:
        running.set_faults(latency=0.3)
        yield running


def test_a_notebook_shows_progress_and_summary_short_errors_and_stops_on_an_interrupt(
    emulator, slow_emulator, tmp_path
):
    good = write_config(tmp_path / "good.yaml", config_dict(emulator.base_url, tmp_path / "good"))
    wrong = config_dict(emulator.base_url, tmp_path / "wrong")
    wrong["source"]["password"] = "not-the-password"
    wrong_path = write_config(tmp_path / "wrong.yaml", wrong)
    slow = config_dict(
        slow_emulator.base_url,
        tmp_path / "slow",
        window={"overlap": "0s"},
        extract={"concurrency": 2, "slabs_in_flight": 1},
    )
    slow_path = write_config(tmp_path / "slow.yaml", slow)
    cells = [
        "import etl",
        f"summary = etl.run({str(good)!r})\nsummary",  # progress shown by default, then the summary
        f"etl.run({str(wrong_path)!r})",
        f"etl.run({str(slow_path)!r})",  # interrupted while it fetches
        f"again = etl.run({str(good)!r})\nagain.status",  # a run after the interrupt: nothing left over
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    checkpointed = tmp_path / "slow" / "_state" / SOURCE / "log"

    async def interrupt_once_a_slab_is_checkpointed() -> None:
        while not list(checkpointed.glob("*.json")):  # the run is fetching, some windows are written
            await asyncio.sleep(0.01)
        interrupted = client.km.interrupt_kernel()
        if inspect.isawaitable(interrupted):
            await interrupted

    async def execute() -> None:
        async with client.async_setup_kernel():
            for index, cell in enumerate(notebook.cells):
                interrupt = (
                    asyncio.ensure_future(interrupt_once_a_slab_is_checkpointed()) if index == 3 else None
                )
                await client.async_execute_cell(cell, index)
                if interrupt is not None:
                    await interrupt

    asyncio.run(execute())
    outputs = [cell.outputs for cell in notebook.cells]

    # Progress: a line that updated itself in place (IPython's display, no widget package), ending full.
    shown = [o for o in outputs[1] if o["output_type"] == "display_data"]
    assert len(shown) == 1 and "<progress" in shown[0]["data"]["text/html"], outputs[1]
    result = next(o for o in outputs[1] if o["output_type"] == "execute_result")
    line = result["data"]["text/plain"]
    run_id = line.split("run_id='", 1)[1].split("'", 1)[0]
    record = json.loads((tmp_path / "good" / "_runs" / f"{run_id}.json").read_bytes())
    windows = sum(s["windows"] for s in record["series"].values())
    assert windows and f"windows {windows}/{windows}" in shown[0]["data"]["text/plain"]
    assert "ipywidgets" not in json.dumps(outputs[1])
    # The summary: one short line, and a table.
    assert line.startswith("RunSummary(run_id=") and "status='ok'" in line and "\n" not in line
    assert "defaultdict" not in line and len(line) < 200
    assert "<table>" in result["data"]["text/html"] and "points" in result["data"]["text/html"]

    # An error is its line, not the frames of etl's internals.
    (error,) = [o for o in outputs[2] if o["output_type"] == "error"]
    assert error["ename"] == "AuthError" and "sign-in refused" in error["evalue"]
    assert len(error["traceback"]) <= 2 and "Traceback" not in "".join(error["traceback"])

    # The interrupt stopped the run: the cell raised Interrupted (not KeyboardInterrupt) once it stopped.
    (error,) = [o for o in outputs[3] if o["output_type"] == "error"]
    assert error["ename"] == "Interrupted" and "run again to resume" in error["evalue"], error
    assert len(error["traceback"]) <= 2
    records = [json.loads(p.read_bytes()) for p in (tmp_path / "slow" / "_runs").glob("*.json")]
    assert [r["status"] for r in records] == ["interrupted"]
    done = sum(s["windows"] for s in records[0]["series"].values())
    planned = sum(p["windows"] for p in records[0]["planned"].values())
    assert 0 < done < planned, (done, planned)  # stopped part-way, not after fetching everything
    # Its progress line ends as its summary does: the windows written, the points, what is left open.
    (shown,) = [o["data"]["text/plain"] for o in outputs[3] if o["output_type"] == "display_data"]
    left, stopped = records[0]["windows_not_done"], records[0]["stopped"]
    assert shown.startswith(f"windows {done}/{planned} written, {records[0]['points']:,} points"), shown
    assert left and f"{left} left open (stopped: {stopped})" in shown and "s left" not in shown, shown
    out = tmp_path / "slow"
    assert_output_matches_state(out, checkpoints(out))  # finished windows checkpointed, the rest open

    (result,) = [o for o in outputs[4] if o["output_type"] == "execute_result"]
    assert result["data"]["text/plain"] == "'ok'"
    # A run with nothing to fetch says so, not an empty bar.
    (shown,) = [o["data"] for o in outputs[4] if o["output_type"] == "display_data"]
    assert shown["text/plain"] == "nothing new: the checkpoints already cover this window"
    assert "<progress" not in shown["text/html"]
    assert not [o for o in outputs[4] if o["output_type"] == "error"]

    slow_emulator.set_faults(latency=0)
    run(make_config(slow_emulator.base_url, out, window={"overlap": "0s"}))
    assert_exact(out)
