"""The span spool a simulated glidein returns in its .err (what pilot/gwms-trace.sh writes).

Same shape as the shell library's output (conventions v1): one
ExportTraceServiceRequest per line, written as each span ends; a root span
``glidein`` under the factory's per-glidein span, the phases of
glidein_startup.sh under it, validation scripts under ``setup`` and
condor_startup.sh under ``main``. Times are the simulated pilot's own.

Ids and the choice of which pilots return a spool are hashes of (seed,
cluster, proc): the simulator's random stream is not touched, so everything
else it writes is byte-for-byte what it wrote before spools existed. The
spool travels in the .err (``glidein_err``), read back by the glidein_err
reader into the trace_spool source.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ...catalogue import Source
from ...tracing import conventions as C
from ..plan import SimPilot, WorkerNode, script_times
from ..scenario import FACTORY, Client, EntrySpec

SOURCE = Source.TRACE_SPOOL
SPOOL_SHARE = 3  # one pilot in this many had no outbound network and returns its spool in the .err


def _digest(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def returns_spool(seed: int, cluster: int, proc: int) -> bool:
    return int(_digest("spool", seed, cluster, proc)[:8], 16) % SPOOL_SHARE == 0


def factory_context(seed: int, cluster: int, proc: int) -> tuple[str, str]:
    """(trace id, span id) of the factory's span for this glidein: one trace per submit cluster."""
    return _digest("trace", seed, cluster)[:32], _digest("glidein", seed, cluster, proc)[:16]


def _attribute(k: str, v: str | int | bool) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"key": k, "value": {"boolValue": v}}
    if isinstance(v, int):
        return {"key": k, "value": {"intValue": str(v)}}
    return {"key": k, "value": {"stringValue": v}}


def spool(
    *,
    seed: int,
    cluster: int,
    proc: int,
    resource: dict[str, str | int],
    startup: int,
    glidein_end: int,
    scripts: list[tuple[str, int, int]],
    failed: str | None,
    main: tuple[int, int] | None,
    exit_code: int,
) -> bytes:
    """The JSONL spool; ``scripts`` are (name, start, end) as the .out tells, ``main`` condor's interval."""
    trace_id, parent = factory_context(seed, cluster, proc)
    res = {"attributes": [_attribute(k, v) for k, v in resource.items()]}
    scope = {"name": "gwms-trace.sh", "version": C.VERSION}
    lines: list[bytes] = []
    n = 0

    def next_span_id() -> str:
        nonlocal n
        n += 1
        return _digest("span", seed, cluster, proc, n)[:16]

    def emit(
        span_id: str,
        parent_id: str,
        name: str,
        kind: int,
        start: int,
        end: int,
        attrs: list[dict[str, Any]],
        rc: int | None = None,
    ) -> None:
        span: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": span_id,
            "parentSpanId": parent_id,
            "name": name,
            "kind": kind,
            "startTimeUnixNano": str(start * 1_000_000_000),
            "endTimeUnixNano": str(end * 1_000_000_000),
            "attributes": attrs,
            "events": [],
            "links": [],
        }
        if rc is not None:
            span["attributes"] = [*attrs, _attribute(C.PROCESS_EXIT_CODE, rc)]
            ok = rc == 0
            span["status"] = {"code": C.STATUS_OK} if ok else {"code": C.STATUS_ERROR, "message": f"exit code {rc}"}
        doc = {"resourceSpans": [{"resource": res, "scopeSpans": [{"scope": scope, "spans": [span]}]}]}
        lines.append(json.dumps(doc, separators=(",", ":")).encode())

    root = next_span_id()
    t_setup = startup + 3  # descriptor and signature downloads (as the simulator's script_times)
    setup_end = scripts[-1][2] if failed else (main[0] if main else scripts[-1][2])
    emit(next_span_id(), root, C.PHASE_INIT, C.KIND_INTERNAL, startup, startup + 1, [_attribute(C.PHASE, C.PHASE_INIT)])
    emit(
        next_span_id(),
        root,
        C.PHASE_PRE_SETUP,
        C.KIND_INTERNAL,
        startup + 1,
        t_setup,
        [_attribute(C.PHASE, C.PHASE_PRE_SETUP)],
    )
    setup = next_span_id()
    for name, s, t in scripts:
        emit(
            next_span_id(), setup, name, C.KIND_INTERNAL, s, t, [_attribute(C.SCRIPT, name)], 1 if name == failed else 0
        )
    emit(setup, root, C.PHASE_SETUP, C.KIND_INTERNAL, t_setup, setup_end, [_attribute(C.PHASE, C.PHASE_SETUP)],
         1 if failed else None)  # fmt: skip
    cleanup_start = setup_end
    if main is not None:
        m = next_span_id()
        emit(
            next_span_id(),
            m,
            "condor_startup.sh",
            C.KIND_INTERNAL,
            main[0],
            main[1],
            [_attribute(C.SCRIPT, "condor_startup.sh")],
            0,
        )
        emit(m, root, C.PHASE_MAIN, C.KIND_INTERNAL, main[0], main[1], [_attribute(C.PHASE, C.PHASE_MAIN)])
        cleanup_start = main[1]
    emit(
        next_span_id(),
        root,
        C.PHASE_CLEANUP,
        C.KIND_INTERNAL,
        cleanup_start,
        glidein_end,
        [_attribute(C.PHASE, C.PHASE_CLEANUP)],
        0,
    )
    emit(root, parent, C.SPAN_PILOT, C.KIND_CONSUMER, startup, glidein_end, [], exit_code)
    return b"\n".join(lines) + b"\n"


def pilot_spool(p: SimPilot, spec: EntrySpec, client: Client, node: WorkerNode, seed: int) -> bytes:
    """The spool of a pilot that could not reach the collector: its resource, then ``spool``."""
    assert p.startup is not None and p.glidein_end is not None and p.exit_code is not None
    main = None
    if p.failed_script is None:
        assert p.validation_end is not None and p.last_script_end is not None
        main = (p.validation_end, p.last_script_end)
    resource: dict[str, str | int] = {
        "service.name": "glidein", "gwms.conventions": "1", "host.name": node.host, "gwms.factory": FACTORY,
        "gwms.entry": spec.name, "gwms.client": client.client_name, "gwms.site": spec.site,
        "gwms.glidein.uuid": str(node.uuid), "gwms.condor.cluster": p.cluster, "gwms.condor.proc": p.proc,
    }  # fmt: skip
    return spool(
        seed=seed, cluster=p.cluster, proc=p.proc, resource=resource, startup=p.startup,
        glidein_end=p.glidein_end, scripts=script_times(p), failed=p.failed_script, main=main,
        exit_code=p.exit_code,
    )  # fmt: skip
