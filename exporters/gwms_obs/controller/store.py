"""Where the controller keeps its rules and audit log: SQLite or PostgreSQL through SQLAlchemy Core.

One schema for both, created only by the Alembic migrations shipped in
``migrations/`` (``Store.migrate``); the tables below describe the current
schema for the queries, and tests/test_controller_store.py checks that the
migrated database and these tables agree.

Every change (create, expire, delete) writes the rule, its audit entry and a
bumped ``meta.generation`` in one transaction: a controller process that sees
the generation move reloads its policy snapshot, and the audit log never
misses, or invents, a change. The store never reads a clock: the caller
passes ``at`` (Unix seconds), so tests control time.

SQLite: one file, in WAL mode (readers never block the writer), with a busy
timeout and every write transaction begun IMMEDIATE, so concurrent writers
queue instead of failing with "database is locked". A new database file is
created mode 0600 (SQLite gives its -wal and -shm files the same mode); an
existing file keeps its mode. The parent directory must exist.

The ``sessions`` table holds the web page's sessions (web.py): a logout deletes
its row, so it ends in every process on the database.

Nothing the store writes can fail on its text: a change's reason with a
control, surrogate or bidi-override character is a ValueError before the
database sees it, and a refusal's why and detail are stored escaped
(validate.visible). Times are Unix seconds from 1970 to 9999 (MAX_TIME).

PostgreSQL: psycopg 3 (``postgresql+psycopg://``), a small pool, the default
isolation (read committed); the generation bump is the first statement of
every change, so concurrent writers serialize on the ``meta`` row and commit
in generation order.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, Connection, Engine, make_url

from .policy import (
    DENIAL_REASONS,
    SELECTOR_FIELDS,
    Effect,
    Kind,
    Principal,
    Role,
    Rule,
    Selector,
    Verbosity,
)
from .validate import MAX_DETAIL, first_unsafe, visible

# Alembic's script_location as a package resource: found wherever the package is installed
MIGRATIONS = "gwms_obs.controller:migrations"
CHANGES = ("create", "expire", "delete")
ACTIONS = (*CHANGES, "denied")
SQLITE_BUSY_TIMEOUT_MS = 5000
PG_CONNECT_TIMEOUT_S = 10
# the times a rule or entry may hold: from 1970 to the end of year 9999, the range every date formatter shows
MAX_TIME = 253_402_300_799.0

# named constraints: the same names on both backends, so a later migration can drop or alter them
metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


rules_table = sa.Table(
    "rules",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(16), nullable=False),
    *(sa.Column(f, sa.String(256), nullable=True) for f in SELECTOR_FIELDS),
    sa.Column("verbosity", sa.Integer, nullable=False),
    sa.Column("sample", sa.Double, nullable=False),
    sa.Column("record_commands", sa.Boolean, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("created", sa.Double, nullable=False),
    sa.Column("expires", sa.Double, nullable=True),
    sa.CheckConstraint(_in("kind", tuple(k.value for k in Kind)), name="kind"),
    sa.CheckConstraint(_in("role", tuple(r.value for r in Role)), name="role"),
    sa.CheckConstraint("verbosity BETWEEN 0 AND 3", name="verbosity"),
    sa.CheckConstraint("sample >= 0 AND sample <= 1", name="sample"),
    sa.Index(None, "site"),
    # SQLite would otherwise reuse a deleted newest rule's id, and its audit history with it
    sqlite_autoincrement=True,
)

audit_table = sa.Table(
    "audit",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Double, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("attempted", sa.String(16), nullable=False),
    sa.Column("rule_id", sa.Integer, nullable=True),  # no foreign key: a deleted rule's history stays
    sa.Column("before_json", sa.Text, nullable=True),
    sa.Column("after_json", sa.Text, nullable=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    sa.CheckConstraint(_in("action", ACTIONS), name="action"),
    sa.Index(None, "rule_id"),
    sqlite_autoincrement=True,
)

# web page sessions (web.py): the cookie carries the session id, this table what it is worth, so a
# logout (a deleted row) ends the session in every worker and every controller on the database
sessions_table = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),  # SHA-256 of the session id, never the id itself
    sa.Column("token_sha256", sa.String(64), nullable=False),
    sa.Column("created", sa.Double, nullable=False),
    sa.Column("expires", sa.Double, nullable=False),
    sa.Index(None, "expires"),
)

meta_table = sa.Table(
    "meta",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.CheckConstraint("id = 1", name="single_row"),
)


class StoreError(RuntimeError):
    """The database cannot be used: a bad URL, a missing directory, an unreachable server."""


@dataclass(frozen=True)
class AuditEntry:
    """One line of the audit log: a change made, or a write refused."""

    id: int
    at: float
    actor: str
    role: str
    action: str  # create | expire | delete | denied
    rule_id: int | None
    before: dict[str, Any] | None  # Rule.as_dict() before the change
    after: dict[str, Any] | None  # Rule.as_dict() after it; for a denial, the rule requested
    reason: str  # the human's why
    outcome: str  # "ok", or the denial's reason word (policy.DENIAL_REASONS)
    detail: str  # the denial's detail, or ""
    attempted: str = ""  # for action=denied: the action refused (create | expire | delete)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "actor": self.actor,
            "role": self.role,
            "action": self.action,
            "attempted": self.attempted,
            "rule_id": self.rule_id,
            "before": self.before,
            "after": self.after,
            "reason": self.reason,
            "outcome": self.outcome,
            "detail": self.detail,
        }


def masked(url: str | URL) -> str:
    """The URL as it may be printed: the password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return "(an unparseable database URL)"


