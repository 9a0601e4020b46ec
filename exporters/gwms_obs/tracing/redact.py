"""Secrets masked wherever they can hide in an OTLP/JSON span, before it leaves the factory host.

One list of patterns for every layer: the exporter applies them to spools it
forwards (:func:`scrub_resource_spans`), gwms-trace.sh spells the command-line
and ``key=value`` shapes in bash, and the collector's redaction and gwmsguard
processors get the same lists from the Ansible role defaults (a test checks
they are equal). Patterns are written in the common subset of Python ``re``
and Go RE2 (no look-around, no backreferences), so one string means the same
in both.

Places a secret can hide, all covered here: span and event names, status
messages, scope name and version, attribute keys and values of every type
(strings, arrays, kvlists, base64 bytes), at any nesting depth; a command line
split into an array (``["--token", "X"]``) is seen as a whole.
"""

from __future__ import annotations

import base64
import binascii
import functools
import itertools
import re
from dataclasses import dataclass
from typing import Any, Final

MASK: Final = "****"

# Attribute keys whose whole value is a secret, whatever its type.
KEY_PATTERNS: Final[tuple[str, ...]] = (
    "(?i).*(token|passw|passphrase|secret|credential|proxy|x509|api[_.-]?key|access[_.-]?key"
    "|authori[sz]ation|cookie|private[_.-]?key|\\bdn\\b|subject).*",
    # pwd as a word of the key (gwms.pwd, db_pwd), not inside another word
    "(?i)(^|.*[._-])pwd([._-].*|$)",
)

# Parts of any text that are secrets; only the matched part is masked.
VALUE_PATTERNS: Final[tuple[str, ...]] = (
    # X.509 DNs, OpenSSL form (/DC=org/DC=cilogon/C=US/O=Fermilab/CN=...) and RFC 2253 form (CN=...,O=...,C=...)
    "(?:/(?:DC|C|ST|L|O|OU|CN|UID|emailAddress)=[^/\\s]+){2,}",
    "(?i)\\b(?:CN|UID)=[^,/=\\s]+(?:,\\s*(?:OU|O|DC|C|L|ST|CN)=[^,/=\\s]+)+",
    # JWTs (SciTokens, WLCG tokens) and bearer headers
    # (only where a token starts: "eyJeyJeyJ..." must not be tried at every eyJ, which is quadratic in Python)
    "(?:^|[^A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\\.[A-Za-z0-9_-]{4,}\\.[A-Za-z0-9_-]*",
    "(?i)bearer\\s+[A-Za-z0-9._~+/=-]+",
    # PEM blocks (proxies, keys), to the END line or, cut short, to the end of the text
    "-----BEGIN [A-Z0-9 ]+-----[\\s\\S]*?(?:-----END [A-Z0-9 ]+-----|$)",
    # user:password@ in URLs
    "://[^/\\s:@]+:[^/\\s@]+@",
    # key=value and key: value arguments (password=, passphrase=, aws_access_key_id=, gwms.pwd=, ...)
    "(?i)(?:passw(?:or)?d|passphrase|pwd|token|secret|api[_-]?key|access[_-]?key(?:[_-]id)?)\\s*[=:]\\s*[^\\s&;,]+",
    # command-line flags with a separate value: --token X, --password X, -passphrase X, --aws-access-key-id X
    "(?i)(?:^|\\s)--?[a-z0-9_-]*(?:passw(?:or)?d|passphrase|pwd|token|secret|api[_-]?key|access[_-]?key(?:[_-]id)?)"
    "\\s+[^\\s&;,]+",
    # AWS access key ids and GitHub tokens, wherever they appear
    "\\b(?:AKIA|ASIA)[0-9A-Z]{16}\\b",
    "\\bgh[pousr]_[A-Za-z0-9]{30,}\\b",
    # grid proxy files
    "/tmp/x509up_u[0-9]+",
)

MAX_NAME: Final = 128  # span, event and scope names (characters)
MAX_VALUE: Final = 1024  # string values, status messages, decoded bytes
MAX_ELEMENTS: Final = 32  # elements of an array or kvlist value
MAX_DEPTH: Final = 4  # nested arrays/kvlists

_KEYS = tuple(re.compile(p) for p in KEY_PATTERNS)
_VALUES = tuple(re.compile(p) for p in VALUE_PATTERNS)


def mask_text(s: str) -> str:
    """``s`` with every secret-shaped part replaced by ``****``."""
    if len(s) <= MAX_CACHED:
        return _mask_cached(s)
    return _mask(s)


def _mask(s: str) -> str:
    for rx in _VALUES:
        s = rx.sub(MASK, s)
    return s


# The same texts come back pilot after pilot (a CE's hold reason, a failing test's detail): each
# through the eleven regexes cost ~10-40 us, a hit ~0.1. Bounded: short texts only, LRU.
MAX_CACHED: Final = MAX_VALUE
_mask_cached = functools.lru_cache(maxsize=2048)(_mask)


