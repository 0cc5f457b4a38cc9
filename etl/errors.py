"""One exception tree for the whole tool; each class carries the exit code the CLI returns."""

from __future__ import annotations


class ExitCode:
    OK = 0
    CONFIG = 2  # bad config, arguments or usage (click uses 2 for usage errors too)
    AUTH = 3  # sign-in refused, session rejected after re-sign-in
    NETWORK = 4  # host unreachable, connection failures after retries
    SERVER = 5  # 5xx/429 after retries, requests the server rejected
    DATA = 6  # answers that cannot be parsed or fail validation
    OUTPUT = 7  # output or state location cannot be written (permissions, disk full)
    LOCKED = 8  # another run holds the state lock
    INTERNAL = 70  # a bug: please report it (traceback with --debug)
    INTERRUPTED = 130  # SIGINT/SIGTERM: stopped after the in-flight work was committed


class EtlError(Exception):
    """Base of every error the tool reports as one line."""

    exit_code = ExitCode.INTERNAL


class ConfigError(EtlError, ValueError):
    exit_code = ExitCode.CONFIG


class InvalidArgument(ConfigError):
    """An argument the server would refuse anyway (e.g. a raw window over 24 h)."""


class ApiError(EtlError):
    """Something went wrong talking to the platform."""

    exit_code = ExitCode.SERVER


class AuthError(ApiError):
    exit_code = ExitCode.AUTH


class SessionRejected(AuthError):
    """A session refused again right after a new sign-in. Retried: under load a short-lived session
    can expire before this request's turn; when retries run out, an auth error (rights?)."""


class NetworkError(ApiError):
    exit_code = ExitCode.NETWORK

    def __init__(self, message: str, reason: str = "network"):
        super().__init__(message)
        self.reason = reason


class TlsError(NetworkError):
    """The server's certificate was not accepted: not retried, it will not change in a minute."""

    def __init__(self, message: str):
        super().__init__(message, reason="tls")


class ServerError(ApiError):
    """A retryable answer: 5xx or 429."""

    def __init__(self, message: str, status: int, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class RequestRejected(ApiError):
    """A 4xx the server will give again: not retried."""

    def __init__(self, message: str, status: int, excerpt: str = ""):
        super().__init__(message)
        self.status = status
        self.excerpt = excerpt


class NotFound(RequestRejected):
    pass


class InvalidResponse(ApiError):
    """A 200 whose body is not the JSON we expect (truncated, HTML, wrong shape)."""

    exit_code = ExitCode.DATA


class RetriesExhausted(ApiError):
    """Gave up after the retry policy's attempts or deadline; exit code of the last cause."""

    def __init__(self, message: str, last: BaseException, attempts: int):
        super().__init__(message)
        self.last = last
        self.attempts = attempts
        self.exit_code = getattr(last, "exit_code", ExitCode.NETWORK)


class DataError(EtlError):
    exit_code = ExitCode.DATA


class StorageError(EtlError):
    exit_code = ExitCode.OUTPUT


class LockedError(EtlError):
    exit_code = ExitCode.LOCKED


class Interrupted(EtlError):
    exit_code = ExitCode.INTERRUPTED


_BY_CODE: dict[int, type[EtlError]] = {
    ExitCode.CONFIG: ConfigError, ExitCode.AUTH: AuthError, ExitCode.NETWORK: NetworkError,
    ExitCode.SERVER: ApiError, ExitCode.DATA: DataError, ExitCode.OUTPUT: StorageError,
    ExitCode.LOCKED: LockedError, ExitCode.INTERRUPTED: Interrupted,
}


def error_from(message: str, exit_code: int) -> EtlError:
    """An error reported by another process (a Dask worker), keeping its message and exit code."""
    error = _BY_CODE.get(exit_code, EtlError)(message)
    error.exit_code = exit_code
    return error
