"""The real monitoring controller (``gwms-obs controller serve``) on 127.0.0.1, started as users start it.

A controller.toml is written with one token per role (plaintext tokens are
handed back, only their hashes go in the file), the schema is created with
``gwms-obs controller migrate``, then ``gwms-obs controller serve`` runs as a
subprocess until the context manager exits; readiness is a bounded poll of
``/healthz`` (servers.process). The database is SQLite in ``workdir`` unless
a DSN is given (tools/postgres.py's ``postgres_server(workdir).dsn``).

    with controller_server(tmp_path) as c:
        httpx.get(f"{c.url}/v1/whoami", headers=c.bearer("site_admin"))
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gwms_obs.controller.config import new_token, token_hash
from tests.support.servers import process
from tools.tracing_backends import free_port

ROLES = ("operator", "site_admin", "vo_manager", "pilot", "reader")
SITE = "T2_US_Test"  # the site admin's one site
FRONTEND = "frontend-cms"  # the VO manager's one frontend
DEFAULT_SCOPES: tuple[dict[str, str], ...] = (
    {"factory": "gfactory-1", "entry": "CMS_T2_US_Test_ce1", "site": SITE, "frontend": FRONTEND},
    {"factory": "gfactory-1", "entry": "CMS_T2_US_Test_ce2", "site": SITE, "frontend": FRONTEND},
    {"factory": "gfactory-1", "entry": "CMS_T2_DE_Other_ce1", "site": "T2_DE_Other", "frontend": FRONTEND},
)


@dataclass(frozen=True)
class RunningController:
    url: str  # http://127.0.0.1:PORT
    tokens: dict[str, str]  # plaintext bearer tokens by role name (ROLES)
    names: dict[str, str]  # the principal's name (the audit log's actor) by role name
    site: str  # the site admin's site
    frontend: str  # the VO manager's frontend
    config_path: Path
    database: str  # the SQLAlchemy URL it serves from
    log: Path  # the serve process's output
    process: subprocess.Popen[bytes]

    def bearer(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list | tuple) and all(not isinstance(x, Mapping) for x in v):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {v!r}")


def to_toml(doc: Mapping[str, Any]) -> str:
    """Enough TOML for a controller config: scalars and lists, then tables, then arrays of tables."""
    lines: list[str] = []
    tables = {k: v for k, v in doc.items() if isinstance(v, Mapping)}
    arrays = {k: v for k, v in doc.items() if isinstance(v, list | tuple) and v and isinstance(v[0], Mapping)}
    for k, v in doc.items():
        if k not in tables and k not in arrays:
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in tables.items():
        lines += ["", f"[{k}]", *(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())]
    for k, items in arrays.items():
        for item in items:
            lines += ["", f"[[{k}]]", *(f"{kk} = {_toml_value(vv)}" for kk, vv in item.items())]
    return "\n".join(lines) + "\n"


def command(*args: str) -> list[str]:
    """``gwms-obs ARGS`` with this interpreter (the console script is a wrapper around the same module)."""
    return [sys.executable, "-m", "gwms_obs.cli", *args]


@contextlib.contextmanager
def controller_server(
    workdir: Path,
    database: str | None = None,
    *,
    workers: int = 1,
    site: str = SITE,
    frontend: str = FRONTEND,
    timeout: float = 60.0,
    **config_overrides: Any,
) -> Iterator[RunningController]:
    """Write ``workdir/controller.toml``, migrate, serve; stop the server on exit, whatever happened.

    ``database``: a SQLAlchemy URL (PostgreSQL: ``postgresql+psycopg://...``); default SQLite in ``workdir``.
    ``config_overrides``: top-level config keys (``default={"verbosity": "off"}``,
    ``max_override_hours=4``, ``scopes=[...]``, ``refresh_seconds=0.2``) replacing the defaults.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    tokens = {role: new_token() for role in ROLES}
    names = {role: f"test-{role.replace('_', '-')}" for role in ROLES}
    scope = {"site_admin": {"sites": [site]}, "vo_manager": {"frontends": [frontend]}}
    secret = workdir / "controller.secret"
    secret.write_text(secrets.token_urlsafe(48) + "\n")
    secret.chmod(0o600)
    db = database or f"sqlite:///{workdir.resolve() / 'controller.db'}"
    doc: dict[str, Any] = {
        "listen": "127.0.0.1:9830",  # the port is chosen once migrated, below
        "database": db,
        "session_secret_file": str(secret.resolve()),
        "scopes": [dict(s) for s in DEFAULT_SCOPES],
        "tokens": [
            {"name": names[role], "role": role, "sha256": token_hash(tokens[role]), **scope.get(role, {})}
            for role in ROLES
        ],
    }
    known = {"default", "ceiling", "scopes", "refresh_seconds", "max_override_hours", "jaeger_query_url",
             "jaeger_timeout_seconds", "jaeger_ui_url", "grafana_url"}  # fmt: skip
    unknown = set(config_overrides) - known
    if unknown:
        raise TypeError(f"controller_server: unknown config key(s) {', '.join(sorted(unknown))}")
    doc.update(config_overrides)
    config_path = workdir / "controller.toml"
    config_path.write_text(to_toml(doc))
    config_path.chmod(0o600)

    log = workdir / "controller.log"
    with open(workdir / "migrate.log", "wb") as out:
        done = subprocess.run(
            command("controller", "migrate", "--config", str(config_path)),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=120, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"gwms-obs controller migrate failed:\n{(workdir / 'migrate.log').read_text()[-3000:]}")
    # chosen only now, just before the server binds it: the shorter the gap, the less a
    # server started meanwhile (another test's) can take it
    port = free_port()
    doc["listen"] = f"127.0.0.1:{port}"
    config_path.write_text(to_toml(doc))
    serve = command("controller", "serve", "--config", str(config_path), "--listen", f"127.0.0.1:{port}")
    if workers > 1:
        serve += ["--workers", str(workers)]
    url = f"http://127.0.0.1:{port}"
    with process(serve, log, f"{url}/healthz", timeout) as p:
        yield RunningController(url, tokens, names, site, frontend, config_path, db, log, p)


__all__ = ["DEFAULT_SCOPES", "FRONTEND", "ROLES", "SITE", "RunningController", "controller_server", "to_toml"]


@dataclass
class InProcess:
    """A Controller in this process on a real SQLite store, with a clock the test turns (``clock[0]``)."""

    controller: Any  # gwms_obs.controller.service.Controller
    tokens: dict[str, str]  # plaintext by role name; principals are named "<role>-1"
    clock: list[float]


def in_process_config(db: str, tokens: Mapping[str, str], **extra: Any) -> Any:
    """A ControllerConfig with one token per role: the site admin of T2_A, the VO manager of frontend cms."""
    from gwms_obs.controller import config as C

    scope = {"site_admin": {"sites": ["T2_A"]}, "vo_manager": {"frontends": ["cms"]}}
    tokens_ = [
        {"name": f"{role}-1", "role": role, "sha256": token_hash(tok), **scope.get(role, {})}
        for role, tok in tokens.items()
    ]
    return C.from_dict({"database": db, "tokens": tokens_, **extra})


@contextlib.contextmanager
def in_process(workdir: Path, t0: float, **extra: Any) -> Iterator[InProcess]:
    from gwms_obs.controller.service import Controller
    from gwms_obs.controller.store import Store

    tokens = {r: new_token() for r in ROLES}
    cfg = in_process_config(f"sqlite:///{workdir}/controller.db", tokens, **extra)
    store = Store(cfg.database)
    store.migrate()
    clock = [t0]
    try:
        yield InProcess(Controller(cfg, store, clock=lambda: clock[0]), tokens, clock)
    finally:
        store.close()
