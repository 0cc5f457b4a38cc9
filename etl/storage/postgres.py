"""A PostgreSQL database through ADBC's driver (`adbc-driver-postgresql`, the `postgres` extra, imported on
first use): Arrow in by binary COPY, Arrow out, one line per error without the password.

A `Database` keeps one connection, which its threads share one transaction at a time: the run's commits,
its reads and its advisory lock (etl/state/lock.py) go through it, so no commit is ever made by a
connection that does not hold the lock. Every use is a transaction of its own, committed at its end or
rolled back on an error: the connection never idles inside one. Dask workers open their own.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from etl.errors import LockedError, StorageError
from etl.support import redact
from etl.support.optional import require

if TYPE_CHECKING:  # the driver loads for sink.format postgres only
    from adbc_driver_manager.dbapi import Connection, Cursor


# scheme://user[:password]@rest: the password runs to the first '@' (hosts hold none).
_CREDENTIALS = re.compile(r"^([\w+.-]+://)([^:/@]*)(?::([^@]*))?@(.*)$", re.DOTALL)


def quoted(*names: str) -> str:
    """An identifier, or schema.name, quoted for SQL (etl's names: no quote inside)."""
    return ".".join(f'"{n}"' for n in names)


def lock_key(text: str) -> int:
    """A signed 64-bit advisory lock key for a name."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


def _one_line(exc: BaseException) -> str:
    """The driver's message as one line: libpq's text without the driver's prefixes and the query."""
    text = str(exc).split("\n\nQuery was:", 1)[0]
    text = re.sub(r"^[A-Z_]+: (\[libpq\] )?", "", text)
    text = re.sub(r"^(Failed to (connect|prepare query|execute query|execute statement)[^:]*: )", "", text)
    text = re.sub(r"(ERROR|FATAL):\s+", r"\1: ", text)
    return redact.redact(" ".join(text.split()).removesuffix(".").strip()) or type(exc).__name__


class Database:
    """One PostgreSQL database and the schema of etl's tables in it."""

    def __init__(self, dsn: str, schema: str, password: str | None = None) -> None:
        """`password`: the database's (sink.password_file), in place of the dsn's."""
        self.schema = schema
        found = _CREDENTIALS.match(dsn.strip())
        scheme, user, written, rest = found.groups() if found else ("", None, None, dsn.strip())
        # Read as SQLAlchemy reads sink.catalog: the password runs to the first '@', so one substituted
        # from ${VARIABLE} may hold any character; libpq gets it percent-encoded.
        secret = password if password is not None else unquote(written) if written is not None else None
        if secret is not None:
            redact.register(secret, quote(secret, safe=""))
        login = quote(unquote(user), safe="") if user else ""
        userinfo = f"{login}:{quote(secret, safe='')}@" if secret is not None else f"{login}@" if user else ""
        self.uri = f"{scheme}{userinfo}{rest}"
        # What messages name: the user, host, port and database, never the password.
        where = re.sub(r"^[\w+.-]+://", "", rest).split("?", 1)[0]
        self.display = f"{unquote(user)}@{where}" if user else where
        self.target = f"{where} schema {schema}"  # which tables, whoever logs in
        self._con: Connection | None = None
        self._lock = threading.RLock()
        self._holding: set[int] = set()  # advisory locks the connection holds
        self._depth = 0  # transactions open (the lock's owner's: one, or none)

    def _error(self, action: str, exc: BaseException) -> StorageError:
        return StorageError(redact.redact(f"PostgreSQL {self.display}: {action}: {_one_line(exc)}"))

    def connect(self) -> Connection:
        """A new connection (autocommit off), named in pg_stat_activity by this process."""
        dbapi = require("adbc_driver_postgresql.dbapi", "sink.format postgres")
        errors = require("adbc_driver_manager", "sink.format postgres")
        try:
            con: Connection = dbapi.connect(self.uri)
        except errors.Error as exc:
            raise self._error("cannot connect", exc) from None
        try:
            with con.cursor() as cursor:
                cursor.execute(f"set application_name = 'etl pid {os.getpid()} on {_host()}'")
            con.commit()
        except errors.Error as exc:
            con.close()
            raise self._error("cannot connect", exc) from None
        return con

    @contextmanager
    def transaction(self, action: str = "write") -> Iterator[Cursor]:
        """A cursor of the shared connection inside a transaction: committed when the block ends, rolled
        back when it raises. One at a time per Database (threads wait)."""
        errors = require("adbc_driver_manager", "sink.format postgres")
        with self._lock:
            if self._con is None:
                self.check()
                self._con = self.connect()
            con = self._con
            if self._depth:  # inside this thread's transaction: part of it
                with con.cursor() as cursor:
                    yield cursor
                return
            self._depth += 1
            try:
                with con.cursor() as cursor:
                    yield cursor
                con.commit()
            except errors.Error as exc:
                self._rollback()
                raise self._error(action, exc) from None
            except BaseException:
                self._rollback()
                raise
            finally:
                self._depth -= 1

    def _rollback(self) -> None:
        """After an error: the transaction undone, or the connection dropped when it is broken (the next
        use opens another, holding no advisory lock: a lock holder checks its lock first)."""
        if self._con is None:
            return
        try:
            self._con.rollback()
        except Exception:  # noqa: BLE001 - a broken connection: forget it
            self.close()

    def check(self) -> None:
        """Refuse to go on when the connection that held advisory locks ended: they went with it, and
        another run may hold them now."""
        if self._holding and self._con is None:
            raise LockedError(
                f"lost the run's advisory lock: its connection to PostgreSQL {self.display} ended; run again"
            )

    def try_lock(self, key: int) -> bool:
        """A session-level advisory lock on the shared connection, if free."""
        with self._lock:
            got = bool(self.rows("select pg_try_advisory_lock($1)", (key,), "lock")[0][0])
            if got:
                self._holding.add(key)
            return got

    def unlock(self, key: int) -> None:
        with self._lock:
            if key in self._holding and self._con is not None:
                with suppress(StorageError):
                    self.rows("select pg_advisory_unlock($1)", (key,), "unlock")
            self._holding.discard(key)

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                with suppress(Exception):
                    self._con.close()
                self._con = None

    def rows(self, sql: str, parameters: tuple[Any, ...] = (), action: str = "read") -> list[tuple[Any, ...]]:
        """A query's rows, in a transaction of its own."""
        with self.transaction(action) as cursor:
            cursor.execute(sql, parameters or None)
            return list(cursor.fetchall())

    def arrow(self, sql: str, parameters: tuple[Any, ...] = (), action: str = "read") -> Any:
        """A query's rows as an Arrow table (pyarrow.Table)."""
        with self.transaction(action) as cursor:
            cursor.execute(sql, parameters or None)
            return cursor.fetch_arrow_table()


def _host() -> str:
    return socket.gethostname().replace("'", "")
