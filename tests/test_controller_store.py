"""The controller's store (exporters/gwms_obs/controller/store.py) on SQLite and on a real PostgreSQL.

Every test that takes ``url`` runs on both: an SQLite file in tmp_path, and an empty
database on one PostgreSQL server (tools/postgres.py) that the module shares.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from gwms_obs.controller.policy import Effect, Kind, Principal, Role, Rule, Selector, Verbosity
from gwms_obs.controller.store import Store, StoreError, audit_table, metadata, rules_table

OPERATOR = Principal("olga", Role.OPERATOR)
SITE_ADMIN = Principal("sam", Role.SITE_ADMIN, sites=frozenset({"CERN"}))
READER = Principal("rita", Role.READER)
T0 = 1_750_000_000.25  # the tests' clock: the store never reads one


@pytest.fixture(scope="module")
def pg_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tools.postgres import postgres_server

    with postgres_server(tmp_path_factory.mktemp("pg")) as server:
        yield server.dsn


def _empty(dsn: str) -> None:
    """Drop whatever the previous test left: every test starts from an empty database."""
    engine = sa.create_engine(dsn)
    try:
        with engine.begin() as conn:
            old = sa.MetaData()
            old.reflect(conn)
            old.drop_all(conn)
            conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/controller.db"
    dsn: str = request.getfixturevalue("pg_dsn")
    _empty(dsn)
    return dsn


@pytest.fixture
def open_store() -> Iterator[Callable[[str], Store]]:
    """Stores the test opens, each closed at its end (a PostgreSQL pool left open would hold the next test up)."""
    opened: list[Store] = []

    def open_(url: str) -> Store:
        store = Store(url)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(url: str, open_store: Callable[[str], Store]) -> Store:
    s = open_store(url)
    s.migrate()
    return s


def _rows(store: Store, table: str) -> int:
    """Rows in a table, counted on a connection of its own (what another process would see)."""
    engine = sa.create_engine(store._url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def _create(store: Store, site: str = "CERN", at: float = T0, **kw: Any) -> Rule:
    return store.create(
        kw.pop("kind", Kind.SITE),
        kw.pop("selector", Selector(site=site)),
        kw.pop("effect", Effect(Verbosity.SCRIPTS, 0.5)),
        kw.pop("actor", OPERATOR),
        kw.pop("reason", "debugging slow validation"),
        at,
        kw.pop("expires", None),
    )


# --- schema -------------------------------------------------------------------------------------


def test_migrate_is_idempotent_and_reports_the_revision(url: str, open_store: Callable[[str], Store]) -> None:
    store = open_store(url)
    assert store.revision() is None
    head = store.head()
    assert head == "0002"
    assert store.migrate() == head
    assert store.migrate() == head  # again: nothing to do, nothing lost
    assert store.revision() == head
    assert store.generation() == 0
    assert store.rules() == [] and store.audit() == []
    # a second process starting against the migrated database finds it so
    assert open_store(url).migrate() == head


def test_migrated_schema_is_the_one_the_store_queries(store: Store) -> None:
    """Revision 0001 (frozen DDL) and store.metadata (the queries' tables) agree, columns and indexes."""
    with store._engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
        inspector = sa.inspect(conn)
        indexes = {t: {tuple(i["column_names"]) for i in inspector.get_indexes(t)} for t in ("rules", "audit")}
        checks = {c["name"] for t in ("rules", "audit", "meta") for c in inspector.get_check_constraints(t)}
    assert diff == []
    assert ("site",) in indexes["rules"] and ("rule_id",) in indexes["audit"]
    assert {"ck_rules_kind", "ck_rules_role", "ck_rules_verbosity", "ck_rules_sample", "ck_audit_action"} <= checks


@pytest.mark.parametrize(
    "column, value",
    [("verbosity", 4), ("verbosity", -1), ("sample", 1.5), ("sample", -0.1), ("kind", "everyone"), ("role", "root")],
)
def test_check_constraints_refuse_what_the_model_cannot_hold(store: Store, column: str, value: object) -> None:
    good = {
        "kind": "site",
        "verbosity": 1,
        "sample": 1.0,
        "record_commands": False,
        "owner": "x",
        "role": "operator",
        "reason": "r",
        "created": T0,
    }
    with pytest.raises(sa.exc.IntegrityError), store._engine.begin() as conn:
        # past the model's and the store's checks: the database's own refuse it
        conn.execute(sa.insert(rules_table).values({**good, column: value}))


def test_migrations_ship_inside_the_package() -> None:
    """Alembic finds them as a package resource, wherever the package is installed."""
    root = importlib.resources.files("gwms_obs.controller") / "migrations"
    assert (root / "env.py").is_file()
    assert (root / "script.py.mako").is_file()
    assert (root / "versions" / "v0001_initial.py").is_file()
    assert (root / "versions" / "v0002_sessions.py").is_file()


# --- SQLite -------------------------------------------------------------------------------------


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path, open_store: Callable[[str], Store]) -> None:
    path = tmp_path / "c.db"
    store = open_store(f"sqlite:///{path}")
    store.migrate()
    _create(store)
    # WAL is a property of the file: a plain sqlite3 connection, not the store's, sees it
    plain = sqlite3.connect(path)
    try:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        plain.close()
    with store._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "c.db-wal").stat().st_mode) == 0o600


