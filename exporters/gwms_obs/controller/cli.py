"""``gwms-obs controller``: serve, migrate, token, check-config (docs/controller.md)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from ..settings import ConfigError, parse_listen

log = logging.getLogger("gwms_obs.controller")
ENV_CONFIG = "GWMS_OBS_CONTROLLER_CONFIG"


def _load(path: str, filesystem: bool = True) -> Any:
    from .config import check, load

    cfg = load(path)
    problems = check(cfg, filesystem=filesystem)
    if problems:
        raise ConfigError("; ".join(f"{path}: {p}" for p in problems))
    return cfg


def _session_secret(cfg: Any) -> str:
    if cfg.session_secret_file:
        secret = Path(cfg.session_secret_file).read_text(encoding="utf-8").strip()
        if len(secret) < 32:
            raise ConfigError(f"{cfg.session_secret_file}: a session secret of at least 32 characters")
        return secret
    # Without one, every worker and every restart signs with its own: web logins end with the process.
    log.warning("no session_secret_file: web page sessions last only as long as this process")
    return secrets.token_urlsafe(32)


def _ready_store(cfg: Any, config_path: str, migrate: bool) -> Any:
    """The store, its schema checked (and with ``migrate`` brought up to date) before anything serves."""
    from .store import Store

    store = Store(cfg.database)
    if migrate:
        store.migrate()
    current, head = store.revision(), store.head()
    if current != head:
        store.close()
        raise ConfigError(
            f"database schema is at {current or 'nothing'}, this gwms-obs needs {head}: "
            f"run `gwms-obs controller migrate --config {config_path}` first"
        )
    return store


def build_app(config_path: str, migrate: bool = False) -> Any:
    """The ASGI application for one config file: what ``serve`` runs in each worker."""
    from .api import create_app
    from .service import Controller

    cfg = _load(config_path)
    store = _ready_store(cfg, config_path, migrate)
    return create_app(Controller(cfg, store), _session_secret(cfg), https_only=cfg.tls_cert is not None)


def app_from_env() -> Any:
    """The server's factory: each worker process imports this and builds its own application."""
    return build_app(os.environ[ENV_CONFIG])


def cmd_serve(a: argparse.Namespace) -> int:
    # Granian (a Rust HTTP server for ASGI applications) rather than uvicorn: on the
    # benchmark's 2 cores uvicorn served an empty ASGI app at ~4,000 requests/s with a
    # p99 of 2.8 s under a 5,000/s open-loop load; granian kept 5,000/s at p99 32 ms
    # (docs/controller.md, "Why this stack").
    from granian import Granian
    from granian.constants import Interfaces

    try:
        cfg = _load(a.config)
        host, port = parse_listen(a.listen or cfg.listen)
        _ready_store(cfg, a.config, a.migrate).close()  # once, before the workers start
        if cfg.session_secret_file is None and a.workers > 1:
            raise ConfigError("several workers need a session_secret_file (each would sign web sessions its own way)")
    except (ConfigError, OSError) as e:
        log.error("%s", e)
        return 1
    except Exception as e:  # the database refused: say which, without its password (StoreError)
        log.error("%s", e)
        return 1
    os.environ[ENV_CONFIG] = str(Path(a.config).resolve())
    log.info("controller on %s:%d (%d worker%s, database %s)", host, port, a.workers,
             "s" if a.workers > 1 else "", cfg.database.split("://", 1)[0])  # fmt: skip
    level = logging.getLevelName(logging.getLogger().level).lower()
    Granian(
        "gwms_obs.controller.cli:app_from_env",
        factory=True,
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        workers=a.workers,
        backlog=4096,
        log_level=level if level in ("debug", "info", "warning", "error", "critical") else "info",  # type: ignore[arg-type]
        log_access=a.access_log,
        ssl_cert=Path(cfg.tls_cert) if cfg.tls_cert else None,
        ssl_key=Path(cfg.tls_key) if cfg.tls_key else None,
        ssl_protocol_min="tls1.2",  # type: ignore[arg-type]
        respawn_failed_workers=True,
        websockets=False,
    ).serve()
    return 0


