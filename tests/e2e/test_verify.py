"""`etl verify` against the emulator: each kind of drift between the output and the source is found by
`--sample all` (exit 11) and repaired by `--repair` to an output a new verify calls equal; a clean output
verifies at exit 0; `--max-requests` is never exceeded; a repair SIGKILLed part-way, run again, is exact.

The outputs are one day of the test fleet (8 parameters, every series), made once per format and copied by
each test that breaks something."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from etl.config import load_config, parse_config
from etl.errors import ExitCode
from etl.model import Series
from etl.ops.doctor import diagnose
from etl.sinks.output import Output
from etl.timeutil import DAY_MS, HOUR_MS, iso
from etl_emulator.lateness import Lateness
from etl_emulator.server import run_emulator
from tests.support.checks import assert_exact
from tests.support.cli import etl_main, etl_process
from tests.support.configs import config_dict, write_config
from tests.support.emulator import START, T0, emulator_config
from tests.support.expected import SERIES
from tests.support.kills import kill_when, temp_files
from tests.support.pipeline import run

END = iso(T0 + DAY_MS)
HALF = iso(T0 + 12 * HOUR_MS)
WINDOWS = 8 * len(SERIES)  # a day of 8 parameters in each series: one raw window, one aggregate window


def config_file(base_url: str, out: Path | str, folder: Path, fmt: str = "parquet", **sections) -> Path:
    data = config_dict(
        base_url,
        out,
        window={"end": END, "overlap": "0s"},
        sink={"format": fmt, "path": str(out)},
        **sections,
    )
    return write_config(folder / "c.yaml", data)


def verify(capsys, path: Path, *options: str) -> tuple[int, dict]:
    """`etl verify -c PATH --json OPTIONS` through the CLI's entry point: (exit code, the JSON result)."""
    code, out, err = etl_main(capsys, "verify", "-c", str(path), "--json", *options)
    assert out, err
    return code, json.loads(out)


def found_and_repaired(capsys, path: Path, out: Path, series=SERIES, **expected: int) -> dict:
    """Verify finds the drift (exit 11, the counts `expected` says), --repair rewrites it, a new verify
    calls the output equal, and the output is the source's."""
    code, found = verify(capsys, path)
    assert code == ExitCode.DIFFERS, found
    assert found["status"] == "differs" and found["verified"] == found["candidates"] == 8 * len(series)
    for name, count in expected.items():
        assert found[name] == count, (name, found)
    assert found["windows"] and all(w["examples"] for w in found["windows"])
    code, repaired = verify(capsys, path, "--repair")
    assert code == 0, repaired
    assert repaired["status"] == "repaired" and repaired["repaired"]["differing"] == 0, repaired
    assert repaired["repaired"]["windows"] == found["differing"]
    code, again = verify(capsys, path)
    assert code == 0 and again["status"] == "equal" and again["differing"] == 0, again
    assert_exact(out, START, END, series=series)
    return found


@pytest.fixture(scope="module")
def outputs(emulator, tmp_path_factory) -> dict[str, Path]:
    """Parquet and Delta outputs of the day; and the Parquet data as it was at 12:00 ("half")."""
    made = {}
    for fmt in ("parquet", "delta"):
        root = tmp_path_factory.mktemp(fmt)
        out = root / "out"
        path = config_file(emulator.base_url, out, root, fmt)
        if fmt == "parquet":
            run(load_config(path), end=HALF)
            shutil.copytree(out, root / "half", ignore=shutil.ignore_patterns("_state", "_runs"))
        run(load_config(path))
        made[fmt] = out
    made["half"] = made["parquet"].parent / "half"
    return made


