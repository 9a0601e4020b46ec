"""The exporter's configuration file (TOML), its checks, and its defaults.

One file serves the systemd unit rendered by Ansible, the compose stack and
the tests; command-line flags override it. ``gwms-obs check-config FILE``
runs :func:`check` before any restart.

:func:`from_dict` checks each key's type (so an ExportConfig holds what its
annotations say); :func:`check` checks the values, wherever they came from
(file, flags or defaults), and, unless told not to, the file system.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from .accounting.partition import Rules
from .accounting.plausible import Limits
from .ingest.config import IngestConfig
from .settings import ConfigError, parse_listen

DEFAULT_LISTEN = "127.0.0.1:9822"
DEFAULT_FACTORY_DIR = "/var/log/gwms-factory"
NUMBER_KEYS = ("interval", "settle_seconds", "lost_after_seconds", "full_scan_seconds", "tick_seconds")
POSITIVE_KEYS = ("interval", "full_scan_seconds", "tick_seconds")  # a wait of 0 would busy-loop
DISCOVERY = ("inotify", "scan")  # ingest/watch.py
STRING_KEYS = ("factory_dir", "monitor_dir", "listen", "checkpoint", "factory_name", "frontend_monitor_dir")
BOOL_KEYS = ("pilot_traces",)
COMPLETED_TOTAL = ("auto", "raw", "normalized")  # docs/accounting.md, "Known upstream errors"
# A factory's log dir holds client/ (the pilots' logs) or server/ (completed_jobs):
# one with neither is a typo, and would silently report "no pilots".
FACTORY_SUBDIRS = ("client", "server")


# The file's keys that say how the factory's files are read: each sets this field of the
# exporter's IngestConfig (ExportConfig.ingest); every other key is the daemon's own.
INGEST_KEYS = {
    "factory_dir": "factory_dir",
    "monitor_dir": "monitor_dir",
    "checkpoint": "checkpoint",
    "settle_seconds": "settle_seconds",
    "lost_after_seconds": "lost_after_seconds",
    "rules": "rules",
    # How completed_jobs user/@duration is written where nothing shows it (docs/accounting.md).
    "completed_total": "completed_total",
    # [clients] username = "client_log_name", for users the completed_jobs logs do not name.
    "clients": "client_map",
    # [limits]: global plausibility bounds, where an entry's descript.xml sets none (docs/accounting.md).
    "limits": "limits",
    # How the daemon finds what changed: inotify events, or scans (ingest/watch.py, docs/configuration.md).
    "discovery": "discovery",
    "full_scan_seconds": "full_scan_seconds",
    "tick_seconds": "tick_seconds",
    # On a VO frontend's host: its monitor dir, and [frontend_clients] group = "client_log_name"
    # (the factory's name for the group's requests; docs/frontend.md).
    "frontend_monitor_dir": "frontend_monitor_dir",
    "frontend_clients": "frontend_clients",
}


@dataclass(slots=True)
class ExportConfig:
    # How the scans read the factory (the keys of INGEST_KEYS). Its reset_checkpoint and
    # workers are flags for one start (daemon.Run), never keys: a key would start over on
    # every restart.
    ingest: IngestConfig = field(default_factory=lambda: IngestConfig(factory_dir=DEFAULT_FACTORY_DIR))
    listen: str = DEFAULT_LISTEN
    interval: float = 60.0
    # A trace per counted pilot, built from the factory's files, wherever a traces endpoint is set
    # (docs/tracing.md, "Pilot traces from the factory's files").
    pilot_traces: bool = True
    # The factory's name in those traces' ids (GLIDEIN_Factory); None: monitor/descript.xml's FactoryName.
    factory_name: str | None = None
    # Spans a second the span forwarder sends at most, on average (0: unpaced); None: its
    # default, tracing.spool.SPANS_PER_SECOND (docs/tracing.md, "Delivery").
    trace_spans_per_second: float | None = None

    def get(self, key: str) -> Any:
        """The value of the file's ``key``, wherever it is kept."""
        return getattr(self.ingest, INGEST_KEYS[key]) if key in INGEST_KEYS else getattr(self, key)

    def set(self, key: str, value: Any) -> None:
        """Set the file's ``key`` (a flag overriding it, too), wherever it is kept."""
        if key in INGEST_KEYS:
            setattr(self.ingest, INGEST_KEYS[key], value)
        else:
            setattr(self, key, value)


