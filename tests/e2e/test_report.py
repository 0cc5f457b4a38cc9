"""`etl report` (text, JSON, a self-contained HTML page checked in a real headless Chromium, exit 9 under
--fail-under) and `etl run --metrics-file` (Prometheus text format)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from etl.timeutil import to_ms
from etl_emulator.server import run_emulator
from tests.support.cli import etl
from tests.support.configs import config_dict, write_config
from tests.support.emulator import END, emulator_config

NAMES = {
    1001: "obj-1 / temperature-1001 [°C]",
    1002: "obj-1 / pressure-1002 [kPa]",
    1003: "obj-1 / alarm-1003",
    1501: "obj-1 / calc-1501 [kWh]",
    2001: "obj-2 / temperature-2001 [°C]",
    2002: "obj-2 / pressure-2002 [kPa]",
    2003: "obj-2 / alarm-2003",
    2501: "obj-2 / calc-2501 [kWh]",
}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """Three days asked for, the emulator's clock stopped at the end of the second: the third day has
    rows without points, every parameter is stale at the report's end. (It sends no Date header, so the
    run takes its own later clock for the server's: a silent day.)"""
    root = tmp_path_factory.mktemp("report")
    with run_emulator(emulator_config(now_ms=to_ms(END), date_header=False)) as emulator:
        data = config_dict(
            emulator.base_url, root / "out", window={"end": "2026-11-04T00:00:00Z"}, series=["raw"]
        )
        data["source"]["password"] = "${ETL_PASSWORD}"
        path = write_config(root / "c.yaml", data)
        result = etl("run", "-c", str(path), "--metrics-file", str(root / "etl.prom"), "--json")
    assert result.returncode == 0, result.stderr
    return path, json.loads(result.stdout), root / "etl.prom"


def test_the_terminal_names_the_worst_parameters_with_object_name_and_unit(lake):
    path, _, _ = lake
    result = etl("report", "-c", str(path), "--to", "2026-11-03T00:00:00Z")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "quality of 127.0.0.1's raw series, 2026-11-01 .. 2026-11-02 (2 days)"
    assert "parameters  8    parameter-days 16" in lines[1] and "stale       0" in lines[2]
    table = lines[lines.index("least complete parameters (of 8):") + 1 :]
    assert table[0].split()[:3] == ["parameter", "id", "kind"]
    listed = table[1:9]
    for param_id, name in NAMES.items():  # every parameter, by object, name and unit, with its id
        assert any(line.strip().startswith(name) and f" {param_id} " in line for line in listed), name
    completeness = [float(re.search(r"(\d+\.\d)%", line).group(1)) for line in listed]
    assert completeness == sorted(completeness) and all(93 <= c <= 100 for c in completeness)


def test_json_fail_under_and_stale_parameters(lake):
    path, _, _ = lake
    result = etl("report", "-c", str(path), "--json", "--fail-under", "0.9")
    assert result.returncode == 9, result.stderr  # the empty third day pulls everyone under 90%
    assert (
        result.stderr.strip().splitlines()[-1].startswith("etl: error: 8 parameter(s) below 90.0% complete")
    )
    report = json.loads(result.stdout)
    assert (
        report["days"] == ["2026-11-01", "2026-11-02", "2026-11-03"]
        and report["to"] == "2026-11-04T00:00:00.000Z"
    )
    assert report["stale_count"] == 8 and report["below_count"] == 8
    assert {r["param_id"] for r in report["stale"]} == set(NAMES)
    assert all(r["silent_seconds"] > 86400 for r in report["stale"])  # no point in the whole last day
    heat = {r["param_id"]: r for r in report["heatmap"]}
    assert set(heat) == set(NAMES)
    for row in heat.values():
        first, second, third = row["daily"]
        assert first["points"] > 0 and second["points"] > 0 and third["points"] == 0
        assert (
            third["completeness"] == 0 and third["expected_points"] > 0
        )  # the period carried from the day before
    ok = etl("report", "-c", str(path), "--fail-under", "0.5", "--stale-after", "2d", "--top", "3")
    assert ok.returncode == 0, ok.stderr
    assert "stale       0" in ok.stdout and "below       0 parameter(s) under 50.0% complete" in ok.stdout


def test_metrics_file_holds_the_runs_figures(lake, tmp_path):
    _, summary, prom = lake
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    value = {
        name: {tuple(sorted(s.labels.items())): s.value for s in f.samples} for name, f in families.items()
    }
    labels = (("shard", ""), ("source", "127.0.0.1"))
    assert value["etl_run_success"][labels] == 1 and value["etl_run_exit_code"][labels] == 0
    assert value["etl_run_points"][(("series", "raw"), *labels)] == summary["points"] > 0
    assert value["etl_run_requests"][labels] == summary["requests"]
    assert value["etl_run_retries"][labels] == summary["retries"] == 0
    assert value["etl_run_relogins"][labels] == summary["relogins"]
    assert value["etl_run_failed_windows"][labels] == 0
    assert value["etl_run_seconds"][labels] == summary["seconds"]
    assert value["etl_run_cpu_seconds"][labels] == summary["cpu_seconds"] > 0
    assert (
        value["etl_quality_lowest_completeness"][labels] == summary["quality"]["lowest_completeness"] == 0.0
    )
    assert value["etl_quality_rows"][labels] == summary["quality"]["rows"] == 24
    assert value["etl_catalog_objects_listed"][labels] == summary["catalog"]["objects_listed"] == 2
    assert value["etl_catalog_parameters_gone"][labels] == 0
    assert [p.name for p in prom.parent.iterdir() if p.name.startswith("etl.prom")] == [
        "etl.prom"
    ]  # no temp left

    # A failed run writes its metrics too: the scheduler's alert reads them.
    data = config_dict("http://127.0.0.1:9/sem-restservices", tmp_path / "out", retry={"attempts": 1})
    failed = etl(
        "run", "-c", str(write_config(tmp_path / "c.yaml", data)), "--metrics-file", str(tmp_path / "m.prom")
    )
    assert failed.returncode == 4, failed.stderr
    text = (tmp_path / "m.prom").read_text()
    assert 'etl_run_success{shard="",source="127.0.0.1"} 0.0' in text
    assert 'etl_run_exit_code{shard="",source="127.0.0.1"} 4.0' in text
    missing = etl("run", "-c", str(tmp_path / "c.yaml"), "--metrics-file", str(tmp_path / "no" / "m.prom"))
    assert missing.returncode == 2 and "--metrics-file" in missing.stderr


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Debian's Chromium, headless, a fresh profile, nothing of its own fetched."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (`make test` installs it)")
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=90)


def test_the_html_report_renders_in_a_real_browser(lake, tmp_path):
    path, _, _ = lake
    html = tmp_path / "report.html"
    result = etl("report", "-c", str(path), "-o", str(html))
    assert result.returncode == 0 and f"wrote {html}" in result.stdout, result.stderr
    page = html.read_text()
    # Self-contained: no address to fetch anything from (the SVG namespace is a name, not a fetch), and a
    # policy that forbids any fetch anyway.
    assert not re.search(r"""(src|href)\s*=|url\(|@import""", page)
    assert re.findall(r"https?://[^\s\"'<]+", page) == ["http://www.w3.org/2000/svg"]
    assert "default-src 'none'" in page

    dom = chromium(tmp_path, "--dump-dom", html.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert 'data-ready="8"' in text  # the page's script ran and found the heatmap's 8 rows
    heatmap = re.search(r'<svg id="heatmap".*?</svg>', text, re.S).group(0)
    assert len(re.findall(r"<rect class=\"cell ", heatmap)) == 8 * 3  # parameters x days
    assert len(re.findall(r'class="cell c0"', heatmap)) == 8  # the empty third day, 0% for everyone
    for name in NAMES.values():
        assert name.replace("&", "&amp;") in heatmap and name in text
    assert "temperature-1001 [°C] 2026-11-03: 0.0% complete" in heatmap
    for section in ("Least complete parameters", "Stale parameters (8)", "Flatlines (0)"):
        assert section in text

    png = tmp_path / "report.png"
    shot = chromium(
        tmp_path, f"--screenshot={png}", "--window-size=1200,900", "--hide-scrollbars", html.as_uri()
    )
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    from PIL import Image

    colours = Image.open(png).convert("RGB").getcolors(1 << 20)
    count = {rgb: n for n, rgb in colours}
    assert count.get((127, 29, 29), 0) > 500  # the dark red of the 0% column is drawn
    assert sum(count.get(c, 0) for c in [(74, 222, 128), (163, 230, 53), (21, 128, 61)]) > 500  # and greens