def blocked_key(key: str) -> bool:
    return any(rx.fullmatch(key) for rx in _KEYS)


@dataclass
class Tally:
    """What one scrub changed (the caller counts and logs it)."""

    redacted: int = 0
    truncated: int = 0

    def __iadd__(self, other: Tally) -> Tally:
        self.redacted += other.redacted
        self.truncated += other.truncated
        return self


class Scrubber:
    def __init__(self) -> None:
        self.tally = Tally()

    def text(self, s: str, limit: int) -> str:
        out = mask_text(s)
        if out != s:
            self.tally.redacted += 1
        if len(out) > limit:
            self.tally.truncated += 1
            out = out[:limit]
        return out

    def attributes(self, kvs: list[dict[str, Any]], depth: int = 0) -> list[dict[str, Any]]:
        out = []
        for kv in kvs:
            key = kv["key"]
            if blocked_key(key):
                if kv.get("value") != {"stringValue": MASK}:
                    self.tally.redacted += 1
                value: dict[str, Any] = {"stringValue": MASK}
            else:
                value = self.value(kv.get("value") or {}, depth)
            out.append({"key": self.text(key, MAX_NAME), "value": value})
        return out

    def value(self, v: dict[str, Any], depth: int) -> dict[str, Any]:
        if "stringValue" in v and isinstance(v["stringValue"], str):
            return {"stringValue": self.text(v["stringValue"], MAX_VALUE)}
        if "bytesValue" in v:
            try:
                raw = base64.b64decode(str(v["bytesValue"]), validate=True)
            except (binascii.Error, ValueError):
                self.tally.redacted += 1  # not base64: nothing we can inspect goes on
                return {"stringValue": MASK}
            text = raw.decode("latin-1")
            if mask_text(text) != text:
                self.tally.redacted += 1
                return {"stringValue": MASK}
            if len(raw) > MAX_VALUE:
                self.tally.truncated += 1
                return {"bytesValue": base64.b64encode(raw[:MAX_VALUE]).decode()}
            return v
        for kind in ("arrayValue", "kvlistValue"):
            if kind in v:
                inner = v[kind] if isinstance(v[kind], dict) else {}
                items = inner.get("values") or []
                if not isinstance(items, list) or depth >= MAX_DEPTH:
                    self.tally.truncated += 1
                    return {"stringValue": "[too deep]"}
                if len(items) > MAX_ELEMENTS:
                    self.tally.truncated += 1
                    items = items[:MAX_ELEMENTS]
                if kind == "kvlistValue":
                    kvs = [kv for kv in items if isinstance(kv, dict) and isinstance(kv.get("key"), str)]
                    return {kind: {"values": self.attributes(kvs, depth + 1)}}
                vals = [self.value(x, depth + 1) if isinstance(x, dict) else {} for x in items]
                self._argv(vals)
                return {kind: {"values": vals}}
        return v  # bool, int, double, empty

    def _argv(self, vals: list[dict[str, Any]]) -> None:
        """A command line split into an array: mask the value after a secret flag."""
        for a, b in itertools.pairwise(vals):
            sa, sb = a.get("stringValue"), b.get("stringValue")
            if not isinstance(sa, str) or not isinstance(sb, str) or sb == MASK or not sa.startswith("-"):
                continue
            joined = f"{sa} {sb}"
            if mask_text(joined) != joined and mask_text(sa) == sa:
                self.tally.redacted += 1
                b["stringValue"] = MASK

    def span(self, s: dict[str, Any]) -> None:
        """Scrub one OTLP/JSON span in place (its shape already validated)."""
        s["name"] = self.text(s["name"], MAX_NAME)
        status = s.get("status")
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            status["message"] = self.text(status["message"], MAX_VALUE)
        s["attributes"] = self.attributes(s.get("attributes") or [])
        for ev in s.get("events") or []:
            ev["name"] = self.text(ev["name"], MAX_NAME)
            ev["attributes"] = self.attributes(ev.get("attributes") or [])
        for ln in s.get("links") or []:
            ln["attributes"] = self.attributes(ln.get("attributes") or [])

    def scope(self, scope: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in ("name", "version"):
            if isinstance(scope.get(k), str):
                out[k] = self.text(scope[k], MAX_NAME)
        if scope.get("attributes"):
            out["attributes"] = self.attributes(scope["attributes"])
        return out


def scrub_resource_spans(resource_spans: list[dict[str, Any]]) -> Tally:
    """Mask and cut everything in validated OTLP/JSON resourceSpans, in place."""
    sc = Scrubber()
    for rs in resource_spans:
        res = rs.get("resource") or {}
        res["attributes"] = sc.attributes(res.get("attributes") or [])
        rs["resource"] = res
        for ss in rs["scopeSpans"]:
            ss["scope"] = sc.scope(ss.get("scope") or {})
            for s in ss["spans"]:
                sc.span(s)
    return sc.tally