class Store:
    """The controller's rules and audit log in one database (see the module's docstring)."""

    def __init__(self, url: str) -> None:
        try:
            parsed = make_url(url)
        except exc.ArgumentError:
            raise StoreError(
                f"database URL {masked(url)}: not a URL; sqlite:////abs/path.db or "
                "postgresql+psycopg://user:password@host:port/db"
            ) from None
        self._url = parsed
        self._secret = parsed.password or ""
        backend = parsed.get_backend_name()
        if backend == "sqlite":
            self._engine = self._sqlite_engine(parsed)
        elif backend == "postgresql":
            if parsed.get_driver_name() != "psycopg":
                raise StoreError(f"database URL {self.url}: PostgreSQL through psycopg 3 only (postgresql+psycopg://)")
            self._engine = self._pg_engine(parsed)
        else:
            raise StoreError(f"database URL {self.url}: sqlite:// or postgresql+psycopg:// only")
        # writes: BEGIN IMMEDIATE on SQLite (see _sqlite_engine); the same pool
        self._writer = self._engine.execution_options(gwms_write=True)
        # fail now, with the URL named, rather than on the first request
        # (and a file that is not an SQLite database is said so, not as a traceback)
        with self._errors("connect to", (exc.DatabaseError,)), self._engine.connect() as conn:
            if self.dialect == "sqlite":
                mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
                if str(mode).lower() != "wal":
                    raise StoreError(f"database {self.url}: journal_mode is {mode}, not wal")

    @property
    def url(self) -> str:
        """The database URL with its password masked."""
        return masked(self._url)

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    # --- engines -------------------------------------------------------------------------------

    def _sqlite_engine(self, url: URL) -> Engine:
        if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
            raise StoreError(f"database URL {self.url}: SQLite needs a file path, sqlite:////abs/path.db")
        path = Path(url.database)
        if not path.parent.is_dir():
            raise StoreError(f"database {self.url}: directory {path.parent} does not exist")
        if not path.exists():
            try:  # created 0600 before SQLite opens it (and makes its -wal/-shm files alike)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass
            except OSError as e:
                raise StoreError(f"database {self.url}: cannot create {path}: {e.strerror}") from None
        engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # pysqlite's own transaction handling begins lazily and DEFERRED; SQLAlchemy
            # emits BEGIN instead (below) so writes can take the lock up front
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            try:
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA synchronous=NORMAL")  # safe in WAL mode: a crash loses no committed transaction
            finally:
                cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # a DEFERRED transaction that reads and then writes cannot wait for the lock
            # (SQLite returns "database is locked" at once); IMMEDIATE waits busy_timeout
            immediate = conn.get_execution_options().get("gwms_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    def _pg_engine(self, url: URL) -> Engine:
        return sa.create_engine(
            url,
            pool_size=4,
            max_overflow=4,
            pool_pre_ping=True,  # a restarted server's dead connections are replaced, not handed out
            pool_recycle=3600,
            connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S, "application_name": "gwms-obs-controller"},
        )

    @contextmanager
    def _errors(self, doing: str, catch: tuple[type[exc.DBAPIError], ...] = ()) -> Iterator[None]:
        """Connection failures (and ``catch``) as StoreError naming the masked URL; never the password."""
        caught: tuple[type[exc.DBAPIError], ...] = (exc.OperationalError, exc.InterfaceError, *catch)
        try:
            yield
        except caught as e:
            text = str(e.orig if e.orig is not None else e).strip().splitlines()
            message = text[0] if text else type(e).__name__
            if self._secret:
                message = message.replace(self._secret, "***")
            raise StoreError(f"cannot {doing} database {self.url}: {message}") from None

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._errors("write to"), self._writer.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._errors("read from"), self._engine.connect() as conn:
            yield conn

    # --- schema ------------------------------------------------------------------------------

    def _alembic_config(self, conn: Connection | None = None) -> Any:
        from alembic.config import Config

        cfg = Config()  # no alembic.ini: everything it would say is here
        cfg.set_main_option("script_location", MIGRATIONS)
        cfg.attributes["connection"] = conn
        return cfg

    def head(self) -> str:
        """The newest revision the shipped migrations know."""
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(self._alembic_config()).get_current_head()
        assert head is not None, "no migrations shipped"
        return head

    def migrate(self) -> str:
        """Bring the schema to the newest revision (a no-op when it is there); return that revision."""
        from alembic import command

        with self._write() as conn:
            if self.dialect == "postgresql":
                # two controllers starting together: one migrates, the other waits and finds it done
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": 0x67776D73})
            command.upgrade(self._alembic_config(conn), "head")
        revision = self.revision()
        assert revision is not None
        return revision

    def revision(self) -> str | None:
        """The schema revision the database is at; None before the first migrate()."""
        from alembic.runtime.migration import MigrationContext

        with self._read() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    # --- rules -------------------------------------------------------------------------------

    def rules(self) -> list[Rule]:
        """Every stored rule, expired ones too, by id."""
        with self._read() as conn:
            rows = conn.execute(sa.select(rules_table).order_by(rules_table.c.id)).mappings().all()
        return [_rule(r) for r in rows]

    def rule(self, rule_id: int) -> Rule | None:
        with self._read() as conn:
            row = conn.execute(sa.select(rules_table).where(rules_table.c.id == rule_id)).mappings().first()
        return _rule(row) if row is not None else None

    def generation(self) -> int:
        """Bumped by every change in its own transaction: a snapshot built at another generation is stale."""
        with self._read() as conn:
            return int(conn.execute(sa.select(meta_table.c.generation)).scalar_one())

    def create(
        self,
        kind: Kind,
        selector: Selector,
        effect: Effect,
        actor: Principal,
        reason: str,
        at: float,
        expires: float | None,
    ) -> Rule:
        """Store a new rule (owned by ``actor``, created ``at``) and audit it, in one transaction."""
        _need_reason(reason)
        _need_time(at, "at")
        if expires is not None:
            _need_time(expires, "expires")
        values: dict[str, Any] = {
            "kind": Kind(kind).value,
            **{f: getattr(selector, f) for f in SELECTOR_FIELDS},
            "verbosity": int(effect.verbosity),
            "sample": float(effect.sample),
            "record_commands": bool(effect.record_commands),
            "owner": actor.name,
            "role": Role(actor.role).value,
            "reason": reason,
            "created": float(at),
            "expires": None if expires is None else float(expires),
        }
        with self._write() as conn:
            self._bump(conn)
            rule = Rule(
                id=_inserted(conn.execute(sa.insert(rules_table).values(values))),
                kind=Kind(kind),
                selector=selector,
                effect=effect,
                owner=actor.name,
                role=Role(actor.role),
                reason=reason,
                created=float(at),
                expires=values["expires"],
            )
            self._audit(conn, actor, "create", at, rule.id, None, rule.as_dict(), reason)
        return rule

    def expire(self, rule_id: int, actor: Principal, reason: str, at: float) -> tuple[Rule, Rule]:
        """End a rule at ``at`` (before, after); an already earlier expiry stays. KeyError if there is none."""
        _need_reason(reason)
        _need_time(at, "at")
        with self._write() as conn:
            self._bump(conn)
            before = self._locked(conn, rule_id)
            expires = float(at) if before.expires is None else min(before.expires, float(at))
            conn.execute(sa.update(rules_table).where(rules_table.c.id == rule_id).values(expires=expires))
            after = self._locked(conn, rule_id)
            self._audit(conn, actor, "expire", at, rule_id, before.as_dict(), after.as_dict(), reason)
        return before, after

    def delete(self, rule_id: int, actor: Principal, reason: str, at: float) -> Rule:
        """Remove a rule; its audit entry keeps what it was. KeyError if there is none."""
        _need_reason(reason)
        _need_time(at, "at")
        with self._write() as conn:
            self._bump(conn)
            before = self._locked(conn, rule_id)
            conn.execute(sa.delete(rules_table).where(rules_table.c.id == rule_id))
            self._audit(conn, actor, "delete", at, rule_id, before.as_dict(), None, reason)
        return before

    def record_denial(
        self,
        actor: Principal,
        action: str,
        reason: str,
        detail: str,
        at: float,
        request: dict[str, Any] | None,
        rule_id: int | None = None,
        *,
        why: str = "",
    ) -> AuditEntry:
        """Audit a refused write: ``action`` is what was refused, ``reason`` the denial's word (Denied.reason).

        ``request`` (the rule asked for, as a dict) is kept as the entry's ``after``; for an
        expire or delete of a rule that exists, ``before`` is that rule. ``why`` is the
        human's reason given with the refused request, if any. No generation bump: nothing changed.
        ``why`` and ``detail`` are stored as :func:`validate.visible` shows them, and ``request``
        as ASCII JSON: what a refused request carried can never make its audit write fail.
        """
        if action not in CHANGES:
            raise ValueError(f"action {action!r}: one of {', '.join(CHANGES)}")
        if reason not in DENIAL_REASONS:
            raise ValueError(f"denial reason {reason!r}: one of {', '.join(DENIAL_REASONS)}")
        _need_time(at, "at")
        why, detail = visible(why, MAX_DETAIL), visible(detail, MAX_DETAIL)
        with self._write() as conn:
            before = None
            if rule_id is not None:
                row = conn.execute(sa.select(rules_table).where(rules_table.c.id == rule_id)).mappings().first()
                before = _rule(row).as_dict() if row is not None else None
            entry_id = self._audit(
                conn,
                actor,
                "denied",
                at,
                rule_id,
                before,
                request,
                why,
                outcome=reason,
                detail=detail,
                attempted=action,
            )
            row = conn.execute(sa.select(audit_table).where(audit_table.c.id == entry_id)).mappings().one()
        return _entry(row)

    def audit(self, limit: int = 100, before_id: int | None = None, rule_id: int | None = None) -> list[AuditEntry]:
        """The audit log, newest first: ``limit`` entries with ids below ``before_id``, of one rule or all."""
        if limit < 1:
            raise ValueError(f"limit {limit}: at least 1")
        query = sa.select(audit_table).order_by(audit_table.c.id.desc()).limit(limit)
        if before_id is not None:
            query = query.where(audit_table.c.id < before_id)
        if rule_id is not None:
            query = query.where(audit_table.c.rule_id == rule_id)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [_entry(r) for r in rows]

    # --- web sessions ------------------------------------------------------------------------------

    def open_session(self, digest: str, token_sha256: str, at: float, expires: float) -> None:
        """A web session (``digest``: its id's SHA-256) of a token, valid until ``expires``; the expired go."""
        with self._write() as conn:
            conn.execute(sa.delete(sessions_table).where(sessions_table.c.expires <= at))
            conn.execute(sa.insert(sessions_table).values(id=digest, token_sha256=token_sha256, created=at,
                                                          expires=expires))  # fmt: skip

    def session(self, digest: str, at: float) -> str | None:
        """The token hash of a session still open at ``at``, or None (closed, expired or never opened)."""
        query = sa.select(sessions_table.c.token_sha256).where(
            sessions_table.c.id == digest, sessions_table.c.expires > at
        )
        with self._read() as conn:
            found = conn.execute(query).scalar()
        return None if found is None else str(found)

    def close_session(self, digest: str) -> bool:
        """End a session (logout); False when there was none."""
        with self._write() as conn:
            return conn.execute(sa.delete(sessions_table).where(sessions_table.c.id == digest)).rowcount > 0

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- inside a write transaction ------------------------------------------------------------

    def _bump(self, conn: Connection) -> int:
        # first statement of every change: PostgreSQL writers queue here on the meta row's lock
        update = sa.update(meta_table).values(generation=meta_table.c.generation + 1)
        return int(conn.execute(update.returning(meta_table.c.generation)).scalar_one())

    def _locked(self, conn: Connection, rule_id: int) -> Rule:
        query = sa.select(rules_table).where(rules_table.c.id == rule_id)
        if self.dialect == "postgresql":
            query = query.with_for_update()
        row = conn.execute(query).mappings().first()
        if row is None:
            raise KeyError(rule_id)
        return _rule(row)

    def _audit(
        self,
        conn: Connection,
        actor: Principal,
        action: str,
        at: float,
        rule_id: int | None,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        reason: str,
        *,
        outcome: str = "ok",
        detail: str = "",
        attempted: str = "",
    ) -> int:
        values = {
            "at": float(at),
            "actor": actor.name,
            "role": Role(actor.role).value,
            "action": action,
            "attempted": attempted,
            "rule_id": rule_id,
            "before_json": _dump(before),
            "after_json": _dump(after),
            "reason": reason,
            "outcome": outcome,
            "detail": detail,
        }
        return _inserted(conn.execute(sa.insert(audit_table).values(values)))


