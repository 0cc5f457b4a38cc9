"""`etl init`: the findings of a probe as a commented YAML config ready for `etl run`, and as lines for
people. The password is never written: the config reads it from ${ETL_PASSWORD}."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from etl.client.concurrency import AUTO_START
from etl.config import parse_config
from etl.model import slug
from etl.ops.findings import Finding, ok, warn
from etl.ops.probe import BASE_PATH, DEFAULT_MAX_POINTS, Findings
from etl.timeutil import DAY_MS, iso, now_ms

DOCUMENT_STAMPS = "YYYY-MM-DDThh:mm:ss.sssZ"
FIRST_DAYS = 7  # a first run fetches this many days back unless --start says otherwise


@dataclass(frozen=True)
class Choices:
    """What the user chose on the command line (the rest comes from the probe). Paths as the config
    reads them: relative ones from the config file's folder (see `placed`)."""

    username: str
    start_ms: int | None = None  # None: FIRST_DAYS before today
    sink_path: str | None = None  # None: output/{source name}, beside the config file
    ca_bundle: Path | None = None

    def start(self) -> int:
        return self.start_ms if self.start_ms is not None else (now_ms() // DAY_MS - FIRST_DAYS) * DAY_MS


def placed(path: str, folder: str | None) -> str:
    """A path given on the command line (a relative one from the working directory), as a config file in
    `folder` reads it the same: relative to that folder, or absolute when the folder is not known (the
    config is printed). URLs as they are."""
    if "://" in path or os.path.isabs(path):
        return path
    here = os.path.abspath(path)
    return os.path.relpath(here, folder) if folder is not None else here


def source_name(found: Findings) -> str:
    """The name the config's source gets by default (etl.config: the host)."""
    return slug(urlsplit(found.base_url).hostname or "source")


def max_points(found: Findings) -> int:
    """The count each request sends: the default, or less when the server caps or refuses it."""
    limits = [DEFAULT_MAX_POINTS, found.count_cap]
    if found.count_refused_over:
        limits.append(found.count_refused_over - 1)
    return min(v for v in limits if v)


def _count_text(found: Findings) -> str:
    if found.count_cap is not None:
        text = f"answers are cut at {found.count_cap} points without a word ({found.count_cap_series} series)"
    elif found.count_checked_up_to:
        text = f"no cap on points per answer up to {found.count_checked_up_to}"
    else:
        text = "not measured"
    if found.count_default is not None:
        text += f"; without a count the server gives {found.count_default}"
    return text


def _types_text(shape: str) -> str:
    read = {
        "text": "read as they are",
        "object": "read by their name",
        "object without a name": "their id names no kind: the parameter lists tell it",
        "number": "a number names no kind: the parameter lists tell it",
    }
    shown = {"object": "objects {id, name}", "object without a name": "objects {id} without a name"}
    return "; ".join(
        f"parameter types come as {shown.get(one, one)}: {read.get(one, '')}" for one in shape.split(" and ")
    )


def report(found: Findings) -> list[Finding]:
    """The probe's findings for people, a line each."""
    added = f" (the base path {BASE_PATH} was added)" if found.base_path_added else ""
    ways = {"query": "query parameters", "form": "a form body"}
    refused = (
        f" ({' and '.join(ways[w] for w in found.sign_in_refused)} refused)" if found.sign_in_refused else ""
    )
    kinds = ", ".join(f"{n} {k}" for k, n in found.parameters.items())
    over = (
        f" (counted over {found.parameters_counted_objects} of {found.objects} objects)"
        if found.parameters_counted_objects < found.objects
        else ""
    )
    lines = [
        ok("base_url", found.base_url + added),
        ok("sign_in", f"credentials as {ways[found.sign_in]}{refused}"),
        ok("objects", f"{found.objects} visible; parameters: {kinds}{over}"),
    ]
    if found.type_shape is not None:
        lines.append(ok("types", _types_text(found.type_shape)))
    if found.search_agrees_with_lists is False:
        lines.append(
            warn(
                "discovery",
                "the paged parameter search differs from the parameter lists: runs list parameters "
                "object by object (2 requests per object)",
            )
        )
    elif found.search_agrees_with_lists:
        envelope = found.search_envelope
        pages = (
            f" (its pages are objects, the records under {envelope!r})"
            if envelope not in (None, "array")
            else ""
        )
        lines.append(ok("discovery", f"the paged parameter search agrees with the lists: runs use it{pages}"))
    lines.append(ok("count", _count_text(found)))
    stamps = found.stamp_format or "not seen"
    if found.stamp_format in (None, DOCUMENT_STAMPS):
        lines.append(ok("stamps", stamps))
    else:
        lines.append(warn("stamps", f"{stamps}, not the document's {DOCUMENT_STAMPS}: etl reads it"))
    lines.append(
        ok(
            "latency",
            f"median {found.latency_ms} ms: extract.concurrency auto starts at {AUTO_START} requests in flight "
            f"and learns the server's capacity from there (a fixed number that hides this latency: "
            f"{found.suggested_concurrency})",
        )
    )
    lines.append(ok("session_end", f"a call without a live session is answered {found.session_end}"))
    lines.append(ok("error_body", f"error answers carry {found.error_body or 'unknown'} bodies"))
    lines += [warn("note", note) for note in found.notes]
    lines.append(ok("requests", f"{found.requests_made} requests made"))
    return lines


def _q(value: str) -> str:
    """A YAML scalar that reads back as exactly this string (JSON strings are YAML)."""
    return json.dumps(value)


def render(found: Findings, choices: Choices) -> str:
    """The config, commented with what the probe found. Validated before it is returned."""
    name = source_name(found)
    sink = choices.sink_path or f"output/{name}"
    points = max_points(found)
    header = [
        f"# etl config written by `etl init` at {iso(now_ms())[:19]}Z, from {found.requests_made} requests",
        f"# to {found.base_url}. Run it:   ETL_PASSWORD=... etl run -c THIS_FILE",
        "# Check a deployment any time:  etl doctor -c THIS_FILE",
        "# What the server chose where its document is silent:",
        *(f"#   {f.check:<12} {f.message}" for f in report(found) if f.check not in ("requests",)),
    ]
    sign_in_note = (
        f"{' and '.join(found.sign_in_refused)} refused"
        if found.sign_in_refused
        else "query: the document's way"
        if found.sign_in == "query"
        else "form: what public scripts send"
    )
    count_note = (
        f"the server cuts answers at {found.count_cap} points"
        if found.count_cap is not None
        else f"refuses count={found.count_refused_over}"
        if found.count_refused_over
        else "no cap found"
        + (f" up to {found.count_checked_up_to} points" if found.count_checked_up_to else "")
    )
    base_note = (
        f"the base path {BASE_PATH} was added: /auth/login lives there"
        if found.base_path_added
        else "/auth/login lives here"
    )
    body = [
        "source:",
        f"  base_url: {_q(found.base_url)}  # {base_note}",
        f"  username: {_q(choices.username)}",
        "  password: ${ETL_PASSWORD}  # never written here; or password_file: /path/to/a/file",
        f"  sign_in: {found.sign_in}  # how /auth/login takes the credentials ({sign_in_note})",
        f"  # name: {name}  # labels this instance in the data (default: the host); to change it once data is "
        "written: etl state rename-source",
    ]
    if choices.ca_bundle is not None:
        body.append(
            f"  ca_bundle: {_q(str(choices.ca_bundle))}  # the private CA the server's certificate is from"
        )
    body += [
        "select:",
        f"  objects: all  # {found.objects} objects visible to this login; or a list of ids",
        "series: [raw, average, candles]",
        "window:",
        f"  start: {iso(choices.start())[:19]}Z  # the first run fetches from here; later runs continue "
        "from the checkpoints",
        "  end: now",
        "  late_max: 7d  # points that reach the platform late are fetched up to this long after their stamps",
        "extract:",
        f"  concurrency: auto  # requests in flight, learned from each answer's latency: from {AUTO_START} up "
        f"to max_concurrency; the median answer took {found.latency_ms} ms (a fixed number: "
        f"{found.suggested_concurrency})",
        f"  max_points: {points}  # the count each request sends ({count_note})",
        "sink:",
        "  format: parquet  # or csv, delta, iceberg",
        f"  path: {_q(sink)}",
    ]
    text = "\n".join(header + body) + "\n"
    parse_config(yaml.safe_load(text), "etl init", offline=True)  # what we write must load
    return text