def cmd_migrate(a: argparse.Namespace) -> int:
    from .store import Store

    try:
        cfg = _load(a.config)
        with Store(cfg.database) as store:
            before = store.revision()
            head = store.migrate()
    except (ConfigError, OSError) as e:
        log.error("%s", e)
        return 1
    except Exception as e:  # the database refused: say which, without its password
        log.error("migrate: %s", e)
        return 1
    print(f"schema {before or 'empty'} -> {head}")
    return 0


def cmd_token(a: argparse.Namespace) -> int:
    from .config import new_token, parse_token, token_hash

    token = new_token()
    entry: dict[str, Any] = {"name": a.name, "role": a.role, "sha256": token_hash(token)}
    if a.site:
        entry["sites"] = sorted(set(a.site))
    if a.frontend:
        entry["frontends"] = sorted(set(a.frontend))
    try:
        parse_token(entry, "token")
    except ConfigError as e:
        print(f"gwms-obs controller token: {e}", file=sys.stderr)
        return 2
    if a.format == "json":
        print(json.dumps({"token": token, "config": entry}))
        return 0
    print(f"# the token (give it to {a.name}; it is shown only now):")
    print(f"# {token}")
    print("# and what the controller's configuration keeps of it:")
    print("[[tokens]]")
    for k, v in entry.items():
        print(f"{k} = {json.dumps(v)}")
    return 0


def cmd_check_config(a: argparse.Namespace) -> int:
    try:
        _load(a.file, filesystem=not a.syntax_only)
    except ConfigError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    print(f"SUCCESS: {a.file}")
    return 0


def add_parser(sub: Any, make: Any) -> None:
    """``gwms-obs controller ...``; ``make`` is cli._sub (help, description, example)."""
    from .policy import Role

    c = make(sub, "controller", "the monitoring controller: who may trace which pilots, at what verbosity",
             "gwms-obs controller serve --config /etc/gwms-obs/controller.toml")  # fmt: skip
    csub = c.add_subparsers(dest="controller_cmd", required=True)
    s = make(csub, "serve", "serve the controller's API and web page",
             "gwms-obs controller serve --config /etc/gwms-obs/controller.toml")  # fmt: skip
    s.add_argument("--config", required=True, help="the controller's TOML file")
    s.add_argument("--listen", help="HOST:PORT (default: the file's listen, or 127.0.0.1:9830)")
    s.add_argument("--workers", type=int, default=1, help="processes serving requests (default 1)")
    s.add_argument("--migrate", action="store_true", help="bring the database schema up to date first")
    s.add_argument("--access-log", action="store_true", help="log every request (off: thousands a second)")
    s.set_defaults(func=cmd_serve)
    m = make(csub, "migrate", "create or upgrade the controller's database schema",
             "gwms-obs controller migrate --config /etc/gwms-obs/controller.toml")  # fmt: skip
    m.add_argument("--config", required=True, help="the controller's TOML file")
    m.set_defaults(func=cmd_migrate)
    t = make(csub, "token", "make a bearer token: prints it once, and the [[tokens]] entry that keeps its hash",
             "gwms-obs controller token --name alice --role site_admin --site T2_US_Nebraska")  # fmt: skip
    t.add_argument("--name", required=True, help="who holds it (the audit log's actor)")
    t.add_argument("--role", required=True, choices=[r.value for r in Role], help="what it may do")
    t.add_argument("--site", action="append", help="site_admin: a site it administers (repeatable)")
    t.add_argument("--frontend", action="append", help="vo_manager: a frontend it manages (repeatable)")
    t.add_argument("--format", choices=("toml", "json"), default="toml", help="toml (default) or json")
    t.set_defaults(func=cmd_token)
    k = make(csub, "check-config", "validate a controller configuration file",
             "gwms-obs controller check-config /etc/gwms-obs/controller.toml")  # fmt: skip
    k.add_argument("file", help="the TOML file")
    k.add_argument("--syntax-only", action="store_true", help="do not check the files it names")
    k.set_defaults(func=cmd_check_config)
