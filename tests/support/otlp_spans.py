"""One pilot's spans as an OTLP/JSON request, and reading them back from Jaeger:
the live collector tests and the compose stack test send the same trace."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from gwms_obs.tracing import conventions as C
from tools import tracing_backends

DN = "/DC=org/DC=cilogon/C=US/O=Fermi National Accelerator Laboratory/OU=People/CN=Jane Doe/CN=UID:jdoe"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJqZG9lIiwic2NvcGUiOiJjb21wdXRlLnJlYWQifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"


def _attrs(d: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for k, v in d.items():
        val = {"intValue": str(v)} if isinstance(v, int) else {"stringValue": str(v)}
        out.append({"key": k, "value": val})
    return out


def pilot_trace(entry: str, *, secret_attrs: bool = False, phase_ms: int = 1500) -> tuple[str, bytes, list[str]]:
    """One pilot's spans as an OTLP/JSON request: root + every phase (setup failing).

    Returns (trace id, body, span names)."""
    trace_id = secrets.token_hex(16)
    root_id = secrets.token_hex(8)
    t0 = time.time_ns() - 60 * 10**9
    resource = {
        C.SERVICE_NAME: C.SERVICE_PILOT,
        C.FACTORY: "gfactory-test",
        C.ENTRY: entry,
        C.CLIENT: "frontend-test.main",
        C.SITE: "Test_Site",
        C.GLIDEIN_UUID: secrets.token_hex(8),
    }
    spans: list[dict[str, Any]] = []
    root_attrs: dict[str, Any] = {}
    if secret_attrs:
        root_attrs = {
            "gwms.x509.subject": DN,  # key pattern: value masked
            "gwms.scitoken": JWT,  # key pattern
            "gwms.note": f"proxy at /tmp/x509up_u4242 for {DN}",  # value patterns
            "gwms.cmdline": "condor_startup.sh --password=hunter2 -v",
            "gwms.uplink": "https://jdoe:s3cr3tpw@factory.example.org/stage",
            "gwms.plain": "keep me",
        }
    t = t0
    for i, phase in enumerate(C.PHASES):
        start, end = t, t + phase_ms * 10**6 * (i + 1)
        spans.append(
            {
                "traceId": trace_id,
                "spanId": secrets.token_hex(8),
                "parentSpanId": root_id,
                "name": phase,
                "kind": C.KIND_INTERNAL,
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(end),
                "attributes": _attrs({C.PHASE: phase}),
                "status": {"code": C.STATUS_ERROR if phase == C.PHASE_SETUP else C.STATUS_OK},
                "events": (
                    [{"timeUnixNano": str(start), "name": "auth", "attributes": _attrs({"header": f"Bearer {JWT}"})}]
                    if secret_attrs and phase == C.PHASE_INIT
                    else []
                ),
            }
        )
        t = end
    spans.insert(
        0,
        {
            "traceId": trace_id,
            "spanId": root_id,
            "name": C.SPAN_PILOT,
            "kind": C.KIND_CONSUMER,
            "startTimeUnixNano": str(t0),
            "endTimeUnixNano": str(t),
            "attributes": _attrs(root_attrs),
            "status": {"code": C.STATUS_ERROR},
        },
    )
    body = {
        "resourceSpans": [
            {"resource": {"attributes": _attrs(resource)}, "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}
        ]
    }
    return trace_id, json.dumps(body).encode(), [s["name"] for s in spans]


def complete_trace(query: str, trace_id: str, n: int) -> list[dict[str, Any]] | None:
    """The trace's spans once Jaeger has all ``n`` of them, else None."""
    spans = tracing_backends.jaeger_trace(query, trace_id)
    return spans if len(spans) == n else None
