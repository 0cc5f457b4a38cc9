"""One exception tree for the whole tool.

Every class says what the CLI exits with (`exit_code`), whether sending the same request again may
help (`retryable`: the client's retries read nothing else) and whether the run must stop (`fatal`:
fetching more is pointless) or only the window at hand fails (the pipeline reads nothing else).

                                    exit  retryable  fatal
    EtlError                          70     no        yes   a bug: please report it
    ├── ConfigError (ValueError)       2     no        yes   bad config, arguments or base URL
    │   ├── InvalidArgument            2     no        yes   a request the server would refuse anyway
    │   └── NothingToRead              2     no        yes   an output no run has written, an empty selection
    ├── ApiError                       5     no        yes   talking to the platform
    │   ├── AuthError                  3     no        yes   sign-in refused; a right the login lacks
    │   │   └── SessionRejected        3     yes       yes   sessions refused even right after signing in
    │   ├── NetworkError               4     yes       yes   timeouts, connection failures
    │   │   └── TlsError               4     no        yes   certificate not verified
    │   ├── ServerError                5     yes       yes   5xx, 429
    │   │   └── Throttled              5     no        no    a 429 to the end while other requests got past
    │   ├── RequestRejected            5     no        yes   any other 4xx
    │   │   └── NotFound               5     no        yes   404
    │   │       └── ParameterGone      5     no        no    404 to a parameter's series
    │   ├── RequestsSpent              2     no        yes   a command's --max-requests reached
    │   ├── InvalidResponse            6     yes       no    an answer that cannot be read
    │   │   └── AnswerTooLarge         6     no        no    over source.max_answer_mb
    │   └── RetriesExhausted         (as its last cause)     retries ran out
    ├── DataError                      6     no        no    data that cannot be used
    ├── StorageError                   7     no        yes   output or state not writable
    │   └── LostRace                   7     no        yes   other writers kept changing what we swap
    ├── LockedError                    8     no        yes   another run holds the state lock
    ├── QualityBelow                   9     no        no    etl report --fail-under: data below the bar
    ├── Unhealthy                     10     no        no    etl doctor: something needs a person
    ├── OutputDiffers                 11     no        no    etl verify: the output is not the source's
    ├── RunDeadline                    4     no        yes   retry.run_deadline passed (5 if throttled)
    └── Interrupted                  130     no        yes   SIGINT/SIGTERM
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Protocol


class ExitCode:
    OK = 0
    CONFIG = 2  # bad config, arguments or usage (click uses 2 for usage errors too)
    AUTH = 3  # sign-in refused, a missing right, sessions refused even after signing in again
    NETWORK = 4  # host unreachable, connection failures after retries
    SERVER = 5  # 5xx/429 after retries, requests the server rejected
    DATA = 6  # answers that cannot be parsed or fail validation
    OUTPUT = 7  # output or state location cannot be written (permissions, disk full)
    LOCKED = 8  # another run holds the state lock
    QUALITY = 9  # etl report --fail-under: a parameter's completeness is below the bar
    UNHEALTHY = 10  # etl doctor: a deployment needs a person (each finding says what to do)
    DIFFERS = 11  # etl verify: the output differs from what the source serves now
    INTERNAL = 70  # a bug: please report it (traceback with --debug)
    INTERRUPTED = 130  # SIGINT/SIGTERM: stopped after the in-flight work was committed


_tracebacks = False  # debug(): IPython shows an EtlError's traceback, not only its line


def debug(on: bool = True) -> None:
    """Show the full traceback of etl's errors in IPython and Jupyter (what `etl --debug` does for the
    command); `debug(False)`: one line again. Errors raised elsewhere keep their traceback regardless."""
    global _tracebacks
    _tracebacks = on


class RunReport(Protocol):
    """What a run got done, as its error carries it: the `etl.RunSummary` a good run returns. Written here
    so that the exception tree needs nothing from the pipeline above it."""

    @property
    def run_id(self) -> str: ...

    @property
    def status(self) -> str: ...  # ok, failed, interrupted

    def as_dict(self) -> Mapping[str, object]: ...  # the JSON form: `etl run --json`, _runs/{run_id}.json

    def text(self) -> str: ...  # what `etl run` prints


class EtlError(Exception):
    """Base of every error the tool reports as one line."""

    exit_code = ExitCode.INTERNAL
    retryable = False
    fatal = True
    # Raised by a run (etl.run): what got done before it stopped, the same `RunSummary` a good run returns.
    summary: RunReport | None = None

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for the error when a cell raises it (its protocol for exceptions that render
        themselves): the line the command prints, not the frames of etl's internals."""
        if _tracebacks:
            return "".join(traceback.format_exception(self)).splitlines()
        return [f"{type(self).__name__}: {self}", "(etl.debug() shows the traceback)"]