# The file's keys: the ingest's and the daemon's own.
KEYS = frozenset(INGEST_KEYS) | {f.name for f in fields(ExportConfig)} - {"ingest"}


def load(path: str) -> ExportConfig:
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except UnicodeDecodeError as e:  # tomllib decodes the bytes itself and lets this through
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from e
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: {e}") from e
    return from_dict(raw, path)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)  # TOML true is an int to Python


def _number_table(raw: object, cls: type, name: str, where: str, what: str) -> dict[str, int | float]:
    """A ``[name]`` table of numbers keyed by ``cls``'s fields (an int field stays an int)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{name}] must be a table")
    keys = {f.name for f in fields(cls)}
    bad = set(raw) - keys
    if bad:
        raise ConfigError(f"{where}: unknown {name} {sorted(bad)} (known: {sorted(keys)})")
    ints = {f.name for f in fields(cls) if f.type in (int, "int")}
    out: dict[str, int | float] = {}
    for n, x in raw.items():
        if not _is_number(x):
            raise ConfigError(f"{where}: {name}.{n} must be {what}, got {x!r}")
        out[n] = int(x) if n in ints else float(x)
    return out


def from_dict(raw: dict[str, Any], where: str = "config") -> ExportConfig:
    """An ExportConfig from a parsed file; raises ConfigError at the first key of the wrong type."""
    cfg = ExportConfig()
    for k, v in raw.items():
        if k not in KEYS:
            raise ConfigError(f"{where}: unknown key {k!r} (known: {', '.join(sorted(KEYS))})")
        if k == "rules":
            cfg.set(k, Rules(**_number_table(v, Rules, "rules", where, "a number of seconds")))
        elif k == "limits":
            cfg.set(k, Limits(**_number_table(v, Limits, "limits", where, "a number")))  # type: ignore[arg-type]
        elif k == "clients":
            if not isinstance(v, dict) or not all(isinstance(x, str) and x for x in v.values()):
                raise ConfigError(f'{where}: [clients] must be a table of username = "client_log_name"')
            cfg.set(k, dict(v))
        elif k == "frontend_clients":
            if not isinstance(v, dict) or not all(isinstance(x, str) and x for x in v.values()):
                raise ConfigError(f'{where}: [frontend_clients] must be a table of group = "client_log_name"')
            cfg.set(k, dict(v))
        elif k == "discovery":
            if v not in DISCOVERY:
                raise ConfigError(f"{where}: discovery must be one of {', '.join(DISCOVERY)}, got {v!r}")
            cfg.set(k, v)
        elif k == "completed_total":
            if v not in COMPLETED_TOTAL:
                raise ConfigError(f"{where}: completed_total must be one of {', '.join(COMPLETED_TOTAL)}, got {v!r}")
            cfg.set(k, v)
        elif k in BOOL_KEYS:
            if not isinstance(v, bool):
                raise ConfigError(f"{where}: {k} must be true or false, got {v!r}")
            cfg.set(k, v)
        elif k == "trace_spans_per_second":
            if not _is_number(v):
                raise ConfigError(f"{where}: {k} must be a number of spans a second, got {v!r}")
            cfg.set(k, float(v))
        elif k in NUMBER_KEYS:
            if not _is_number(v):
                raise ConfigError(f"{where}: {k} must be a number of seconds, got {v!r}")
            cfg.set(k, float(v))
        else:
            if not isinstance(v, str):
                raise ConfigError(f"{where}: {k} must be a string, got {v!r}")
            cfg.set(k, v)
    return cfg


def value_problems(cfg: ExportConfig) -> list[str]:
    """Values the exporter cannot run with, whatever the file system holds."""
    problems = []
    for k in STRING_KEYS:
        v = cfg.get(k)
        if k == "factory_dir" and not v and cfg.ingest.frontend_monitor_dir:
            continue  # a VO frontend's host with no factory
        if v is not None and not v:
            problems.append(f"{k} must be a non-empty string")
    if cfg.listen:
        try:
            parse_listen(cfg.listen)
        except ConfigError as e:
            problems.append(str(e))
    # nan compares false with everything: without isfinite it would pass "> 0"
    # and the daemon would busy-loop on wait(nan).
    for k in POSITIVE_KEYS:
        if not (math.isfinite(v := cfg.get(k)) and v > 0):
            problems.append(f"{k} must be a finite number of seconds > 0, got {v}")
    nonneg = [(k, cfg.get(k)) for k in NUMBER_KEYS if k not in POSITIVE_KEYS]
    nonneg += [(f"rules.{f.name}", getattr(cfg.ingest.rules, f.name)) for f in fields(Rules)]
    for k, v in nonneg:
        if not (math.isfinite(v) and v >= 0):
            problems.append(f"{k} must be a finite number of seconds >= 0, got {v}")
    rate = cfg.trace_spans_per_second
    if rate is not None and not (math.isfinite(rate) and rate >= 0):
        problems.append(f"trace_spans_per_second must be a finite number >= 0 (0: unpaced), got {rate}")
    for f in fields(Limits):
        v = getattr(cfg.ingest.limits, f.name)
        if not (math.isfinite(v) and v > 0):
            problems.append(f"limits.{f.name} must be a finite number > 0, got {v}")
    return problems


def factory_pending(d: str) -> str | None:
    """Why the factory's log dir is not there yet, when its first start will fix it: absent, or with
    neither client/ nor server/ (None when it is ready, or wrong in a way only an operator can fix)."""
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return f"{d} does not exist"
    except OSError:
        return None  # unreachable or not a directory: dir_problems says which
    readable = stat.S_ISDIR(st.st_mode) and os.access(d, os.R_OK | os.X_OK)
    if readable and not any(os.path.isdir(os.path.join(d, s)) for s in FACTORY_SUBDIRS):
        return f"{d} is not a GlideinWMS factory log dir (it has neither client/ nor server/)"
    return None


def dir_problems(
    factory_dir: str,
    monitor_dir: str | None,
    names: tuple[str, str] = ("factory_dir", "monitor_dir"),
    *,
    wait_for_factory: bool = False,
) -> list[str]:
    """Why the factory's log dir (and the monitor dir, when given) cannot be read (empty when fine).

    ``wait_for_factory``: what :func:`factory_pending` names is not a problem
    (the exporter daemon waits for the factory to create its dir).
    """
    problems = []
    for name, d, is_factory in ((names[0], factory_dir, True), (names[1], monitor_dir, False)):
        if not d:
            continue
        if is_factory and (pending := factory_pending(d)):
            if not wait_for_factory:
                problems.append(f"{name}: {pending}")
        elif not os.path.exists(d):
            problems.append(f"{name}: {d} does not exist")
        elif not os.path.isdir(d):
            problems.append(f"{name}: {d} is not a directory")
        elif not os.access(d, os.R_OK | os.X_OK):
            problems.append(f"{name}: {d} is not readable")
    return problems


def check(cfg: ExportConfig, *, filesystem: bool = True, wait_for_factory: bool = False) -> list[str]:
    """Problems that would stop the exporter from doing its job (empty when fine).

    ``filesystem=False`` (``check-config --syntax-only``) skips only the checks
    of directories and files, e.g. on a build host without the factory.
    ``wait_for_factory``: a factory dir not created yet is no problem (see dir_problems).
    """
    problems = value_problems(cfg)
    if not filesystem:
        return problems
    ic = cfg.ingest
    problems += dir_problems(ic.factory_dir, ic.monitor_dir, wait_for_factory=wait_for_factory)
    if ic.frontend_monitor_dir:
        problems += dir_problems("", ic.frontend_monitor_dir, ("factory_dir", "frontend_monitor_dir"))
    if ic.checkpoint:
        parent = os.path.dirname(os.path.abspath(ic.checkpoint))
        if os.path.isdir(ic.checkpoint):
            problems.append(f"checkpoint: {ic.checkpoint} is a directory, not a file")
        elif not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            problems.append(f"checkpoint: directory {parent} is not writable")
    return problems
