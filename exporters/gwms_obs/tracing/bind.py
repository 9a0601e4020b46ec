"""A parsed spool bound to the glidein the factory issued it to (its ledger entry).

A glidein may write only its own trace, under its own ``glidein submit`` span,
with its own identity; everything else in its spool is dropped and counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from . import conventions as C
from .ledger import Issued
from .spool import BadPart, Spool

# --- binding a spool to its glidein ---------------------------------------------------------------

_DIMENSION_VALUE = re.compile(r"[A-Za-z0-9_.@-]{1,128}")
OTHER_PHASE: Final = "other"
INVALID_VALUE: Final = "invalid"


def _str_value(v: object) -> str | None:
    """The text of an OTLP/JSON AnyValue that is a string or an integer."""
    if isinstance(v, dict):
        for k in ("stringValue", "intValue"):
            if k in v and isinstance(v[k], str | int) and not isinstance(v[k], bool):
                return str(v[k])
    return None


def bind_spool(spool: Spool, issued: Issued, report: Callable[[BadPart], None]) -> None:
    """Keep only what the glidein may write: its own trace, under its own span, with its own identity.

    The resource must name the entry, client, factory and job the factory
    issued (missing names are filled in from the ledger); spans must be in the
    cluster's trace, must not reuse a factory span id, and must descend from
    the glidein's ``glidein submit`` span. Everything else is dropped and
    reported, one report per span.
    """
    expected = {
        **issued.resource,
        C.SERVICE_NAME: C.SERVICE_PILOT,
        C.CONDOR_CLUSTER: str(issued.cluster),
        C.CONDOR_PROC: str(issued.proc),
    }
    kept_rs = []
    for rs in spool.resource_spans:
        attrs = rs.setdefault("resource", {}).get("attributes") or []
        have = {kv["key"]: _str_value(kv.get("value")) for kv in attrs}
        wrong = [k for k, v in expected.items() if k in have and have[k] != v]
        if wrong:
            for ss in rs["scopeSpans"]:
                for _ in ss["spans"]:
                    report(BadPart("foreign_resource", f"{wrong[0]}={str(have[wrong[0]])[:60]!r}"))
            continue
        for k, v in expected.items():
            if k not in have:
                typed = {"intValue": v} if k in (C.CONDOR_CLUSTER, C.CONDOR_PROC) else {"stringValue": v}
                attrs.append({"key": k, "value": typed})
        site = next((kv for kv in attrs if kv["key"] == C.SITE), None)
        if site is not None and C.SITE not in issued.resource:
            value = _str_value(site.get("value"))
            if value is None or not _DIMENSION_VALUE.fullmatch(value):
                report(BadPart("bad_dimension", f"{C.SITE}={str(value)[:60]!r}"))
                site["value"] = {"stringValue": INVALID_VALUE}
        rs["resource"]["attributes"] = attrs
        kept_rs.append(rs)
    # Which spans descend from the glidein's own span (through spans of the same trace)?
    children: dict[str, list[str]] = {}
    for rs in kept_rs:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                if s["traceId"] == issued.trace_id and s["spanId"] not in issued.factory_span_ids:
                    children.setdefault(s["parentSpanId"], []).append(s["spanId"])
    reached: set[str] = set()
    todo = [issued.parent_span_id]
    while todo:
        for child in children.pop(todo.pop(), []):
            if child not in reached:
                reached.add(child)
                todo.append(child)
    out_rs = []
    for rs in kept_rs:
        scopes = []
        for ss in rs["scopeSpans"]:
            spans = []
            for s in ss["spans"]:
                if s["traceId"] != issued.trace_id:
                    report(BadPart("foreign_trace", f"traceId {s['traceId']}, issued {issued.trace_id}"))
                elif s["spanId"] in issued.factory_span_ids:
                    report(BadPart("foreign_span", f"spanId {s['spanId']} is the factory's"))
                elif s["spanId"] not in reached:
                    report(BadPart("foreign_parent", f"span {s['spanId']} parent {s['parentSpanId'] or '-'}"))
                else:
                    _bound_phase(s, report)
                    spans.append(s)
            if spans:
                scopes.append({**ss, "spans": spans})
        if scopes:
            out_rs.append({**rs, "scopeSpans": scopes})
    spool.resource_spans = out_rs
    spool.spans = sum(len(ss["spans"]) for rs in out_rs for ss in rs["scopeSpans"])


def own_phases(spool: Spool, issued: Issued) -> dict[str, str]:
    """A bound spool's pilot root (as ``glidein``) and the phases directly under it: name -> span id."""
    spans = [s for rs in spool.resource_spans for ss in rs["scopeSpans"] for s in ss["spans"]]
    roots = [s for s in spans if s["name"] == C.SPAN_PILOT and s["parentSpanId"] == issued.parent_span_id]
    if not roots:
        return {}
    root = roots[0]["spanId"]
    out = {C.SPAN_PILOT: root}
    for s in spans:
        if s["parentSpanId"] == root and s["name"] in C.PHASES:
            out.setdefault(s["name"], s["spanId"])
    return out


def _bound_phase(s: dict[str, Any], report: Callable[[BadPart], None]) -> None:
    """gwms.phase is a spanmetrics dimension: only the phases of the conventions pass."""
    for kv in s.get("attributes") or []:
        if kv["key"] == C.PHASE and _str_value(kv.get("value")) not in C.PHASES:
            report(BadPart("bad_dimension", f"{C.PHASE}={str(_str_value(kv.get('value')))[:60]!r}"))
            kv["value"] = {"stringValue": OTHER_PHASE}
