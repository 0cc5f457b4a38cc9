"""Every problem in a config named at once, typos first with a suggestion (issue 21)."""

from __future__ import annotations

import pytest

from etl.config import load_config
from etl.errors import ConfigError

GOOD = (
    "source: {base_url: http://x/sem-restservices, username: demo, password: x}\n"
    "window: {start: 2026-11-01T00:00:00Z}\n"
    "sink: {path: out}\n"
)


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        (
            GOOD.replace("source:", "sorce:"),
            "config error: 2 problems: sorce: unknown key (did you mean source?); source: required key is missing",
        ),
        (
            GOOD.replace("{path: out}", "{pth: out}"),
            "config error: 2 problems: sink.pth: unknown key (did you mean path?); sink.path: required key is missing",
        ),
        (GOOD + "objects: none\n", "config error: objects: unknown key (did you mean select.objects?)"),
        (
            GOOD + "select: {objects: none}\n",
            "config error: select.objects: Input should be 'all' or a valid list",
        ),
        (
            GOOD.replace("sink: {path: out}", "sink: {path: out, colour: red}\nextract: {concurrency: many}"),
            "config error: 2 problems: sink.colour: unknown key; extract.concurrency: auto or a whole number "
            "of requests from 1 to 256, not 'many'",
        ),
        (
            GOOD.replace("2026-11-01T00:00:00Z", "2026-13-01T00:00:00Z"),
            "config error: window.start: Input should be a valid datetime or date, month value is outside",
        ),
        (
            GOOD.replace("2026-11-01T00:00:00Z", "2026-02-30T00:00:00Z"),
            "config error: window.start: Input should be a valid datetime or date, day value is outside",
        ),
        (
            GOOD.replace("2026-11-01T00:00:00Z", "2026-11-01"),
            "config error: window.start: needs a UTC offset",
        ),
        (  # the first real problem: the month, not the offset
            GOOD.replace("2026-11-01T00:00:00Z", "2026-13-01"),
            "config error: window.start: '2026-13-01' is not a valid time: month must be in 1..12",
        ),
        (
            GOOD.replace("2026-11-01T00:00:00Z", "2026-11-01T25:00"),
            "config error: window.start: '2026-11-01T25:00' is not a valid time: hour must be in 0..23",
        ),
        (  # source x's shard 0/2 names its files and lake commits so: they would mix
            GOOD.replace("username:", "name: plant-s0of2, username:"),
            "config error: source.name: 'plant-s0of2' ends like a shard's label (-sIofN): give source.name",
        ),
        (
            GOOD.replace("http://x/", "http://db-s1of2/"),
            "config error: source: the host of base_url ends like a shard's label (-sIofN): give source.name",
        ),
    ],
    ids=[
        "typo in a required key",
        "typo in a nested key",
        "a key in the wrong section",
        "a wrong value",
        "two sections",
        "month 13",
        "February 30",
        "a date without a time",
        "month 13 without an offset",
        "hour 25 without an offset",
        "a source named like a shard",
        "a host named like a shard",
    ],
)
def test_every_problem_is_named_in_one_line(tmp_path, yaml_text, message):
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value).startswith(message) and "\n" not in str(error.value), str(error.value)


def test_unquoted_valid_times_still_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD.replace("00:00:00Z}", "00:00:00Z, end: 2026-11-02T00:00:00+03:00}"))
    config = load_config(path)
    assert config.window.start_ms == 1793491200000 and config.window.end_ms(0) == 1793566800000


def test_a_binary_file_is_not_a_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\xd0\xff\xfe")
    with pytest.raises(ConfigError, match="c.yaml: not a text file"):
        load_config(path)


@pytest.mark.parametrize(
    "kinds, warned",
    [
        ("[physical, calculated]", True),  # every parameter, when signals were physical ones
        ("[physical]", True),
        ("[physical, calculated, signal]", False),
        ("[calculated]", False),
        ("[signal]", False),
    ],
)
def test_kinds_that_leave_out_signal_parameters_say_so_in_one_line(tmp_path, caplog, kinds, warned):
    path = tmp_path / "etl.yaml"
    path.write_text(GOOD + f"select: {{parameters: {{kinds: {kinds}}}}}\n")
    load_config(path)
    said = [r.getMessage() for r in caplog.records if "signal" in r.getMessage()]
    assert said == (
        [
            "select.parameters.kinds leaves out signal: signal parameters (physical ones whose values are "
            "0 or 1, a kind of their own now) are not exported; add signal to the list to keep them"
        ]
        if warned
        else []
    )
    caplog.clear()
    load_config(path, offline=True)  # commands that only read the output export nothing
    assert not [r for r in caplog.records if "signal" in r.getMessage()]
