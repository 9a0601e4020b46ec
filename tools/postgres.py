"""A throwaway PostgreSQL cluster on 127.0.0.1 for the controller's tests and benchmark.

Debian's ``postgresql`` package (tools/prereqs.sh) installs the server under
``/usr/lib/postgresql/<version>/bin``, never on PATH; the newest version there
is used. PostgreSQL refuses to run as root, so under root the cluster belongs
to the ``postgres`` system user the package creates.

The cluster lives in a short private directory of its own (``/tmp/gwms-pg-*``),
not in the caller's ``workdir``: pytest's temporary dirs are private to root
(the ``postgres`` user could not enter them) and deep enough to overflow the
107-byte limit of a unix socket's path. ``workdir`` gets the server's log.
Durability is off (fsync, synchronous_commit, full_page_writes): the data is
thrown away, and the tests should not wait on the disk.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tools.polling import poll
from tools.tracing_backends import free_port

SUPERUSER = "postgres"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server installed (Debian package ``postgresql``), or no user to run it as."""


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    database: str
    socket_dir: Path  # the superuser connects here (trust); ``user`` over TCP with its password
    pid: int  # the postmaster's

    @property
    def dsn(self) -> str:
        """SQLAlchemy URL: ``postgresql+psycopg://gwms:PASSWORD@127.0.0.1:PORT/gwms``."""
        user, pw, db = (urllib.parse.quote(x, safe="") for x in (self.user, self.password, self.database))
        return f"postgresql+psycopg://{user}:{pw}@{self.host}:{self.port}/{db}"

    @property
    def conninfo(self) -> str:
        """The same as a libpq connection string, for ``psycopg.connect``."""
        return make_conninfo(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.database
        )


def bindir() -> Path:
    """``/usr/lib/postgresql/<newest version>/bin``."""
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/postgres") if p.parent.parent.name.isdigit()]
    if not found:
        raise PostgresUnavailable("no PostgreSQL server in /usr/lib/postgresql/*/bin (Debian package postgresql)")
    return max(found, key=lambda d: int(d.parent.name))


def _as_owner(owner: pwd.struct_passwd | None) -> list[str]:
    """Command prefix running as the cluster's owner: setpriv execs (no forking wrapper
    like runuser in between), so the Popen's pid is the postmaster itself."""
    if owner is None:
        return []
    return ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--init-groups", "--reset-env"]


@contextlib.contextmanager
def postgres_server(
    workdir: Path,
    *,
    user: str = "gwms",
    database: str = "gwms",
    settings: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> Iterator[PostgresServer]:
    """Start a fresh cluster with database ``database`` owned by ``user`` (a random password),
    listening on 127.0.0.1 on a free port; stop it (fast shutdown) and delete it on exit.

    ``settings``: extra server settings (``{"max_connections": "300"}``).
    """
    bins = bindir()
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable("running as root and no postgres user to run PostgreSQL as") from None
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "postgres.log"
    # /tmp, not $TMPDIR: the postgres user must be able to enter it
    home = Path(tempfile.mkdtemp(prefix="gwms-pg-", dir="/tmp"))
    try:
        if owner is not None:
            os.chown(home, owner.pw_uid, owner.pw_gid)
        data = home / "data"
        # the superuser over the socket only (trust: the socket dir is private); TCP needs a password
        initdb = [*_as_owner(owner), str(bins / "initdb"), "-D", str(data), f"--username={SUPERUSER}"]
        initdb += ["--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync"]
        with open(log, "ab") as out:
            subprocess.run(
                initdb, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/", timeout=120, check=True
            )
        port = free_port()
        conf = {
            "listen_addresses": "127.0.0.1",
            "port": str(port),
            "unix_socket_directories": str(home),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            **(settings or {}),
        }
        cmd = [*_as_owner(owner), str(bins / "postgres"), "-D", str(data)]
        cmd += [arg for k, v in conf.items() for arg in ("-c", f"{k}={v}")]
        with open(log, "ab") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/")
        try:
            admin = make_conninfo(host=str(home), port=port, user=SUPERUSER, dbname="postgres")

            def ready() -> bool:
                if p.poll() is not None:
                    raise RuntimeError(f"postgres exited with {p.returncode}:\n{log.read_text()[-3000:]}")
                try:
                    with psycopg.connect(admin, connect_timeout=2) as c:
                        c.execute("SELECT 1")
                    return True
                except psycopg.OperationalError:  # "the database system is starting up", no socket yet
                    return False

            poll(f"PostgreSQL on 127.0.0.1:{port}", ready, timeout)
            password = secrets.token_urlsafe(18)
            with psycopg.connect(admin, autocommit=True) as c:  # CREATE DATABASE refuses a transaction
                c.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(user), sql.Literal(password)))  # fmt: skip
                c.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(database), sql.Identifier(user)))  # fmt: skip
            yield PostgresServer("127.0.0.1", port, user, password, database, home, p.pid)
        finally:
            _stop(p)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _stop(p: subprocess.Popen[bytes]) -> None:
    """SIGINT is PostgreSQL's fast shutdown (what ``pg_ctl stop -m fast`` sends): sessions are
    disconnected, the postmaster waits for its children and exits. SIGQUIT (immediate) if stuck."""
    for sig, wait in ((signal.SIGINT, 30.0), (signal.SIGQUIT, 10.0), (signal.SIGKILL, 10.0)):
        if p.poll() is not None:
            return
        p.send_signal(sig)
        try:
            p.wait(wait)
        except subprocess.TimeoutExpired:
            continue