class ConfigError(EtlError, ValueError):
    exit_code = ExitCode.CONFIG


class InvalidArgument(ConfigError):
    """An argument the server would refuse anyway (e.g. a raw window over 24 h)."""


class NothingToRead(ConfigError):
    """What a reader (etl query, report, plot; etl.read) was pointed at holds nothing yet: an output no
    run has written, a dataset the config does not keep, a parameter or window without rows. One class
    for all of them: the fix is the reader's arguments or a run, never the data."""


class ApiError(EtlError):
    """Something went wrong talking to the platform."""

    exit_code = ExitCode.SERVER
    reason = "api"  # the key of its retries in ClientStats.retries


class AuthError(ApiError):
    exit_code = ExitCode.AUTH


class SessionRejected(AuthError):
    """Sessions refused even right after a new sign-in. Retried: short sessions can end before a
    request's turn; when retries run out, an auth error."""

    retryable = True
    reason = "session_rejected"


class NetworkError(ApiError):
    exit_code = ExitCode.NETWORK
    retryable = True

    def __init__(self, message: str, reason: str = "network"):
        super().__init__(message)
        self.reason = reason  # timeout, connection, tls, network


class TlsError(NetworkError):
    """The server's certificate was not accepted: it will not change in a minute."""

    retryable = False

    def __init__(self, message: str):
        super().__init__(message, reason="tls")