def test_sqlite_waits_for_another_writer_instead_of_failing(tmp_path: Path, open_store: Callable[[str], Store]) -> None:
    """busy_timeout: a write while another connection holds the write lock waits for it."""
    path = tmp_path / "c.db"
    store = open_store(f"sqlite:///{path}")
    store.migrate()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the write lock, as another controller process would hold it
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            _create(store)
        except BaseException as e:
            errors.append(e)
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    time.sleep(0.5)
    assert not done.is_set(), "the write did not wait for the lock"
    other.execute("COMMIT")
    other.close()
    thread.join(10)
    assert done.is_set() and not errors
    assert len(store.rules()) == 1


def test_sqlite_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"directory .*nowhere does not exist"):
        Store(f"sqlite:///{tmp_path}/nowhere/c.db")


def test_sqlite_file_that_is_no_database_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "c.db").write_bytes(b"not a database, just some bytes " * 100)
    with pytest.raises(StoreError, match=r"cannot connect to database sqlite:///.*c\.db: file is not a database"):
        Store(f"sqlite:///{tmp_path}/c.db")


@pytest.mark.parametrize(
    "bad", ["sqlite://", "sqlite:///:memory:", "not a url", "mysql://u:pw@h/db", "postgresql+psycopg2://u:pw@h/db"]
)
def test_bad_urls_are_refused(bad: str) -> None:
    with pytest.raises(StoreError, match="database URL"):
        Store(bad)


# --- PostgreSQL ---------------------------------------------------------------------------------


def test_pg_errors_name_the_url_never_the_password(pg_dsn: str) -> None:
    good = sa.make_url(pg_dsn)
    secret = "Sekr1t-pass.word"
    wrong = good.set(password=secret).render_as_string(hide_password=False)
    with pytest.raises(StoreError) as info:
        Store(wrong)
    text = str(info.value)
    assert secret not in text and "***" in text and f"{good.host}:{good.port}" in text
    assert "password authentication failed" in text
    # unreachable: a port nothing listens on
    closed = good.set(password=secret, port=1).render_as_string(hide_password=False)
    with pytest.raises(StoreError) as info:
        Store(closed)
    assert secret not in str(info.value) and "127.0.0.1:1/" in str(info.value)
    # nor in what Python would print with it: nothing chained carries the URL
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_pg_store_and_masked_url(pg_dsn: str, open_store: Callable[[str], Store]) -> None:
    _empty(pg_dsn)
    store = open_store(pg_dsn)
    password = sa.make_url(pg_dsn).password
    assert password and password not in store.url and "***" in store.url
    assert store.dialect == "postgresql"


# --- rules --------------------------------------------------------------------------------------

ROUND_TRIP = [
    (Kind.SITE, Selector(site="CERN"), Effect(Verbosity.SCRIPTS, 0.5), SITE_ADMIN, T0 + 3600.5),
    (Kind.VO, Selector(frontend="cms", entry="CMS_T2_*"), Effect(Verbosity.OFF, 0.0), OPERATOR, None),
    (
        Kind.OPERATOR,
        Selector("f1", "CMS_T2_US_Nebraska", "Nebraska", "cms", "frontend", "glidein_*"),
        Effect(Verbosity.COMMANDS, 0.123456789012345, True),
        OPERATOR,
        T0 + 1e-6,
    ),
    (Kind.CAP, Selector(), Effect(Verbosity.PHASES, 1.0), OPERATOR, None),
]


