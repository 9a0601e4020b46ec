"""The pilot pages' data: one pilot's trace from Jaeger's query API, who may see it, and what the page shows.

The controller fetches the trace itself (``GET {jaeger}/api/traces/{id}``),
so the page works where no Jaeger UI or Grafana is deployed. Each request
has one deadline for the whole answer and a size bound: a Jaeger that hangs,
drips or floods gives a 504 or a 502, never a stuck worker.

Every string in a trace came, at some remove, from a pilot's files: the page
shows it bounded (validate.visible) and Jinja escapes it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from ..tracing import conventions as C
from .policy import Attributes, Principal, Role
from .validate import visible

MAX_TRACE_BYTES: Final = 16 * 1024 * 1024  # a pilot of 100 job spans is ~100 kB; a live trace with scripts, a few MB
MAX_SEARCH_BYTES: Final = 64 * 1024 * 1024
MAX_ROWS: Final = 500  # pilots a list asks Jaeger for, at most
MAX_SPANS: Final = 2000  # spans the timeline draws; the rest are counted
TEXT: Final = 300  # characters of any one value shown
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
ACCOUNT_KEYS: Final = (("cpu", C.LOG_CPU_SECONDS), ("gpu", C.LOG_GPU_SECONDS))
# span attributes the timeline shows, with their labels
SHOWN: Final = (
    (C.LOG_JOB_CATEGORY, "category"),
    (C.PROCESS_EXIT_CODE, "exit"),
    (C.LOG_JOB_SIGNAL, "signal"),
    (C.LOG_JOB_CPUS, "cores"),
    (C.LOG_JOB_CPU_SECONDS, "core-seconds"),
    (C.LOG_JOB_CPU_USED, "CPU used (s)"),
    (C.LOG_JOB_MEMORY, "memory (MB)"),
    (C.LOG_JOB_MEMORY_USED, "memory used (MB)"),
    (C.LOG_JOB_GPUS, "GPUs"),
    (C.LOG_JOB_COUNT, "jobs"),
    (C.LOG_HOLD_REASON, "hold reason"),
    (C.LOG_FAILED_TEST, "failing test"),
    (C.LOG_JOB_ID, "VO job id"),
)


class JaegerFailed(Exception):
    """Jaeger did not answer usably: ``status`` 504 (no answer in time) or 502 (an error, a bad answer)."""

    def __init__(self, status: int, outcome: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.outcome = outcome  # the metric's label: timeout or error
        self.message = message


def trace_id(raw: str) -> str | None:
    """The trace id of a URL, lower-cased; None unless 32 hex digits (W3C / OTLP trace ids)."""
    v = raw.strip().lower()
    return v if _TRACE_ID.match(v) and v != "0" * 32 else None


def _cut(conn: http.client.HTTPConnection) -> None:
    """The deadline: shut the socket, which wakes a read blocked on it (close alone would not)."""
    with contextlib.suppress(OSError):
        if conn.sock is not None:
            conn.sock.shutdown(socket.SHUT_RDWR)


def _get(url: str, timeout: float, limit: int) -> Any:
    """GET a JSON document within ``timeout`` seconds in all and ``limit`` bytes; None on 404 (no such trace).

    A socket timeout bounds each read, not the answer: a Jaeger (or anything between) that sends a
    byte now and then would hold the worker for ever. So a timer shuts the socket at the deadline.
    """
    deadline = time.monotonic() + timeout
    u = urllib.parse.urlsplit(url)
    conn_type = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = conn_type(u.hostname or "", u.port, timeout=timeout)
    slow = JaegerFailed(504, "timeout", f"Jaeger did not answer within {timeout:g} s")
    timer: threading.Timer | None = None
    chunks: list[bytes] = []
    try:
        conn.connect()
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), _cut, (conn,))
        timer.daemon = True
        timer.start()
        conn.request("GET", u.path + (f"?{u.query}" if u.query else ""), headers={"Accept": "application/json"})
        resp = conn.getresponse()
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise JaegerFailed(502, "error", f"Jaeger answered HTTP {resp.status}")
        size = 0
        while chunk := resp.read1(65536):
            size += len(chunk)
            if size > limit:
                raise JaegerFailed(502, "error", f"Jaeger's answer is larger than {limit // 1048576} MB")
            chunks.append(chunk)
        if time.monotonic() >= deadline:  # cut short by the timer: not the whole answer
            raise slow
    except TimeoutError:
        raise slow from None
    except (OSError, http.client.HTTPException) as e:
        if time.monotonic() >= deadline:
            raise slow from None
        raise JaegerFailed(
            502, "error", f"Jaeger cannot be reached ({visible(str(e) or type(e).__name__, 200)})"
        ) from None
    finally:
        if timer is not None:
            timer.cancel()
        conn.close()
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        raise JaegerFailed(502, "error", "Jaeger's answer is not JSON") from None


def fetch_trace(base: str, tid: str, timeout: float) -> dict[str, Any] | None:
    """The trace (Jaeger's JSON) with this id; None when Jaeger has none."""
    doc = _get(f"{base.rstrip('/')}/api/traces/{tid}", timeout, MAX_TRACE_BYTES)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not data:
        return None
    if not isinstance(data, list) or not isinstance(data[0], dict):
        raise JaegerFailed(502, "error", "Jaeger's answer is not a trace")
    return data[0]


def search(
    base: str, entry: str | None, since: float, until: float, limit: int, timeout: float, factory: str | None = None
) -> list[dict[str, Any]]:
    """The pilots' traces (service ``glidein``) in [since, until], of ``entry`` and ``factory`` when given
    (factories sharing a Jaeger may have entries of the same name: ``gwms.factory`` tells them apart)."""
    q = {"service": C.SERVICE_PILOT, "limit": str(limit), "start": str(int(since * 1e6)), "end": str(int(until * 1e6))}
    tags = {k: v for k, v in ((C.FACTORY, factory), (C.ENTRY, entry)) if v}
    if tags:
        q["tags"] = json.dumps(tags)
    doc = _get(f"{base.rstrip('/')}/api/traces?{urllib.parse.urlencode(q)}", timeout, MAX_SEARCH_BYTES)
    data = doc.get("data") if isinstance(doc, dict) else None
    return [t for t in data or [] if isinstance(t, dict)] if isinstance(data, list) else []


# --- reading a trace -------------------------------------------------------------------------------


def _tags(items: object) -> dict[str, Any]:
    if not isinstance(items, list):
        return {}
    return {t["key"]: t.get("value") for t in items if isinstance(t, dict) and isinstance(t.get("key"), str)}


def _spans(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    spans = trace.get("spans")
    return [s for s in spans if isinstance(s, dict)] if isinstance(spans, list) else []


def _root(trace: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pilot's root span (``glidein``), else the earliest span."""
    spans = _spans(trace)
    roots = [s for s in spans if s.get("operationName") == C.SPAN_PILOT]
    pool = roots or spans
    return min(pool, key=lambda s: _num(s.get("startTime"))) if pool else None


def resource(trace: Mapping[str, Any]) -> dict[str, Any]:
    """The pilot's resource attributes (its root span's process: the factory's names)."""
    root = _root(trace)
    procs = trace.get("processes")
    procs = procs if isinstance(procs, dict) else {}
    if root is None:
        return {}
    proc = root.get("process") or procs.get(root.get("processID", ""), {})
    return _tags(proc.get("tags") if isinstance(proc, dict) else None)


def _num(v: object, default: float = 0.0) -> float:
    if isinstance(v, bool):
        return default
    if isinstance(v, int | float):
        return float(v) if math.isfinite(v) else default
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return default
        return f if math.isfinite(f) else default
    return default


def _text(v: object, n: int = TEXT) -> str:
    return visible("" if v is None else str(v), n)


def pilot_site(attrs: Mapping[str, Any], scopes: Sequence[Attributes]) -> str:
    """The pilot's site: the configured scope's for its entry (the factory's map wins), else the trace's."""
    entry, factory = str(attrs.get(C.ENTRY) or ""), str(attrs.get(C.FACTORY) or "")
    for s in scopes:
        if s.entry and s.entry == entry and s.site and (not s.factory or s.factory == factory):
            return s.site
    return str(attrs.get(C.SITE) or "")


def may_see(who: Principal, attrs: Mapping[str, Any], scopes: Sequence[Attributes]) -> bool:
    """Whether ``who`` may see this pilot: as rules are scoped (policy._in_scope), by site or frontend.

    A site admin sees the pilots of their sites; a VO manager those its frontends asked for (the
    factory's client name is ``frontend.group``); operators and readers every pilot; a pilot's token none.
    """
    if who.role in (Role.OPERATOR, Role.READER):
        return True
    if who.role == Role.SITE_ADMIN:
        return pilot_site(attrs, scopes) in who.sites
    if who.role == Role.VO_MANAGER:
        client = str(attrs.get(C.CLIENT) or "")
        return bool(client) and (client in who.frontends or client.split(".", 1)[0] in who.frontends)
    return False


# --- what the page shows ---------------------------------------------------------------------------


def utc(us: float) -> str:
    """Jaeger's microseconds as ISO 8601 UTC to the second."""
    try:
        return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return "(not a time)"


def duration(seconds: float) -> str:
    """``2 h 05 min``, ``3 min 20 s``, ``12.5 s``."""
    if seconds < 60:
        return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h >= 24:
        return f"{h // 24} d {h % 24} h"
    return f"{h} h {m:02d} min" if h else f"{m} min {sec:02d} s"


@dataclass(frozen=True, slots=True)
class SpanRow:
    name: str
    depth: int
    start: str
    duration: str
    offset: float  # per cent of the pilot's time before the span
    width: float  # per cent of the pilot's time the span takes (drawn at least a hairline)
    error: str  # the status message, "" when not an error
    details: tuple[tuple[str, str], ...]
    events: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AccountRow:
    resource: str
    category: str
    seconds: float
    hours: str
    share: float  # per cent of the resource's total


@dataclass(slots=True)
class PilotView:
    trace_id: str
    entry: str
    site: str
    client: str
    factory: str
    job: str  # cluster.proc
    source: str
    outcome: str
    start: str
    end: str
    duration: str
    exit_code: str
    spans: list[SpanRow]
    hidden_spans: int
    account: list[AccountRow]
    failed_test: str
    failure: str
    failure_detail: str
    errors: list[str] = field(default_factory=list)  # the spans in error, as "name: message"
    jaeger_link: str | None = None
    grafana_link: str | None = None


def _parent(s: Mapping[str, Any]) -> str:
    refs = s.get("references")
    for r in refs if isinstance(refs, list) else []:
        if isinstance(r, dict) and r.get("refType") == "CHILD_OF":
            return str(r.get("spanID", ""))
    return ""


def _order(spans: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Depth-first from the roots, children by start: the timeline's rows and their depth.

    Every span once: spans whose parents form a cycle (no root above them) are drawn from the
    earliest of them, as a root.
    """
    ids = {str(s.get("spanID")) for s in spans}
    children: dict[str, list[dict[str, Any]]] = {}
    roots: list[dict[str, Any]] = []
    for s in spans:
        p = _parent(s)
        (children.setdefault(p, []) if p in ids and p != str(s.get("spanID")) else roots).append(s)

    def start(s: dict[str, Any]) -> float:
        return _num(s.get("startTime"))

    out: list[tuple[dict[str, Any], int]] = []
    seen: set[int] = set()
    rest = sorted(spans, key=start, reverse=True)  # the cycles' entry points, earliest last
    stack = [(s, 0) for s in sorted(roots, key=start, reverse=True)]
    while stack or len(seen) < len(spans):
        if not stack:
            while id(rest[-1]) in seen:
                rest.pop()
            stack.append((rest.pop(), 0))
        s, d = stack.pop()
        if id(s) in seen:
            continue
        seen.add(id(s))
        out.append((s, d))
        stack.extend((k, d + 1) for k in sorted(children.get(str(s.get("spanID")), []), key=start, reverse=True))
    return out


def _status(tags: Mapping[str, Any]) -> str:
    """The span's error message ("" unless its status is ERROR)."""
    code = str(tags.get("otel.status_code", "")).upper()
    if code == "ERROR" or (code != "OK" and tags.get("error") in (True, "true")):
        return _text(tags.get("otel.status_description") or "error")
    return ""


def view(trace: Mapping[str, Any], tid: str) -> PilotView:
    """What the pilot page shows of one trace (Jaeger's JSON, hostile text bounded)."""
    spans = _spans(trace)
    attrs = resource(trace)
    root = _root(trace)
    rtags = _tags(root.get("tags")) if root is not None else {}
    t0 = min((_num(s.get("startTime")) for s in spans), default=0.0)
    t1 = max((_num(s.get("startTime")) + max(0.0, _num(s.get("duration"))) for s in spans), default=t0)
    total = max(t1 - t0, 1.0)
    rows: list[SpanRow] = []
    errors: list[str] = []
    failed_test = failure = detail = ""
    ordered = _order(spans)
    for s, depth in ordered:
        tags = _tags(s.get("tags"))
        start, dur = _num(s.get("startTime")), max(0.0, _num(s.get("duration")))
        name = _text(s.get("operationName"), 120)
        err = _status(tags)
        if err:
            errors.append(f"{name}: {err}")
        if tags.get(C.LOG_FAILED_TEST) is not None or tags.get(C.LOG_FAILURE) is not None:
            failed_test = failed_test or _text(tags.get(C.LOG_FAILED_TEST))
            failure = failure or _text(tags.get(C.LOG_FAILURE))
            detail = detail or _text(tags.get(C.LOG_FAILURE_DETAIL), 1000)
        if len(rows) >= MAX_SPANS:
            continue
        details = tuple((label, _text(tags[k])) for k, label in SHOWN if tags.get(k) is not None)
        logs = s.get("logs")
        events = tuple(
            f"{_text(_tags(lg.get('fields')).get('event'), 80)} at {utc(_num(lg.get('timestamp')))}"
            for lg in (logs if isinstance(logs, list) else [])[:20]
            if isinstance(lg, dict)
        )
        offset = 100.0 * (start - t0) / total
        width = max(0.2, 100.0 * dur / total)
        rows.append(
            SpanRow(name, min(depth, 8), utc(start), duration(dur / 1e6), round(offset, 3),
                    round(min(width, 100.0 - offset if offset < 99.8 else 0.2), 3), err, details, events)
        )  # fmt: skip
    account = []
    for res, prefix in ACCOUNT_KEYS:
        values = {k[len(prefix) :]: _num(v) for k, v in rtags.items() if k.startswith(prefix)}
        whole = sum(v for v in values.values() if v > 0)
        for cat, v in sorted(values.items(), key=lambda kv: -kv[1]):
            if v > 0:
                account.append(AccountRow(res, _text(cat, 60), v, f"{v / 3600:.2f}", round(100.0 * v / whole, 1)))
    exit_code = rtags.get(C.PROCESS_EXIT_CODE)
    cluster, proc = attrs.get(C.CONDOR_CLUSTER), attrs.get(C.CONDOR_PROC)
    return PilotView(
        trace_id=tid,
        entry=_text(attrs.get(C.ENTRY)),
        site=_text(attrs.get(C.SITE)),
        client=_text(attrs.get(C.CLIENT)),
        factory=_text(attrs.get(C.FACTORY)),
        job=f"{_text(cluster, 20)}.{_text(proc, 20)}" if cluster is not None else "",
        source=_text(attrs.get(C.LOG_TRACE_SOURCE), 120),
        outcome=_text(rtags.get(C.LOG_OUTCOME), 40),
        start=utc(t0),
        end=utc(t1),
        duration=duration((t1 - t0) / 1e6),
        exit_code="" if exit_code is None else _text(exit_code, 20),
        spans=rows,
        hidden_spans=len(ordered) - len(rows),
        account=account,
        failed_test=failed_test,
        failure=failure,
        failure_detail=detail,
        errors=errors[:50],
    )


@dataclass(frozen=True, slots=True)
class ListRow:
    trace_id: str
    factory: str
    entry: str
    site: str
    job: str
    start: str
    duration: str
    outcome: str
    error: str


def list_rows(traces: Iterable[Mapping[str, Any]], keep: Any) -> list[ListRow]:
    """One row per pilot trace ``keep(resource attributes)`` allows, newest first."""
    out = []
    for t in traces:
        tid = trace_id(str(t.get("traceID", "")).rjust(32, "0"))
        attrs = resource(t)
        if tid is None or not keep(attrs):
            continue
        v = view(t, tid)
        out.append((v.start, ListRow(tid, v.factory, v.entry, v.site, v.job, v.start, v.duration, v.outcome,
                                     _first_error(v))))  # fmt: skip
    return [r for _, r in sorted(out, key=lambda x: x[0], reverse=True)]


def _first_error(v: PilotView) -> str:
    """The list's reason: the failing test when validation failed, else the first span in error."""
    if v.failed_test or v.failure:
        return f"validation failed: {v.failed_test or v.failure}"
    return v.errors[0] if v.errors else ""


def jaeger_link(ui: str | None, tid: str) -> str | None:
    return f"{ui.rstrip('/')}/trace/{tid}" if ui else None


def grafana_link(grafana: str | None, datasource: str, tid: str) -> str | None:
    """Grafana's Explore on the Jaeger data source, this trace open."""
    if not grafana:
        return None
    query = {"refId": "A", "datasource": {"type": "jaeger", "uid": datasource}, "query": tid}
    pane = {"t": {"datasource": datasource, "queries": [query], "range": {"from": "now-30d", "to": "now"}}}
    panes = urllib.parse.quote(json.dumps(pane, separators=(",", ":")))
    return f"{grafana.rstrip('/')}/explore?schemaVersion=1&panes={panes}"
