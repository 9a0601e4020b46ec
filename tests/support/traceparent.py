"""What the tests read of what the tracers write: a W3C traceparent parsed as the spec says
(the reference gwms-trace.sh and the factory's tracer are held to; the package only writes
them), and a trace token's claims, unchecked."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

_TP = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


@dataclass(frozen=True, slots=True)
class TraceParent:
    trace_id: str  # 32 lowercase hex
    span_id: str  # 16 lowercase hex
    flags: int = 1

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"


def parse_traceparent(value: str | None) -> TraceParent | None:
    """A W3C traceparent, or None when absent or malformed (the caller starts a new trace).

    Per the W3C spec: version ff is invalid; version 00 has exactly four
    fields; a later version may append fields after a dash; upper-case hex and
    all-zero ids are invalid.
    """
    if not value:
        return None
    m = _TP.fullmatch(value.strip(" \t"))
    if m is None:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def decode_unverified(token: str) -> dict[str, Any]:
    """The claims of a token, unchecked (the tests read what a signer minted)."""
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims
