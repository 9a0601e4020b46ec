"""The controller's configuration file (TOML), its checks and its tokens.

One file, rendered by the Ansible role (tokens' hashes from the vault), by
compose and by the tests; ``gwms-obs controller check-config FILE`` runs
:func:`check` before any restart. Example (docs/controller.md has the rest)::

    listen = "127.0.0.1:9830"
    database = "sqlite:////var/lib/gwms-obs/controller.db"
    session_secret_file = "/etc/gwms-obs/controller.secret"
    jaeger_query_url = "http://127.0.0.1:16686"   # the pilot pages read traces here
    jaeger_ui_url = "https://jaeger.example.org"  # links, when a Jaeger UI and
    grafana_url = "https://grafana.example.org"   # a Grafana are deployed

    [default]                 # the decision when no rule matches
    verbosity = "phases"
    [ceiling]                 # what no rule, cap or default may exceed
    verbosity = "commands"
    record_commands = false

    [[tokens]]
    name = "alice"
    role = "site_admin"
    sites = ["T2_US_Nebraska"]
    sha256 = "9f86d0..."      # `gwms-obs controller token` prints one

    [[scopes]]                # pilots the web page shows the effective verbosity of
    factory = "gfactory-1"
    entry = "CMSHTPC_T2_US_Nebraska_red"
    site = "T2_US_Nebraska"

Tokens are stored only as SHA-256 hashes. A token is 256 random bits, so a
fast hash is safe (nothing to brute-force) and keeps a request at
microseconds; a password hash (bcrypt, argon2) would cost milliseconds per
request at thousands of requests a second and protect nothing more.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..settings import ConfigError, parse_listen
from .policy import SELECTOR_FIELDS, UNBOUNDED, Attributes, Effect, Principal, Role, Verbosity

DEFAULT_LISTEN = "127.0.0.1:9830"
TOKEN_PREFIX = "gwmsc_"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
URL_KEYS = ("jaeger_query_url", "jaeger_ui_url", "grafana_url")
_DB = re.compile(r"^(sqlite:///.+|postgresql(\+psycopg)?://.+)$")


def _http_url(v: str) -> bool:
    u = urllib.parse.urlsplit(v)
    return u.scheme in ("http", "https") and bool(u.hostname) and not u.query and not u.fragment


def new_token() -> str:
    """A fresh bearer token: a recognisable prefix (secret scanners find it) and 256 random bits."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class TokenEntry:
    principal: Principal
    sha256: str


@dataclass(slots=True)
class ControllerConfig:
    listen: str = DEFAULT_LISTEN
    database: str = "sqlite:////var/lib/gwms-obs/controller.db"
    default: Effect = field(default_factory=lambda: Effect(Verbosity.PHASES))
    ceiling: Effect = UNBOUNDED
    tokens: list[TokenEntry] = field(default_factory=list)
    scopes: list[Attributes] = field(default_factory=list)
    # signs the web page's session cookie; without it the page's logins end with the process
    session_secret_file: str | None = None
    # TLS is usually a reverse proxy's; these let uvicorn serve HTTPS itself
    tls_cert: str | None = None
    tls_key: str | None = None
    # how often a process re-reads the rules other processes may have changed (its own writes apply at once)
    refresh_seconds: float = 1.0
    # the longest a site admin's or VO manager's rule may last (operators' rules may be open-ended)
    max_override_hours: float = 24.0 * 30
    # the pilot pages (/pilots): Jaeger's query API, read by the controller itself (none: no pilot pages)
    jaeger_query_url: str | None = None
    jaeger_timeout_seconds: float = 10.0  # one request to Jaeger, the whole answer: then a 504 page
    # links on a pilot's page, for the browser (none: no link)
    jaeger_ui_url: str | None = None
    grafana_url: str | None = None
    grafana_jaeger_datasource: str = "gwms-obs-jaeger"  # the Jaeger data source's uid in that Grafana

    def principals(self) -> dict[str, Principal]:
        return {t.sha256: t.principal for t in self.tokens}


def load(path: str | Path) -> ControllerConfig:
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from e
    return from_dict(raw, str(path))


def _effect(raw: object, where: str) -> Effect:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table")
    try:
        return Effect.from_mapping(raw)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from e


def _strings(raw: object, where: str) -> frozenset[str]:
    if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
        raise ConfigError(f"{where} must be a list of names")
    return frozenset(raw)


def parse_token(raw: object, where: str) -> TokenEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = set(raw) - {"name", "role", "sites", "frontends", "sha256"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    name, role, digest = raw.get("name"), raw.get("role"), raw.get("sha256")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: name must be 1-64 of letters, digits and _.@-, got {name!r}")
    try:
        role_ = Role(str(role))
    except ValueError:
        raise ConfigError(f"{where} ({name}): role must be one of {', '.join(r.value for r in Role)}") from None
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise ConfigError(
            f"{where} ({name}): sha256 must be 64 lower-case hex digits (the token's hash, never the token)"
        )
    sites = _strings(raw.get("sites", []), f"{where} ({name}).sites")
    frontends = _strings(raw.get("frontends", []), f"{where} ({name}).frontends")
    if role_ == Role.SITE_ADMIN and not sites:
        raise ConfigError(f"{where} ({name}): a site_admin token needs its sites")
    if role_ == Role.VO_MANAGER and not frontends:
        raise ConfigError(f"{where} ({name}): a vo_manager token needs its frontends")
    if role_ not in (Role.SITE_ADMIN, Role.VO_MANAGER) and (sites or frontends):
        raise ConfigError(f"{where} ({name}): only site_admin and vo_manager tokens have a scope")
    return TokenEntry(Principal(name, role_, sites, frontends), digest)


def from_dict(raw: dict[str, Any], where: str = "config") -> ControllerConfig:
    cfg = ControllerConfig()
    known = {
        "listen", "database", "default", "ceiling", "tokens", "scopes", "session_secret_file", "tls_cert",
        "tls_key", "refresh_seconds", "max_override_hours", *URL_KEYS, "jaeger_timeout_seconds",
        "grafana_jaeger_datasource",
    }  # fmt: skip
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    for key in ("listen", "database", "session_secret_file", "tls_cert", "tls_key"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(f"{where}: {key} must be a non-empty string")
            setattr(cfg, key, raw[key])
    for key in URL_KEYS:
        if key in raw:
            v = raw[key]
            if not isinstance(v, str) or not _http_url(v):
                raise ConfigError(f"{where}: {key} must be an http(s) URL such as http://127.0.0.1:16686, got {v!r}")
            setattr(cfg, key, v.rstrip("/"))
    if "grafana_jaeger_datasource" in raw:
        v = raw["grafana_jaeger_datasource"]
        if not isinstance(v, str) or not _NAME.match(v):
            raise ConfigError(f"{where}: grafana_jaeger_datasource must be a data source uid, got {v!r}")
        cfg.grafana_jaeger_datasource = v
    for key in ("refresh_seconds", "max_override_hours", "jaeger_timeout_seconds"):
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ConfigError(f"{where}: {key} must be a number > 0, got {v!r}")
            setattr(cfg, key, float(v))
    if "default" in raw:
        cfg.default = _effect(raw["default"], f"{where}: [default]")
    if "ceiling" in raw:
        cfg.ceiling = _effect(raw["ceiling"], f"{where}: [ceiling]")
    tokens = raw.get("tokens", [])
    if not isinstance(tokens, list):
        raise ConfigError(f"{where}: tokens must be an array of tables ([[tokens]])")
    cfg.tokens = [parse_token(t, f"{where}: tokens[{i}]") for i, t in enumerate(tokens)]
    seen: dict[str, str] = {}
    for t in cfg.tokens:
        if t.sha256 in seen:
            raise ConfigError(f"{where}: tokens {seen[t.sha256]} and {t.principal.name} have the same hash")
        seen[t.sha256] = t.principal.name
    names = [t.principal.name for t in cfg.tokens]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: token names must be unique (the audit log names who acted)")
    scopes = raw.get("scopes", [])
    if not isinstance(scopes, list) or not all(isinstance(s, dict) for s in scopes):
        raise ConfigError(f"{where}: scopes must be an array of tables ([[scopes]])")
    for i, s in enumerate(scopes):
        bad = set(s) - set(SELECTOR_FIELDS)
        if bad or not all(isinstance(v, str) for v in s.values()):
            raise ConfigError(f"{where}: scopes[{i}]: string values of {', '.join(SELECTOR_FIELDS)} only")
        cfg.scopes.append(Attributes.from_mapping(s))
    return cfg


def check(cfg: ControllerConfig, *, filesystem: bool = True) -> list[str]:
    """What is wrong with the values (and, unless told not to, the files they name)."""
    problems = []
    try:
        parse_listen(cfg.listen)
    except ConfigError as e:
        problems.append(str(e))
    if not _DB.match(cfg.database):
        problems.append(
            "database: sqlite:////ABSOLUTE/PATH.db or postgresql+psycopg://USER@HOST:PORT/DB, "
            f"got {cfg.database.split('://', 1)[0]}://..."
        )
    if cfg.default.exceeds(cfg.ceiling):
        problems.append(f"[default] is above [ceiling] in {', '.join(cfg.default.exceeds(cfg.ceiling))}")
    if (cfg.tls_cert is None) != (cfg.tls_key is None):
        problems.append("tls_cert and tls_key go together")
    if not any(t.principal.role == Role.OPERATOR for t in cfg.tokens):
        problems.append("no operator token: nobody could create the first rule")
    if filesystem:
        for key in ("session_secret_file", "tls_cert", "tls_key"):
            p = getattr(cfg, key)
            if p is not None and not Path(p).is_file():
                problems.append(f"{key}: {p} is not a readable file")
        if cfg.database.startswith("sqlite:///"):
            parent = Path(cfg.database.removeprefix("sqlite:///")).parent
            if not parent.is_dir():
                problems.append(f"database: directory {parent} does not exist")
    return problems
