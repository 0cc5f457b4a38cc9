"""A throwaway PostgreSQL cluster (Debian's `postgresql`, installed by `make postgres`) on a free loopback
port, for the Iceberg SQL catalog tests and the PostgreSQL sink's. PostgreSQL refuses to run as root, so
under root (CI) the server runs as the package's `postgres` user. A test's PostgreSQL sink gets a schema
of its own in the one database (`sink`), its password through the environment (VARIABLE)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import quote

USER = "etl"
DATABASE = "etl_catalog"
VARIABLE = "ETL_PG_PASSWORD"  # the sinks' dsn reads the password from it, as users write it
# A test output's folder -> (the database's URL, the sink's schema): tests/support/output.py reads it back.
OUTPUTS: dict[str, tuple[str, str]] = {}
# Characters a URL must escape, so the catalog URL's password is tested encoded as users write it.
PASSWORD = "pg-s3cr3t/Catalog:pw"  # noqa: S105 - the throwaway cluster's password, and the leak probe


class Missing(Exception):
    """PostgreSQL's server programs are not installed."""


@dataclass(frozen=True)
class RunningPostgres:
    host: str
    port: int
    database: str
    user: str
    password: str

    def url(self, password: str | None = None, driver: str = "") -> str:
        """The database's URL as users write it; `password` replaces the real one (e.g. a ${VARIABLE}),
        `driver` names SQLAlchemy's (e.g. "+psycopg2")."""
        secret = quote(self.password, safe="") if password is None else password
        return f"postgresql{driver}://{self.user}:{secret}@{self.host}:{self.port}/{self.database}"


def binaries() -> str:
    """The newest installed major version's bin folder (Debian keeps initdb and pg_ctl off the PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise Missing("initdb not found under /usr/lib/postgresql/*/bin")
    return os.path.dirname(found[-1])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_postgres() -> Iterator[RunningPostgres]:
    """initdb into a temp folder, pg_ctl start on 127.0.0.1 only (no Unix socket), a database and a
    password-authenticated user; stopped and removed afterwards. Durability is off: nothing outlives it."""
    bin_dir = binaries()
    prefix: list[str] = []
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")  # created by Debian's postgresql-common
        except KeyError:
            raise RuntimeError("PostgreSQL refuses to run as root and there is no 'postgres' user") from None
        prefix = ["runuser", "-u", "postgres", "--"]
    home = tempfile.mkdtemp(prefix="pg-etl-tests-")
    data = os.path.join(home, "data")
    pwfile = os.path.join(home, "pw")
    with open(pwfile, "w") as f:
        f.write(PASSWORD)
    if owner is not None:
        for path in (home, pwfile):
            os.chown(path, owner.pw_uid, owner.pw_gid)

    def run(*args: str) -> None:
        done = subprocess.run([*prefix, *args], capture_output=True, text=True, cwd=home)
        if done.returncode:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stderr.strip() or done.stdout.strip()}")

    started = False
    try:
        run(
            f"{bin_dir}/initdb",
            "-D",
            data,
            "-U",
            USER,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "--no-sync",  # a test cluster: a crash may lose it
            "--no-instructions",
            "-E",
            "UTF8",
            "--locale=C",
        )
        for attempt in range(3):  # another process may take the free port before the server binds it
            port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='' "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=40"
            )
            try:
                run(
                    f"{bin_dir}/pg_ctl",
                    "-D",
                    data,
                    "-l",
                    f"{home}/log",
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    options,
                    "start",
                )
                started = True
                break
            except RuntimeError:
                if attempt == 2:
                    with open(f"{home}/log") as log:
                        raise RuntimeError(f"PostgreSQL did not start: {log.read()[-2000:]}") from None
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD, dbname="postgres")
        con.autocommit = True
        with con.cursor() as cursor:
            cursor.execute(f"create database {DATABASE}")
        con.close()
        yield RunningPostgres("127.0.0.1", port, DATABASE, USER, PASSWORD)
    finally:
        if started:
            subprocess.run(
                [*prefix, f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
                capture_output=True,
            )
        shutil.rmtree(home, ignore_errors=True)


def sink(running: RunningPostgres, out: object, **keys: object) -> dict:
    """A PostgreSQL sink into `out` (its checkpoints and run summaries) with a schema of its own; the dsn's
    password is ${ETL_PG_PASSWORD}, which the `postgres` fixture exports."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    OUTPUTS[str(out)] = (running.url(), schema)
    return {
        "format": "postgres",
        "path": str(out),
        "dsn": running.url(f"${{{VARIABLE}}}"),
        "schema": schema,
        "buckets": 1,
        **keys,
    }


def database(out: object) -> object:
    """The etl Database of a test's PostgreSQL output (as `sink` registered it)."""
    from etl.storage.postgres import Database

    url, schema = OUTPUTS[str(out)]
    return Database(url, schema)


def main(argv: list[str]) -> int:
    """`python -m tests.support.postgres CMD...`: CMD run with a throwaway cluster up, its port in
    ETL_PG_PORT and its password in ETL_PG_PASSWORD (make demo-postgres)."""
    with running_postgres() as running:
        env = {**os.environ, "ETL_PG_PORT": str(running.port), VARIABLE: running.password}
        return subprocess.run(argv, env=env).returncode


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