def test_rules_round_trip_exactly(url: str, store: Store, open_store: Callable[[str], Store]) -> None:
    made = [store.create(k, s, e, who, f"reason {i}", T0 + i, exp) for i, (k, s, e, who, exp) in enumerate(ROUND_TRIP)]
    for rule, (kind, selector, effect, who, expires) in zip(made, ROUND_TRIP, strict=True):
        assert (rule.kind, rule.selector, rule.effect) == (kind, selector, effect)
        assert (rule.owner, rule.role, rule.expires) == (who.name, who.role, expires)
    assert store.rules() == made
    assert open_store(url).rules() == made  # and as another process reads them
    for rule in made:
        assert store.rule(rule.id) == rule
        got = store.rule(rule.id)
        assert got is not None
        assert type(got.kind) is Kind and type(got.role) is Role and type(got.effect.verbosity) is Verbosity
        assert got.selector.as_dict() == rule.selector.as_dict()  # unset fields stay None, not ""
    assert store.rule(9999) is None


def test_rule_ids_are_never_reused(store: Store) -> None:
    """A deleted rule's id stays its own: the audit log's history of it never passes to a new rule."""
    first, second = _create(store), _create(store)
    store.delete(second.id, OPERATOR, "done", T0 + 1)
    third = _create(store)
    assert third.id > second.id > first.id


def test_reasons_and_times_are_required(store: Store) -> None:
    with pytest.raises(ValueError, match="reason"):
        _create(store, reason="  ")
    with pytest.raises(ValueError, match="Unix seconds"):
        _create(store, at=float("nan"))
    rule = _create(store)
    with pytest.raises(ValueError, match="reason"):
        store.expire(rule.id, OPERATOR, "", T0 + 1)
    assert store.generation() == 1 and len(store.audit()) == 1


# --- changes and their audit --------------------------------------------------------------------


def test_each_change_writes_one_audit_entry(store: Store) -> None:
    rule = _create(store, expires=T0 + 7200)
    [created] = store.audit()
    assert (created.action, created.rule_id, created.actor, created.role) == ("create", rule.id, "olga", "operator")
    assert created.before is None and created.after == rule.as_dict()
    assert (created.reason, created.outcome, created.detail, created.at) == ("debugging slow validation", "ok", "", T0)

    before, after = store.expire(rule.id, SITE_ADMIN, "found it", T0 + 60)
    assert before == rule and after == dataclasses.replace(rule, expires=T0 + 60)
    assert store.rule(rule.id) == after
    expired, _ = store.audit()
    assert (expired.action, expired.actor, expired.role, expired.reason) == ("expire", "sam", "site_admin", "found it")
    assert expired.before == before.as_dict() and expired.after == after.as_dict()

    gone = store.delete(rule.id, OPERATOR, "tidy up", T0 + 120)
    assert gone == after and store.rule(rule.id) is None and store.rules() == []
    deleted, _, _ = store.audit()
    assert (deleted.action, deleted.rule_id, deleted.at) == ("delete", rule.id, T0 + 120)
    assert deleted.before == after.as_dict() and deleted.after is None
    # the history of a deleted rule stays
    assert [e.action for e in store.audit(rule_id=rule.id)] == ["delete", "expire", "create"]
    assert _rows(store, "audit") == 3


def test_expiring_an_expired_rule_keeps_its_earlier_end(store: Store) -> None:
    rule = _create(store, expires=T0 + 10)
    _, after = store.expire(rule.id, OPERATOR, "again", T0 + 100)
    assert after.expires == T0 + 10
    assert len(store.audit()) == 2


def test_changing_a_missing_rule_is_a_key_error_and_changes_nothing(store: Store) -> None:
    with pytest.raises(KeyError):
        store.expire(42, OPERATOR, "why", T0)
    with pytest.raises(KeyError):
        store.delete(42, OPERATOR, "why", T0)
    assert store.generation() == 0 and store.audit() == []


def test_a_failed_insert_writes_neither_rule_nor_audit(store: Store) -> None:
    """A constraint violation inside the transaction: no rule, no audit entry, no generation bump."""
    effect = Effect(Verbosity.PHASES, 0.5)
    object.__setattr__(effect, "sample", 2.0)  # past the model's check, into the database's
    with pytest.raises(sa.exc.IntegrityError):
        _create(store, effect=effect)
    assert store.rules() == [] and store.audit() == [] and store.generation() == 0
    assert _rows(store, "rules") == 0 and _rows(store, "audit") == 0


