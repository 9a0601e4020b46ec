"""A pilot's spans as flat rows: what the analysis needs of each, from a spool or from Jaeger.

Both inputs name the same things (docs/tracing.md): a root span ``glidein``,
phase spans with ``gwms.phase``, and script spans with ``gwms.script``, each a
child of its phase. A pilot traced from the factory's files (a stock factory,
outputs/pilot_traces.py) has the phases ``conventions.LOG_PHASES`` instead,
with ``gwms.phase`` too, so they are read the same way; its ``running`` and
user ``job`` spans are no phase and are left out. A script's phase is its parent's ``gwms.phase``. Spans
of the factory (``condor_submit``, ``glidein submit``) are not the pilot's and
are left out. Each span carries its pilot root's interval (``tracing.lifetime``),
found through every span of its trace, the unclassified ones too, so that a
span beyond its pilot's life can be told.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ..tracing import conventions as C
from ..tracing import lifetime as L

KIND_PILOT: Final = "pilot"
KIND_PHASE: Final = "phase"
KIND_SCRIPT: Final = "script"
FACTORY_SPANS: Final = frozenset((C.SPAN_SUBMIT, C.SPAN_GLIDEIN_SUBMIT))


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str
    span_id: str
    kind: str  # KIND_PILOT, KIND_PHASE or KIND_SCRIPT
    name: str  # the phase for a phase span, the script for a script span
    phase: str  # the phase it belongs to ("" for the root)
    start: float  # Unix seconds
    duration: float  # seconds
    # What the span's resource says (the factory's labels replace them when the pilot is known).
    entry: str
    site: str
    cluster: int | None
    proc: int | None
    window: tuple[float, float] | None = None  # its pilot root's start and end (lifetime.pilot_windows)

    @property
    def end(self) -> float:
        return self.start + self.duration


def _otlp_value(v: object) -> str | None:
    if isinstance(v, dict):
        for k in ("stringValue", "intValue", "boolValue", "doubleValue"):
            if k in v and v[k] is not None:
                return str(v[k])
    return None


def _int(v: object) -> int | None:
    try:
        return int(str(v))
    except ValueError:
        return None


def _classify(name: str, tags: dict[str, str]) -> tuple[str, str] | None:
    """(kind, name) of a pilot span, None for a span that is no phase, script or root."""
    if tags.get(C.SCRIPT):
        return KIND_SCRIPT, tags[C.SCRIPT]
    if tags.get(C.PHASE):
        return KIND_PHASE, tags[C.PHASE]
    if name == C.SPAN_PILOT:
        return KIND_PILOT, name
    return None


def _build(
    raw: list[tuple[str, str, str, str, float, float, dict[str, str], dict[str, str]]],
) -> list[Span]:
    """raw: (trace, span, parent, name, start s, duration s, span tags, resource tags)."""
    phase_of = {(t, s): tags.get(C.PHASE, "") for t, s, _p, _n, _st, _d, tags, _r in raw}
    windows = L.pilot_windows([L.Timed(t, s, p, n, st, st + d) for t, s, p, n, st, d, _t, _r in raw])
    out: list[Span] = []
    for (trace, span, parent, name, start, dur, tags, res), window in zip(raw, windows, strict=True):
        if name in FACTORY_SPANS or res.get(C.SERVICE_NAME) == C.SERVICE_FACTORY:
            continue
        kind = _classify(name, tags)
        if kind is None:
            continue
        phase = kind[1] if kind[0] == KIND_PHASE else phase_of.get((trace, parent), "")
        out.append(
            Span(
                trace,
                span,
                kind[0],
                kind[1],
                phase,
                start,
                dur,
                res.get(C.ENTRY, ""),
                res.get(C.SITE, ""),
                _int(res.get(C.CONDOR_CLUSTER)),
                _int(res.get(C.CONDOR_PROC)),
                window,
            )
        )
    return out


def from_otlp(resource_spans: Iterable[dict[str, Any]]) -> list[Span]:
    """The spans of validated OTLP/JSON resourceSpans (``tracing.spool.parse_spool``'s)."""
    raw = []
    for rs in resource_spans:
        res = {
            kv["key"]: v
            for kv in (rs.get("resource") or {}).get("attributes") or []
            if (v := _otlp_value(kv.get("value"))) is not None
        }
        for ss in rs.get("scopeSpans") or []:
            for s in ss.get("spans") or []:
                tags = {
                    kv["key"]: v for kv in s.get("attributes") or [] if (v := _otlp_value(kv.get("value"))) is not None
                }
                start = int(s["startTimeUnixNano"]) / 1e9
                dur = (int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])) / 1e9
                raw.append((s["traceId"], s["spanId"], s.get("parentSpanId") or "", s["name"], start, dur, tags, res))
    return _build(raw)


def from_jaeger(traces: Iterable[dict[str, Any]]) -> list[Span]:
    """The spans of traces from Jaeger's API (``tracing.jaeger.search`` or ``get_trace``)."""
    raw = []
    for t in traces:
        procs = t.get("processes") or {}
        for s in t.get("spans") or []:
            proc = s.get("process") or procs.get(s.get("processID", ""), {})
            res = {tg["key"]: str(tg.get("value")) for tg in proc.get("tags") or []}
            if proc.get("serviceName"):
                res.setdefault(C.SERVICE_NAME, str(proc["serviceName"]))
            tags = {tg["key"]: str(tg.get("value")) for tg in s.get("tags") or []}
            parent = next((r["spanID"] for r in s.get("references") or [] if r.get("refType") == "CHILD_OF"), "")
            raw.append(
                (
                    str(s["traceID"]),
                    str(s["spanID"]),
                    str(parent),
                    str(s.get("operationName", "")),
                    float(s["startTime"]) / 1e6,
                    float(s["duration"]) / 1e6,
                    tags,
                    res,
                )
            )
    return _build(raw)
