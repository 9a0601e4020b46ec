"""A pilot's span spool, returned in its .err, checked as the hostile input it is.

gwms-trace.sh writes OTLP/JSON, one ExportTraceServiceRequest per line
(docs/tracing.md); a single document is accepted too. The spool comes from a
worker node: :func:`parse_spool` bounds its size and span count, checks the
OTLP shape and that ids are hex of the right length, drops (and counts) bad
lines or spans, and refuses a spool with nothing valid. What it keeps is bound
to its glidein by :mod:`gwms_obs.tracing.bind` and forwarded by
:mod:`gwms_obs.tracing.outbox`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..catalogue import Source
from ..parse_errors import ParseErrors
from . import conventions as C
from . import lifetime as L

log = logging.getLogger("gwms_obs.tracing.spool")

SOURCE = Source.TRACE_SPOOL.value
MAX_SPANS = 50_000  # a pilot writes ~10-100; gwms-trace.sh caps itself at 10,000
MAX_NAME = 1024
MAX_KEY = 256
MAX_ATTRIBUTES = 256
MAX_EVENTS = 1024
MAX_LINKS = 128
_VALUE_KEYS = frozenset(
    ("stringValue", "boolValue", "intValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue")
)
_NANOS = re.compile(r"[0-9]{1,20}")
MAX_NANOS: Final = (1 << 64) - 1  # OTLP's fixed64: a collector refuses the whole request for one time above it


class SpoolError(ValueError):
    """The whole spool is refused; ``reason`` is the ParseErrors reason."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class BadPart(ValueError):
    """A part of a spool (line, span, value) that is dropped: ``reason`` is the counted word."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(slots=True)
class Spool:
    resource_spans: list[dict[str, Any]] = field(default_factory=list)
    spans: int = 0
    rejected: int = 0  # lines or spans dropped

    def request(self) -> dict[str, Any]:
        """One ExportTraceServiceRequest; spans of the same resource and scope grouped."""
        groups: dict[str, dict[str, Any]] = {}
        scopes: dict[tuple[str, str], dict[str, Any]] = {}
        for rs in self.resource_spans:
            rkey = json.dumps(rs.get("resource", {}), sort_keys=True)
            g = groups.get(rkey)
            if g is None:
                g = groups[rkey] = {"resource": rs.get("resource", {}), "scopeSpans": []}
            for ss in rs["scopeSpans"]:
                skey = (rkey, json.dumps(ss.get("scope", {}), sort_keys=True))
                s = scopes.get(skey)
                if s is None:
                    s = scopes[skey] = {"scope": ss.get("scope", {}), "spans": []}
                    g["scopeSpans"].append(s)
                s["spans"].extend(ss["spans"])
        return {"resourceSpans": list(groups.values())}


def _nanos(v: object, what: str) -> int:
    # OTLP/JSON writes int64 as a decimal string; a JSON number is accepted too.
    if isinstance(v, bool):
        raise BadPart("bad_time", what)
    n = v if isinstance(v, int) else int(v) if isinstance(v, str) and _NANOS.fullmatch(v) else -1
    if 0 <= n <= MAX_NANOS:
        return n
    if n > MAX_NANOS:
        raise BadPart("bad_time", f"{what}={str(v)[:40]!r} is above the uint64 range")
    raise BadPart("bad_time", f"{what}={str(v)[:40]!r}")


def _attributes(v: object) -> None:
    if v is None:
        return
    if not isinstance(v, list) or len(v) > MAX_ATTRIBUTES:
        raise BadPart("bad_shape", "attributes")
    for kv in v:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str) or not 0 < len(kv["key"]) <= MAX_KEY:
            raise BadPart("bad_shape", "attribute key")
        value = kv.get("value")
        if not isinstance(value, dict) or len(value) > 1 or not set(value) <= _VALUE_KEYS:
            raise BadPart("bad_shape", f"attribute {kv['key'][:40]!r} value")


def _span(s: object) -> None:
    if not isinstance(s, dict):
        raise BadPart("bad_shape", "span is not an object")
    if not C.is_trace_id(s.get("traceId")):
        raise BadPart("bad_id", f"traceId {str(s.get('traceId'))[:40]!r}")
    if not C.is_span_id(s.get("spanId")):
        raise BadPart("bad_id", f"spanId {str(s.get('spanId'))[:40]!r}")
    parent = s.get("parentSpanId", "")
    if parent not in ("", None) and not C.is_span_id(parent):
        raise BadPart("bad_id", f"parentSpanId {str(parent)[:40]!r}")
    name = s.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise BadPart("bad_shape", "span name")
    kind = s.get("kind", 0)
    if not isinstance(kind, int) or isinstance(kind, bool) or not 0 <= kind <= 5:
        raise BadPart("bad_shape", f"kind {kind!r}")
    start = _nanos(s.get("startTimeUnixNano"), "startTimeUnixNano")
    end = _nanos(s.get("endTimeUnixNano"), "endTimeUnixNano")
    if end < start:
        raise BadPart("bad_time", "ends before it starts")
    _attributes(s.get("attributes"))
    events = s.get("events") or []
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        raise BadPart("bad_shape", "events")
    for ev in events:
        if not isinstance(ev, dict) or not isinstance(ev.get("name"), str):
            raise BadPart("bad_shape", "event")
        _nanos(ev.get("timeUnixNano"), "event timeUnixNano")
        _attributes(ev.get("attributes"))
    links = s.get("links") or []
    if not isinstance(links, list) or len(links) > MAX_LINKS:
        raise BadPart("bad_shape", "links")
    for ln in links:
        if not isinstance(ln, dict) or not C.is_trace_id(ln.get("traceId")) or not C.is_span_id(ln.get("spanId")):
            raise BadPart("bad_id", "link")
        _attributes(ln.get("attributes"))
    status = s.get("status")
    if status is not None:
        code = status.get("code", 0) if isinstance(status, dict) else None
        if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 2:
            raise BadPart("bad_shape", "status")
    # A tracestate outside the W3C bounds goes, the span stays (as gwms-trace.sh drops it).
    if s.get("traceState") not in (None, "") and not C.is_tracestate(s["traceState"]):
        del s["traceState"]
    # Normalize what OTLP/JSON allows either way, so the collector gets one form.
    s["traceId"] = s["traceId"].lower()
    s["spanId"] = s["spanId"].lower()
    s["parentSpanId"] = (parent or "").lower()


def _resource_spans(doc: object, report: Reporter) -> Iterable[dict[str, Any]]:
    """The valid resourceSpans of one ExportTraceServiceRequest, bad spans dropped."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        raise BadPart("bad_shape", "no resourceSpans list")
    for rs in doc["resourceSpans"]:
        if not isinstance(rs, dict) or not isinstance(rs.get("scopeSpans", []), list):
            raise BadPart("bad_shape", "resourceSpans entry")
        resource = rs.get("resource", {})
        if not isinstance(resource, dict):
            raise BadPart("bad_shape", "resource")
        _attributes(resource.get("attributes"))
        kept_scopes = []
        for ss in rs.get("scopeSpans", []):
            if not isinstance(ss, dict) or not isinstance(ss.get("spans", []), list):
                raise BadPart("bad_shape", "scopeSpans entry")
            if not isinstance(ss.get("scope", {}), dict):
                raise BadPart("bad_shape", "scope")
            kept = []
            for s in ss.get("spans", []):
                try:
                    _span(s)
                except BadPart as e:
                    report(e)
                    continue
                kept.append(s)
            if kept:
                kept_scopes.append({"scope": ss.get("scope", {}), "spans": kept})
        if kept_scopes:
            yield {"resource": resource, "scopeSpans": kept_scopes}


