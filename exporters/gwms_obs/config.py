"""The exporter's configuration file (TOML), its checks, and its defaults.

One file serves the systemd unit rendered by Ansible, the compose stack and
the tests; command-line flags override it. ``gwms-obs check-config FILE``
runs :func:`check` before any restart.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from .accounting.partition import Rules
from .pipeline import IngestConfig

DEFAULT_LISTEN = "127.0.0.1:9822"


@dataclass(slots=True)
class ExportConfig:
    factory_dir: str = "/var/log/gwms-factory"
    monitor_dir: str | None = None
    listen: str = DEFAULT_LISTEN
    interval: float = 60.0
    checkpoint: str | None = None
    settle_seconds: float = 30.0
    lost_after_seconds: float = 3600.0
    rules: Rules = field(default_factory=Rules)

    def ingest(self) -> IngestConfig:
        return IngestConfig(
            factory_dir=self.factory_dir,
            monitor_dir=self.monitor_dir,
            checkpoint=self.checkpoint,
            settle_seconds=self.settle_seconds,
            lost_after_seconds=self.lost_after_seconds,
            rules=self.rules,
        )


class ConfigError(ValueError):
    pass


def parse_listen(s: str) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"listen: expected HOST:PORT, got {s!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def load(path: str) -> ExportConfig:
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: {e}") from e
    return from_dict(raw, path)


def from_dict(raw: dict[str, Any], where: str = "config") -> ExportConfig:
    cfg = ExportConfig()
    known = {f.name: f for f in fields(ExportConfig)}
    for k, v in raw.items():
        if k not in known:
            raise ConfigError(f"{where}: unknown key {k!r} (known: {', '.join(sorted(known))})")
        if k == "rules":
            if not isinstance(v, dict):
                raise ConfigError(f"{where}: [rules] must be a table")
            rule_keys = {f.name for f in fields(Rules)}
            bad = set(v) - rule_keys
            if bad:
                raise ConfigError(f"{where}: unknown rules {sorted(bad)} (known: {sorted(rule_keys)})")
            if any(not isinstance(x, int | float) or x < 0 for x in v.values()):
                raise ConfigError(f"{where}: rules must be non-negative numbers")
            cfg.rules = Rules(**{n: float(x) for n, x in v.items()})
        elif k in ("interval", "settle_seconds", "lost_after_seconds"):
            if not isinstance(v, int | float) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{where}: {k} must be a non-negative number, got {v!r}")
            setattr(cfg, k, float(v))
        else:
            if not isinstance(v, str):
                raise ConfigError(f"{where}: {k} must be a string, got {v!r}")
            setattr(cfg, k, v)
    return cfg


def check(cfg: ExportConfig) -> list[str]:
    """Problems that would stop the exporter from doing its job (empty when fine)."""
    problems = []
    try:
        parse_listen(cfg.listen)
    except ConfigError as e:
        problems.append(str(e))
    if cfg.interval <= 0:
        problems.append("interval must be > 0")
    for name, d in (("factory_dir", cfg.factory_dir), ("monitor_dir", cfg.monitor_dir)):
        if d is None:
            continue
        if not os.path.isdir(d):
            problems.append(f"{name}: {d} is not a directory")
        elif not os.access(d, os.R_OK | os.X_OK):
            problems.append(f"{name}: {d} is not readable")
    if cfg.checkpoint:
        parent = os.path.dirname(os.path.abspath(cfg.checkpoint))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            problems.append(f"checkpoint: directory {parent} is not writable")
    return problems