class ServerError(ApiError):
    """5xx or 429: the server may answer next time."""

    retryable = True

    def __init__(self, message: str, status: int, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.reason = f"http_{status}"


class Throttled(ServerError):
    """A request throttled (429) to the end of its retries while other requests got through: the server
    limits this work (one parameter), not the run, so only its window fails. `MonitoringClient.series` does
    not ask that parameter again until the wait the server asked for has passed."""

    retryable = False
    fatal = False


class RequestRejected(ApiError):
    """A 4xx the server will give again."""

    def __init__(self, message: str, status: int, excerpt: str = ""):
        super().__init__(message)
        self.status = status
        self.excerpt = excerpt


class NotFound(RequestRejected):
    pass


class ParameterGone(NotFound):
    """A parameter's series answered 404: the parameter is gone from the platform (or from the login's
    sight). Only its windows fail; a run takes it out of the fleet's catalog and names it."""

    fatal = False


class RequestsSpent(ApiError):
    """A request past the budget a command was given (`etl verify --max-requests`): not sent."""

    exit_code = ExitCode.CONFIG
    reason = "budget"


class InvalidResponse(ApiError):
    """A 200 whose body is not what we expect (truncated, HTML, wrong shape). Only its window fails."""

    exit_code = ExitCode.DATA
    retryable = True
    fatal = False
    reason = "invalid_body"


class AnswerTooLarge(InvalidResponse):
    """An answer over the size limit (on the wire or decompressed): it would come as large again."""

    retryable = False
    reason = "too_large"


class RetriesExhausted(ApiError):
    """Gave up after the retry policy's attempts or deadline. It is also an instance of its last cause's
    class (`except NetworkError` catches a connection that failed every attempt), with that cause's
    exit code, fatality and attributes; it is never retried again."""

    last: EtlError
    attempts: int

    def __new__(cls, message: str, last: EtlError, attempts: int) -> RetriesExhausted:
        if cls is RetriesExhausted:
            cls = type(last) if isinstance(last, RetriesExhausted) else _exhausted(type(last))
        return super().__new__(cls, message)

    def __init__(self, message: str, last: EtlError, attempts: int):
        Exception.__init__(self, message)
        self.__dict__.update(vars(last))  # status, reason, retry_after...
        self.last, self.attempts = last, attempts
        self.exit_code, self.fatal, self.retryable = last.exit_code, last.fatal, False

    def __reduce__(self) -> tuple[type[RetriesExhausted], tuple[str, EtlError, int]]:
        # The class is made at run time: rebuild from the arguments (a Dask worker's error crosses processes).
        return RetriesExhausted, (str(self), self.last, self.attempts)


_EXHAUSTED: dict[type[EtlError], type[RetriesExhausted]] = {}


def _exhausted(cause: type[EtlError]) -> type[RetriesExhausted]:
    if cause not in _EXHAUSTED:
        _EXHAUSTED[cause] = type("RetriesExhausted", (RetriesExhausted, cause), {"__module__": __name__})
    return _EXHAUSTED[cause]


class DataError(EtlError):
    exit_code = ExitCode.DATA
    fatal = False


class StorageError(EtlError):
    exit_code = ExitCode.OUTPUT


class LostRace(StorageError):
    """A conditional swap found another writer's version in place of the one it was planned on: planned
    again (etl/support/optimistic.py) until attempts run out."""


class LockedError(EtlError):
    exit_code = ExitCode.LOCKED


class QualityBelow(EtlError):
    """`etl report --fail-under`: the data is there, but some parameters are less complete than asked."""

    exit_code = ExitCode.QUALITY
    fatal = False


class Unhealthy(EtlError):
    """`etl doctor`: the checks ran, and at least one found something a person must fix."""

    exit_code = ExitCode.UNHEALTHY
    fatal = False


class OutputDiffers(EtlError):
    """`etl verify`: windows of the output hold other rows than the source serves for them now."""

    exit_code = ExitCode.DIFFERS
    fatal = False


class RunDeadline(EtlError):
    """The run stopped at `retry.run_deadline` as on SIGTERM (what was done is checkpointed), or earlier
    when a 429 held every request until past it: a timeout of the whole run, or the server's 429."""

    exit_code = ExitCode.NETWORK

    def __init__(self, message: str, throttled: bool = False):
        super().__init__(message)
        if throttled:
            self.exit_code = ExitCode.SERVER


class Interrupted(EtlError):
    exit_code = ExitCode.INTERRUPTED


_BY_CODE: dict[int, type[EtlError]] = {
    ExitCode.CONFIG: ConfigError,
    ExitCode.AUTH: AuthError,
    ExitCode.NETWORK: NetworkError,
    ExitCode.SERVER: ApiError,
    ExitCode.DATA: DataError,
    ExitCode.OUTPUT: StorageError,
    ExitCode.LOCKED: LockedError,
    ExitCode.QUALITY: QualityBelow,
    ExitCode.UNHEALTHY: Unhealthy,
    ExitCode.DIFFERS: OutputDiffers,
    ExitCode.INTERRUPTED: Interrupted,
}


def error_from(message: str, exit_code: int) -> EtlError:
    """An error reported by another process (a Dask worker), keeping its message and exit code."""
    error = _BY_CODE.get(exit_code, EtlError)(message)
    error.exit_code = exit_code
    return error


def without_frames(error: EtlError) -> EtlError:
    """`error` (changed in place) with the tracebacks of it and of what it wraps cleared: the frames an
    error was raised through keep their locals alive, an answer's body among them, for as long as the
    error is kept."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        each = stack.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        each.__traceback__ = None
        stack += [each.__cause__, each.__context__, getattr(each, "last", None)]
    return error