class Reporter:
    """Counts each dropped part of one spool under its file (tracing/bind.py reports through it too)."""

    def __init__(self, errors: ParseErrors | None, path: str) -> None:
        self.errors = errors
        self.path = path
        self.offset: int | None = None
        self.count = 0
        self.first: BadPart | None = None

    def __call__(self, e: BadPart) -> None:
        self.count += 1
        self.first = self.first or e
        if self.errors is not None:
            self.errors.record(SOURCE, e.reason, self.path, self.offset, str(e))


def parse_spool(
    data: bytes,
    path: str = "",
    errors: ParseErrors | None = None,
    *,
    max_bytes: int = C.SPOOL_MAX_BYTES,
    max_spans: int = MAX_SPANS,
) -> Spool:
    """The valid spans of a decoded spool; raises :class:`SpoolError` when none can be used.

    Bad lines and bad spans are dropped and recorded in ``errors`` (source
    ``trace_spool``); a refused spool is recorded by the caller.
    """
    if len(data) > max_bytes:
        raise SpoolError("too_large", f"{len(data)} bytes, limit {max_bytes}")
    report = Reporter(errors, path)
    out = Spool()
    try:  # one document (pretty-printed or not)
        chunks: list[tuple[int, object]] = [(0, json.loads(data))]
    except (ValueError, RecursionError):
        chunks = []
        off = 0
        for line in data.split(b"\n"):
            here, off = off, off + len(line) + 1
            if not line.strip():
                continue
            try:
                chunks.append((here, json.loads(line)))
            except (ValueError, RecursionError) as e:
                report.offset = here
                report(BadPart("bad_json", str(e)[:100]))
    offsets: dict[int, int] = {}  # id(span) -> its line's offset, for the log of a span dropped later
    for here, doc in chunks:
        report.offset = here
        try:
            for rs in _resource_spans(doc, report):
                out.resource_spans.append(rs)
                for ss in rs["scopeSpans"]:
                    out.spans += len(ss["spans"])
                    offsets.update((id(s), here) for s in ss["spans"])
        except BadPart as e:
            report(e)
        if out.spans > max_spans:
            raise SpoolError("too_many_spans", f"more than {max_spans}")
    _drop_beyond_life(out, report, offsets)
    out.rejected = report.count
    if out.spans == 0:
        first = report.first
        raise SpoolError(first.reason if first else "empty", str(first) if first else "no spans")
    return out


def _drop_beyond_life(spool: Spool, report: Reporter, offsets: Mapping[int, int]) -> None:
    """Drop the spans longer than any pilot lives or outside their pilot root (tracing.lifetime)."""
    flat = [s for rs in spool.resource_spans for ss in rs["scopeSpans"] for s in ss["spans"]]
    timed = [
        L.Timed(s["traceId"], s["spanId"], s["parentSpanId"], s["name"],
                int(s["startTimeUnixNano"]) / 1e9, int(s["endTimeUnixNano"]) / 1e9)
        for s in flat
    ]  # fmt: skip
    gone = L.drops(timed)
    if not gone:
        return
    for i, why in gone.items():
        report.offset = offsets.get(id(flat[i]))
        report(BadPart(L.REASON, f"span {flat[i]['spanId']} {flat[i]['name'][:60]!r} {why}"))
    dropped = {id(flat[i]) for i in gone}
    kept_rs = []
    for rs in spool.resource_spans:
        scopes = [{**ss, "spans": [s for s in ss["spans"] if id(s) not in dropped]} for ss in rs["scopeSpans"]]
        scopes = [ss for ss in scopes if ss["spans"]]
        if scopes:
            kept_rs.append({**rs, "scopeSpans": scopes})
    spool.resource_spans = kept_rs
    spool.spans -= len(gone)