def _inserted(result: sa.CursorResult[Any]) -> int:
    key = result.inserted_primary_key
    assert key is not None, "an INSERT returns its primary key"
    return int(key[0])


def _need_reason(reason: str) -> None:
    if not reason or not reason.strip():
        raise ValueError("a reason is required for every change")
    bad = first_unsafe(reason)
    if bad is not None:  # a NUL PostgreSQL refuses, a surrogate SQLite cannot encode, a bidi override
        raise ValueError(f"reason: {bad!a} is a control, surrogate or bidirectional-override character")


def _need_time(value: float, name: str) -> None:
    if not (math.isfinite(value) and 0 <= value <= MAX_TIME):
        raise ValueError(f"{name} {value!r}: Unix seconds from 1970 to 9999")


def _dump(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _load(text: str | None) -> dict[str, Any] | None:
    """A stored rule's JSON; one that is not a JSON object (written by hand, or by a bug) is marked unreadable,
    so one bad entry never takes the audit log down with it."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {"unreadable": visible(text, 200)}


def _rule(row: sa.RowMapping) -> Rule:
    return Rule(
        id=int(row["id"]),
        kind=Kind(row["kind"]),
        selector=Selector(**{f: row[f] for f in SELECTOR_FIELDS}),
        effect=Effect(Verbosity(row["verbosity"]), float(row["sample"]), bool(row["record_commands"])),
        owner=row["owner"],
        role=Role(row["role"]),
        reason=row["reason"],
        created=float(row["created"]),
        expires=None if row["expires"] is None else float(row["expires"]),
    )


def _entry(row: sa.RowMapping) -> AuditEntry:
    return AuditEntry(
        id=int(row["id"]),
        at=float(row["at"]),
        actor=row["actor"],
        role=row["role"],
        action=row["action"],
        rule_id=row["rule_id"],
        before=_load(row["before_json"]),
        after=_load(row["after_json"]),
        reason=row["reason"],
        outcome=row["outcome"],
        detail=row["detail"],
        attempted=row["attempted"],
    )


__all__ = ["ACTIONS", "MAX_TIME", "AuditEntry", "Store", "StoreError", "masked", "metadata"]