@pytest.mark.parametrize("action", ["create", "expire", "delete"])
def test_a_failed_audit_undoes_the_change(store: Store, monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    """The audit entry is written, then the transaction fails: the change is undone with it."""
    rule = _create(store)
    real = Store._audit

    def audit_then_fail(self: Store, conn: sa.Connection, *args: Any, **kw: Any) -> int:
        real(self, conn, *args, **kw)
        # a constraint violation after both rows are in (the audit's action check)
        bogus = {"at": 0, "actor": "x", "role": "operator", "action": "bogus", "attempted": ""}
        conn.execute(sa.insert(audit_table).values(bogus | {"reason": "", "outcome": "ok", "detail": ""}))
        raise AssertionError("not reached")

    monkeypatch.setattr(Store, "_audit", audit_then_fail)
    with pytest.raises(sa.exc.IntegrityError):
        if action == "create":
            _create(store, site="FNAL")
        elif action == "expire":
            store.expire(rule.id, OPERATOR, "why", T0 + 1)
        else:
            store.delete(rule.id, OPERATOR, "why", T0 + 1)
    monkeypatch.undo()
    assert store.rules() == [rule]
    assert len(store.audit()) == 1 and store.generation() == 1
    assert _rows(store, "audit") == 1 and _rows(store, "rules") == 1


def test_denials_are_audited_without_changing_anything(store: Store) -> None:
    rule = _create(store)
    request = {"kind": "cap", "selector": {"site": "FNAL"}, "effect": Effect(Verbosity.COMMANDS).as_dict()}
    denied = store.record_denial(SITE_ADMIN, "create", "out_of_scope", "site FNAL is not one of CERN", T0 + 1, request)
    assert (denied.action, denied.attempted, denied.outcome) == ("denied", "create", "out_of_scope")
    assert (denied.actor, denied.role, denied.detail) == ("sam", "site_admin", "site FNAL is not one of CERN")
    assert denied.after == request and denied.before is None and denied.rule_id is None
    # a refused change of an existing rule keeps what the rule was
    refused = store.record_denial(READER, "delete", "read_only", "a reader", T0 + 2, None, rule.id, why="oops")
    assert (refused.role, refused.attempted, refused.rule_id, refused.reason) == ("reader", "delete", rule.id, "oops")
    assert refused.before == rule.as_dict() and refused.after is None
    missing = store.record_denial(OPERATOR, "expire", "not_found", "no rule 99", T0 + 3, None, 99)
    assert missing.before is None and missing.rule_id == 99
    assert store.audit(limit=3) == [missing, refused, denied]
    assert store.audit()[0].as_dict()["attempted"] == "expire"
    assert store.generation() == 1 and store.rules() == [rule]
    with pytest.raises(ValueError, match="denial reason"):
        store.record_denial(OPERATOR, "create", "because", "", T0, None)
    with pytest.raises(ValueError, match="action"):
        store.record_denial(OPERATOR, "denied", "invalid", "", T0, None)


def test_audit_pages_newest_first(store: Store) -> None:
    rules = [_create(store, site=f"S{i}", at=T0 + i) for i in range(4)]
    for i, rule in enumerate(rules[:3]):
        store.expire(rule.id, OPERATOR, "done", T0 + 10 + i)
    every = store.audit()
    ids = [e.id for e in every]
    assert len(ids) == 7 and ids == sorted(ids, reverse=True)
    assert [e.at for e in every] == sorted((e.at for e in every), reverse=True)
    pages, before = [], None
    while page := store.audit(limit=3, before_id=before):
        pages.append([e.id for e in page])
        before = page[-1].id
    assert pages == [ids[:3], ids[3:6], ids[6:]]
    assert [e.action for e in store.audit(rule_id=rules[1].id)] == ["expire", "create"]
    assert [e.action for e in store.audit(rule_id=rules[3].id)] == ["create"]
    assert store.audit(limit=1, before_id=ids[-1]) == []
    with pytest.raises(ValueError):
        store.audit(limit=0)


def test_generation_counts_changes_seen_by_another_store(
    url: str, store: Store, open_store: Callable[[str], Store]
) -> None:
    other = open_store(url)  # another process: its own engine and connections
    assert other.generation() == store.generation() == 0
    rule = _create(store)
    assert other.generation() == 1
    store.expire(rule.id, OPERATOR, "why", T0 + 1)
    assert other.generation() == 2
    store.record_denial(READER, "delete", "read_only", "", T0 + 2, None, rule.id)
    assert other.generation() == 2  # a denial changes no rule
    other.delete(rule.id, OPERATOR, "why", T0 + 3)
    assert store.generation() == 3 and store.rules() == []


def test_concurrent_writers_all_succeed(url: str, store: Store, open_store: Callable[[str], Store]) -> None:
    """Two writers (threads, each with its own store) creating at once: none fails, none is lost."""
    per_thread = 25
    stores = [store, open_store(url)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(stores))

    def write(s: Store, n: int) -> None:
        start.wait()
        try:
            for i in range(per_thread):
                rule = _create(s, site=f"T{n}_{i}", at=T0 + i)
                if i % 5 == 0:
                    s.expire(rule.id, OPERATOR, "churn", T0 + i + 1)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    rules = store.rules()
    assert len(rules) == 2 * per_thread and len({r.id for r in rules}) == 2 * per_thread
    changes = 2 * (per_thread + per_thread // 5)
    assert store.generation() == changes and len(store.audit(limit=1000)) == changes


# --- hostile text (issue 29) --------------------------------------------------------------------


def test_a_refusal_is_audited_whatever_text_it_carries(store: Store) -> None:
    """A NUL (PostgreSQL refuses it in text), a lone surrogate (SQLite cannot encode it), a bidi override:
    a refused request's why and detail are kept escaped, so the audit write cannot fail on them."""
    denied = store.record_denial(
        SITE_ADMIN, "create", "invalid", "selector site='\x00\ud800'", T0, {"reason": "x\x00\ud800"},
        why="stop\x00now \ud800 \u202etxt.exe",
    )  # fmt: skip
    assert denied.reason == "stop\\x00now \\ud800 \\u202etxt.exe"
    assert denied.detail == "selector site='\\x00\\ud800'"
    assert denied.after == {"reason": "x\x00\ud800"}  # JSON keeps the request exactly, in ASCII
    assert store.audit() == [denied]
    long = store.record_denial(OPERATOR, "create", "invalid", "d" * 100_000, T0, None, why="w" * 100_000)
    assert len(long.reason) <= 1000 and len(long.detail) <= 1000


@pytest.mark.parametrize("reason", ["nul\x00", "surrogate\ud800", "rlo\u202e"])
def test_a_change_with_a_reason_no_backend_stores_is_a_value_error(store: Store, reason: str) -> None:
    with pytest.raises(ValueError, match="reason"):
        _create(store, reason=reason)
    assert store.rules() == [] and store.audit() == [] and store.generation() == 0


@pytest.mark.parametrize("expires", [1e300, T0 * 1000, -1.0])
def test_a_time_no_page_can_show_is_a_value_error(store: Store, expires: float) -> None:
    with pytest.raises(ValueError, match="Unix seconds"):
        _create(store, expires=expires)
    assert store.rules() == []


def test_an_audit_entry_that_is_not_json_is_read_as_unreadable(store: Store) -> None:
    with store._engine.begin() as conn:
        for text in ("[1, 2]", "{oops", '"a string"'):
            conn.execute(sa.insert(audit_table).values(
                at=T0, actor="x", role="operator", action="create", attempted="", rule_id=1, before_json=text,
                after_json=None, reason="r", outcome="ok", detail=""))  # fmt: skip
    entries = store.audit()
    assert len(entries) == 3 and all(e.before is not None and "unreadable" in e.before for e in entries)


def test_the_controller_audits_and_counts_a_nul_reason(url: str, store: Store) -> None:
    """The whole path on both backends: refused as invalid before the database sees it, audited, counted."""
    from gwms_obs.controller.policy import Denied
    from gwms_obs.controller.service import Controller
    from tests.support.controller import in_process_config

    cfg = in_process_config(url, {"site_admin": "t" * 40})
    controller = Controller(cfg, store, clock=lambda: T0)
    who = Principal("site_admin-1", Role.SITE_ADMIN, sites=frozenset({"T2_A"}))
    for reason in ("nul\x00", "surrogate\ud800"):
        with pytest.raises(Denied) as e:
            controller.create_rule(who, Kind.SITE, Selector(site="T2_A"), Effect(Verbosity.OFF), reason, T0 + 60)
        assert e.value.reason == "invalid"
    assert [(x.outcome, x.reason) for x in store.audit()] == [("invalid", "surrogate\\ud800"), ("invalid", "nul\\x00")]
    assert controller.metrics.registry.get_sample_value("gwms_controller_denials_total", {"reason": "invalid"}) == 2


# --- web sessions -------------------------------------------------------------------------------


def test_sessions_are_found_until_closed_or_expired(url: str, store: Store, open_store: Callable[[str], Store]) -> None:
    store.open_session("a" * 64, "h" * 64, T0, T0 + 100)
    store.open_session("b" * 64, "h" * 64, T0, T0 + 100)
    other = open_store(url)  # another worker sees it
    assert other.session("a" * 64, T0 + 1) == "h" * 64
    assert other.session("a" * 64, T0 + 100) is None  # expired
    assert other.close_session("a" * 64) is True
    assert store.session("a" * 64, T0 + 1) is None and store.session("b" * 64, T0 + 1) == "h" * 64
    assert store.close_session("a" * 64) is False
    store.open_session("c" * 64, "h" * 64, T0 + 200, T0 + 300)  # a login purges the expired
    assert _rows(store, "sessions") == 1
