"""What every configuration of gwms-obs shares: its error and its value parsers.

A leaf: it imports nothing of gwms_obs, so the controller, the exporter's
config and the ingest stack can all use it without importing each other.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value or file that cannot be used; the message names the key or file."""


def parse_listen(s: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``; an empty host is 127.0.0.1) as a (host, port) pair."""
    host, sep, port = s.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"listen: expected HOST:PORT with a port 1-65535, got {s!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