def copy(outputs: dict[str, Path], fmt: str, emulator, tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    shutil.copytree(outputs[fmt], out)
    return config_file(emulator.base_url, out, tmp_path, fmt), out


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_clean_output_verifies_at_exit_0_and_says_so_everywhere(emulator, outputs, tmp_path, capsys, fmt):
    if fmt == "parquet":
        path, out = copy(outputs, fmt, emulator, tmp_path)
    else:
        out = tmp_path / "out"
        path = config_file(emulator.base_url, out, tmp_path, fmt)
        run(load_config(path))
    html, prom = tmp_path / "v.html", tmp_path / "v.prom"
    code, result = verify(capsys, path, "-o", str(html), "--metrics-file", str(prom))
    assert code == 0, result
    assert result["status"] == "equal" and result["verified"] == result["candidates"] == WINDOWS
    assert result["missing"] == result["extra"] == result["changed"] == 0
    assert result["series"]["raw"]["source_rows"] == result["series"]["raw"]["output_rows"] > 0
    assert result["verdict"].startswith("verify: the output equals the source")
    assert "etl_verify_success" in prom.read_text() and 'etl_verify_windows{series="raw"' in prom.read_text()
    assert "data-ready" in html.read_text() and result["verdict"] in html.read_text()
    if fmt == "parquet":  # the text form ends with the verdict; doctor and the report show the last verify
        code, text, _ = etl_main(capsys, "verify", "-c", str(path), "--sample", "10%", "--seed", "7")
        assert code == 0 and text.strip().splitlines()[-1].startswith("verify: the output equals the source")
        assert "(a sample of 0.1, seed 7)" in text
        doctor = diagnose(parse_config(config_dict(emulator.base_url, out)), str(path), server=False)
        [finding] = [f for f in doctor.findings if f.check == "runs.verify"]
        assert finding.status == "ok" and "equal" in finding.message
        code, report, _ = etl_main(capsys, "report", "-c", str(path), "--json")
        assert json.loads(report)["verify"]["status"] == "equal"


def test_rows_deleted_from_a_parquet_file(emulator, outputs, tmp_path, capsys):
    path, out = copy(outputs, "parquet", emulator, tmp_path)
    [file] = out.glob("raw/date=*/*.parquet")
    rows = pq.read_table(file)
    gone = pc.and_(
        pc.equal(rows.column("param_id"), 1002),
        pc.less(pc.cast(rows.column("ts"), "int64"), T0 + 6 * HOUR_MS),
    )
    pq.write_table(rows.filter(pc.invert(gone)), file)
    found = found_and_repaired(capsys, path, out, missing=pc.sum(gone).as_py(), extra=0, changed=0)
    assert [(w["series"], w["param_id"]) for w in found["windows"]] == [("raw", 1002)]


def test_a_partition_file_removed(emulator, outputs, tmp_path, capsys):
    path, out = copy(outputs, "parquet", emulator, tmp_path)
    [file] = out.glob("average/date=*/*.parquet")
    averages = pq.read_table(file).num_rows
    file.unlink()
    found = found_and_repaired(capsys, path, out, missing=averages, extra=0, changed=0)
    assert found["series"]["average"]["differing"] == 8 and found["series"]["raw"]["differing"] == 0


def test_a_checkpoint_ahead_of_its_data(emulator, outputs, tmp_path, capsys):
    """The data restored from a backup taken at 12:00, its checkpoints from one taken at the day's end."""
    path, out = copy(outputs, "parquet", emulator, tmp_path)
    for folder in ("raw", "average", "candles", "quality"):
        shutil.rmtree(out / folder)
        shutil.copytree(outputs["half"] / folder, out / folder)
    found = found_and_repaired(capsys, path, out, extra=0, changed=0)
    assert found["differing"] == WINDOWS and found["missing"] > 0


def test_a_value_changed_in_a_delta_table(emulator, outputs, tmp_path, capsys):
    from deltalake import DeltaTable

    path, out = copy(outputs, "delta", emulator, tmp_path)
    table = DeltaTable(str(out / "candles"))
    candles = table.to_pyarrow_table(filters=[("param_id", "=", 2002)]).num_rows
    table.update(predicate="param_id = 2002", updates={"close": "close + 1"})
    found = found_and_repaired(capsys, path, out, missing=0, extra=0, changed=candles)
    assert [(w["series"], w["param_id"]) for w in found["windows"]] == [("candles", 2002)]


def test_an_iceberg_snapshot_rolled_back(emulator, tmp_path, capsys):
    out = tmp_path / "out"
    path = config_file(emulator.base_url, out, tmp_path, "iceberg", series=["raw"])
    run(load_config(path), end=HALF)
    raw = Output(load_config(path)).lake.series(Series.RAW)
    before = raw.catalog.load_table(raw.identifier).current_snapshot().snapshot_id
    run(load_config(path))
    raw.catalog.load_table(raw.identifier).manage_snapshots().rollback_to_snapshot(before).commit()
    found = found_and_repaired(capsys, path, out, series=["raw"], extra=0, changed=0)
    assert found["differing"] == 8 and found["missing"] > 0


def test_a_value_revised_on_the_platform_after_window_revisions(tmp_path, capsys):
    """2501's values are revised two days after their stamps; the run read them an hour after the day,
    and its revision probes look back `window.revisions` (6 h): only verify sees the change."""
    settings = emulator_config(now_ms=T0 + DAY_MS + HOUR_MS, lateness=Lateness(revise={2501: 2 * DAY_MS}))
    out = tmp_path / "out"
    with run_emulator(settings) as emulator:
        path = config_file(emulator.base_url, out, tmp_path)
        run(load_config(path))
        later = T0 + 4 * DAY_MS
        emulator.set_clock(later)
        code, found = verify(capsys, path)
        assert code == ExitCode.DIFFERS and found["changed"] > 0 and found["missing"] == found["extra"] == 0
        assert {w["param_id"] for w in found["windows"]} == {2501}
        code, repaired = verify(capsys, path, "--repair")
        assert code == 0 and repaired["status"] == "repaired", repaired
        code, again = verify(capsys, path)
        assert code == 0 and again["differing"] == 0
        # Each parameter's newest half-hour of averages is the next run's to read again (its late tail),
        # not verify's: the run after the repair brings it.
        assert found["left_out"]["unsettled"] > 0
        run(load_config(path))
    assert_exact(out, START, END, settings=emulator_config(now_ms=later, lateness=settings.lateness))


def test_max_requests_is_never_exceeded(fresh_emulator, outputs, tmp_path, capsys):
    path, _ = copy(outputs, "parquet", fresh_emulator, tmp_path)
    for budget in (9, 17):
        fresh_emulator.clear_requests()
        code, result = verify(capsys, path, "--max-requests", str(budget))
        sent = len(fresh_emulator.requests())
        assert code == 0 and sent == result["requests"] <= budget, (sent, result)
        assert 0 < result["verified"] < WINDOWS and result["not_verified"] == WINDOWS - result["verified"]
        assert "--max-requests" in result["verdict"]
    fresh_emulator.clear_requests()
    code, out, err = etl_main(capsys, "verify", "-c", str(path), "--max-requests", "2")
    assert code == ExitCode.CONFIG and "--max-requests 2: spent before the parameters were listed" in err
    assert len(fresh_emulator.requests()) <= 2


def test_a_repair_sigkilled_part_way_then_run_again_is_exact(outputs, tmp_path, capsys):
    """Every series' file of the day removed; the repair (a run of three slabs, answers in 50 ms) is killed
    once it has fetched some of its windows; `etl verify --repair` again ends exact."""
    with run_emulator(emulator_config()) as slow:
        slow.set_faults(latency=0.05)
        path, out = copy(outputs, "parquet", slow, tmp_path)
        for series in ("raw", "average", "candles"):
            for file in out.glob(f"{series}/date=*/*.parquet"):
                file.unlink()
        n = random.Random(5).randint(1, 8)
        proc = etl_process("verify", "-c", str(path), "--repair")

        def repairing() -> bool:
            log = slow.requests()
            logins = [i for i, r in enumerate(log) if r["path"].endswith("/auth/login")]
            return len(logins) >= 2 and sum("interval_ms" in r for r in log[logins[1] :]) >= n

        assert kill_when(proc, repairing), "the repair ended before it was killed"
        code, done = verify(capsys, path, "--repair")
        assert code == 0 and done["status"] == "repaired", done
        code, again = verify(capsys, path)
        assert code == 0 and again["status"] == "equal", again
    assert_exact(out, START, END)
    assert temp_files(out) == []


def test_s3_rows_of_a_removed_file_are_found_and_repaired(emulator, outputs, bucket, tmp_path, capsys):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.put(str(outputs["parquet"]), f"{bucket}/out", recursive=True)
    lake = f"{bucket}/out"
    path = config_file(emulator.base_url, lake, tmp_path)
    [raw] = [f for f in fs.find(f"{bucket}/out/raw") if f.endswith(".parquet")]
    fs.rm(raw)
    code, found = verify(capsys, path)
    assert code == ExitCode.DIFFERS and found["series"]["raw"]["differing"] == 8
    code, repaired = verify(capsys, path, "--repair")
    assert code == 0 and repaired["status"] == "repaired", repaired
    assert repaired["repaired"]["verified"] == 8 and repaired["repaired"]["differing"] == 0
