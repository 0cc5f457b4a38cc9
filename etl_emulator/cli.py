"""`etl emulator serve|wait`: the platform emulator from the command line."""

from __future__ import annotations

import os
import secrets
import ssl
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import click
import httpx
import yaml

from etl_emulator.answers import Record
from etl_emulator.dataset import CALC_OFFSET
from etl_emulator.faults import (
    ECHOES,
    ERROR_BODIES,
    HOSTILE_KINDS,
    SEARCH_ENVELOPES,
    SESSION_ENDS,
    SIGN_IN_FORMS,
    SIGNAL_MARKERS,
    TYPE_FIELDS,
    TYPE_SHAPES,
    Faults,
)
from etl_emulator.lateness import Lateness

if TYPE_CHECKING:  # loaded by `serve` only: the other commands need no server
    import socket

    from etl_emulator.config import EmulatorConfig

Command = TypeVar("Command", bound=Callable[..., Any])  # a command function, as click's decorators take it


def _period(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in value.split(":"))
    except ValueError:
        raise click.BadParameter("use MIN:MAX in seconds, e.g. 10:900 or 60:60") from None
    if not 1 <= lo <= hi:
        raise click.BadParameter("need 1 <= MIN <= MAX")
    return lo, hi


def _now(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    if value.lstrip("-").isdigit():
        return int(value)
    try:  # the emulator shares nothing with etl but the interface document: parsed here, not by etl.timeutil
        stamp = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        if stamp.tzinfo is None:
            raise ValueError("no UTC offset")
        return int(stamp.timestamp() * 1000)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: {exc}; use epoch ms or e.g. 2026-11-20T00:00:00Z") from None


def _hostile(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in (value or "").split(",") if k.strip())
    unknown = sorted(set(kinds) - set(HOSTILE_KINDS))
    if unknown:
        raise click.BadParameter(f"unknown kind(s) {unknown}; known: {', '.join(HOSTILE_KINDS)}")
    return kinds


def _ids(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(i) for i in (value or "").split(",") if i.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: use parameter ids, comma-separated (e.g. 1001,2002)") from None


def _lateness(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Lateness:
    if not value:
        return Lateness()
    try:
        return Lateness.of(yaml.safe_load(value))
    except (yaml.YAMLError, TypeError, ValueError, AttributeError) as exc:
        raise click.BadParameter(
            f"{str(exc).splitlines()[0]}; use e.g. "
            '\'{"lag": {"1001": 7200000}, "offline": [[11, START_MS, END_MS]], "revise": {"1501": 3600000}}\''
        ) from None


def _users(path: str | None) -> list[Record] | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            users = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise click.BadParameter(f"{path}: {str(exc).splitlines()[0]}", param_hint="--users") from None
    if not isinstance(users, list) or not all(
        isinstance(u, dict) and {"login", "password"} <= set(u) for u in users
    ):
        raise click.BadParameter(f"{path}: expected a YAML list of {{login, password, objects: all | [ids]}}")
    return users


def _choice(flag: str, choices: tuple[str, ...], help: str) -> Callable[[Command], Command]:
    """An option for one of the server's choices (a `Faults` field of the flag's name), its default the
    field's."""
    default = getattr(Faults(), flag.removeprefix("--").replace("-", "_"))
    return click.option(flag, default=default, show_default=True, type=click.Choice(choices), help=help)


class MissingExtra(click.ClickException):
    """A package of an extra that is not installed: one line naming its install command, exit 2 (as etl's
    own, which this package does not import)."""

    exit_code = 2


@click.group()
def emulator() -> None:
    """A local emulator of the monitoring platform (every endpoint, logins, faults)."""


_rate = click.FloatRange(0, 1)


@emulator.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port", default=8765, show_default=True, type=int, help="0 picks a free port (one worker only)."
)
@click.option(
    "--base-path", default="/sem-restservices", show_default=True, help="Every platform path lives under it."
)
@click.option("--seed", default=42, show_default=True, type=int, help="Same seed, same data.")
@click.option("--objects", default=3, show_default=True, type=click.IntRange(0), help="Objects 1..N.")
@click.option(
    "--params-per-object",
    default=4,
    show_default=True,
    type=click.IntRange(0, CALC_OFFSET - 1),
    help="Physical parameters per object; the last one is a signal parameter.",
)
@click.option(
    "--calc-per-object",
    default=2,
    show_default=True,
    type=click.IntRange(0, 999 - CALC_OFFSET),
    help="Calculated parameters per object.",
)
@click.option(
    "--period-range",
    default="10:900",
    show_default=True,
    callback=_period,
    help="Sampling periods MIN:MAX in seconds (each parameter gets one).",
)
@click.option("--now", callback=_now, help="Fix the clock (epoch ms or ISO 8601); default the real time.")
@click.option(
    "--date-header/--no-date-header",
    default=True,
    show_default=True,
    help="Tell the clock in each answer's Date header (off: as a server without a clock).",
)
@click.option(
    "--users",
    "users_file",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML list of {login, password, objects: all | [ids]}; replaces demo/restricted.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Processes; each keeps its own faults, clock and request log (sessions work on all).",
)
@click.option(
    "--request-log", type=click.Path(dir_okay=False), help="Also append the request log here (JSON lines)."
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option("--error-rate", default=0.0, type=_rate, help="Share of 500/502/503 answers (half HTML).")
@click.option("--rate-limit-rate", default=0.0, type=_rate, help="Share of 429 answers.")
@click.option(
    "--throttled-params",
    callback=_ids,
    metavar="IDS",
    help="Parameter ids (comma-separated) whose every request answers 429 with Retry-After.",
)
@click.option(
    "--retry-after", default=1.0, show_default=True, type=float, help="Retry-After of 429s, seconds."
)
@click.option(
    "--retry-after-text", metavar="TEXT", help="Retry-After of 429s as given (soon, inf, an HTTP date...)."
)
@click.option("--latency", default=0.0, type=float, help="Seconds added to every answer.")
@click.option(
    "--latency-spike-rate", default=0.0, type=_rate, help="Share of answers delayed by --latency-spike."
)
@click.option("--latency-spike", default=2.0, show_default=True, type=float, help="Seconds of a spike.")
@click.option(
    "--session-max-requests",
    type=click.IntRange(1),
    help="A session is refused (401) after serving N requests.",
)
@click.option(
    "--session-max-age", type=float, help="A session is refused (401) this many seconds after sign-in."
)
@click.option("--truncate-rate", default=0.0, type=_rate, help="Share of 200s with the body cut in half.")
@click.option("--drop-rate", default=0.0, type=_rate, help="Share of connections closed mid-answer.")
@click.option(
    "--hostile", callback=_hostile, help=f"Odd series answers, comma-separated: {', '.join(HOSTILE_KINDS)}."
)
@click.option(
    "--hostile-rate", default=1.0, show_default=True, type=_rate, help="Share of series answers made odd."
)
@click.option(
    "--bomb-mb",
    default=1024,
    show_default=True,
    type=click.IntRange(min=1),
    help="What a gzip_bomb answer expands to, MiB.",
)
@_choice("--session-end", SESSION_ENDS, "How a call without a live session is answered.")
@_choice("--error-body", ERROR_BODIES, "Body of every 4xx/5xx answer.")
@_choice(
    "--echo-params",
    ECHOES,
    "Error answers repeat the request's fields (sign-in's password too), in this form.",
)
@_choice(
    "--sign-in-via", SIGN_IN_FORMS, "Where sign-in reads the credentials: query string, form body, or both."
)
@click.option(
    "--max-count", type=click.IntRange(1), help="At most N points or buckets per series answer, silently."
)
@click.option(
    "--count-default",
    default=10_000,
    show_default=True,
    type=click.IntRange(1),
    help="The count of a series request without one.",
)
@click.option(
    "--count-reject-over",
    type=click.IntRange(1),
    help="A count above N answers 400 (default: counts above 100000 are served as 100000).",
)
@_choice("--type-field", TYPE_FIELDS, "The field of a parameter record that names its type.")
@_choice(
    "--type-shape",
    TYPE_SHAPES,
    'A parameter\'s type as text ("calculated") or as an object ({"id": 2, "name": "calculated"}).',
)
@_choice(
    "--signal-marker",
    SIGNAL_MARKERS,
    'A signal parameter\'s type is "signal" (type), or "analog" with "signal": true (flag).',
)
@_choice(
    "--search-envelope",
    SEARCH_ENVELOPES,
    'A page of /search/params: a bare array, {"total", "items"}, Spring\'s Page, or {"data"}.',
)
@click.option(
    "--capacity",
    type=click.IntRange(1),
    help="Workers: at most N requests served at once, the others wait in a queue (default: no bound).",
)
@click.option(
    "--service-time",
    default=0.0,
    type=click.FloatRange(0),
    help="Seconds a worker is busy with each request (its time in the server without a queue).",
)
@click.option(
    "--queue-max",
    type=click.IntRange(0),
    help="With --capacity: past N requests waiting for a worker, answer 503 at once (default: no bound).",
)
@click.option("--fault-seed", default=0, show_default=True, type=int, help="Seed of the fault draws.")
@click.option(
    "--lateness",
    callback=_lateness,
    help="When points reach the platform (JSON): lag {param: ms}, offline [[controller, start, end]] "
    "(uploaded at end), revise {calculated param: ms} (preliminary values until then).",
)
@click.option(
    "--tls-cert", type=click.Path(exists=True, dir_okay=False), help="Serve https with this PEM certificate."
)
@click.option(
    "--tls-key", type=click.Path(exists=True, dir_okay=False), help="The certificate's PEM private key."
)
def serve(
    host: str,
    port: int,
    base_path: str,
    seed: int,
    objects: int,
    params_per_object: int,
    calc_per_object: int,
    period_range: tuple[int, int],
    now: int | None,
    date_header: bool,
    users_file: str | None,
    workers: int,
    request_log: str | None,
    log_level: str,
    fault_seed: int,
    hostile: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    lateness: Lateness,
    **fault_settings: Any,  # the Faults fields of the options above, as click converted them
) -> None:
    """Serve the platform until interrupted.

    \b
    Logins: demo/demo sees every object, restricted/restricted the odd ids.
    Control API (no sign-in): /_emulator/health, requests, faults (capacity too), clock, commands.
    """
    try:
        import uvicorn
    except ImportError:
        raise MissingExtra("'etl emulator serve' needs uvicorn: pip install 'etl[emulator]'") from None

    from etl_emulator.app import CONFIG_ENV, create_app
    from etl_emulator.config import EmulatorConfig
    from etl_emulator.server import uvicorn_config
    from etl_emulator.sessions import SECRET_ENV

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("give both --tls-cert and --tls-key, or neither")
    if tls_cert:
        try:  # now, not after "listening" is printed
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls_cert, tls_key)
        except (ssl.SSLError, OSError) as exc:
            raise click.BadParameter(
                f"{tls_cert} / {tls_key}: {exc}", param_hint="--tls-cert/--tls-key"
            ) from None
    faults = Faults(hostile=hostile, seed=fault_seed, **fault_settings)
    config = EmulatorConfig(
        host=host,
        port=port,
        base_path=base_path,
        seed=seed,
        objects=objects,
        params_per_object=params_per_object,
        calc_per_object=calc_per_object,
        period_range=period_range,
        users=_users(users_file),
        now_ms=now,
        date_header=date_header,
        faults=faults,
        request_log=request_log,
        workers=workers,
        tls_cert=tls_cert,
        tls_key=tls_key,
        lateness=lateness,
    )
    logins = (
        [
            f"{u['login']} ({'all objects' if u.get('objects', 'all') == 'all' else 'objects ' + str(u['objects'])})"
            for u in config.users
        ]
        if config.users
        else ["demo (all objects)", "restricted (odd object ids)"]
    )
    sock = _listen(host, port)
    if workers > 1:
        sock.close()  # uvicorn binds for its workers itself: the port was free a moment ago
        os.environ[CONFIG_ENV] = config.to_json()
        os.environ[SECRET_ENV] = secrets.token_hex(32)  # so every worker accepts every session
        _announce(host, port, config, logins, workers)
        uvicorn.run(
            "etl_emulator.app:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            access_log=False,
            lifespan="off",
            http="httptools",
            loop="uvloop",
            server_header=False,
            date_header=False,
            **config.ssl_options(),
        )
        return
    _announce(host, sock.getsockname()[1], config, logins, workers)
    app = create_app(config)
    uvicorn.Server(uvicorn_config(app, log_level=log_level, **config.ssl_options())).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    from etl_emulator.server import bind_socket

    try:
        return bind_socket(host, port)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (another emulator? stop it, or choose "
            "another port; 0 picks a free one)",
            param_hint="--port",
        ) from None


def _announce(host: str, port: int, config: EmulatorConfig, logins: list[str], workers: int) -> None:
    root = f"{config.scheme}://{host}:{port}"
    click.echo(
        f"emulator listening on {root}{config.base_path} (control {root}/_emulator, {workers} worker(s));"
        f" logins: {', '.join(logins)}",
        err=True,
    )


@emulator.command()
@click.option("--url", required=True, help="The emulator's address (a base path is ignored).")
@click.option("--timeout", default=30.0, show_default=True, type=float, help="Seconds to wait.")
@click.option("--ca-bundle", type=click.Path(exists=True, dir_okay=False), help="CA to trust for https.")
def wait(url: str, timeout: float, ca_bundle: str | None) -> None:
    """Wait until an emulator answers /_emulator/health (exit 1 on timeout)."""
    parts = urlsplit(url)
    health = f"{parts.scheme}://{parts.netloc}/_emulator/health"
    verify = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else True
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(health, timeout=2, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            click.echo(f"emulator at {health} did not answer within {timeout:g}s", err=True)
            sys.exit(1)
        time.sleep(0.1)
