"""Act as the factory for spools made elsewhere: write the trace ledger that issued them.

The simulator and the shell-pilot tests make spools without a FactoryTracer;
the exporter forwards a spool only when the factory's ledger
(gwms_obs.tracing.ledger) says which trace and parent span it issued to that
glidein. This writes those records from the spools' own roots, for tests whose
subject is the forwarding, not the binding.
"""

from __future__ import annotations

import json
import secrets
from collections import defaultdict
from pathlib import Path

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources.glidein_err import read_err
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import ledger as L
from gwms_obs.tracing.spool import parse_spool

# What the factory puts in a glidein's resource (FactoryTracer.submit_cluster).
FACTORY_KEYS = (C.FACTORY, C.GLIDEIN_NAME, C.ENTRY, C.CLIENT, C.FRONTEND, C.SITE)


def issue_from_spools(factory_dir: Path) -> int:
    """One ledger record per cluster whose .err files return a spool; how many glideins were issued."""
    clusters: dict[tuple[Path, int], dict[int, tuple[str, str, dict[str, str]]]] = defaultdict(dict)
    for err in factory_dir.rglob("job.*.*.err"):
        parsed = read_err(str(err), ParseErrors(), detail=False)
        if parsed is None or parsed.trace_spool is None:
            continue
        _, cluster, proc, _ = err.name.split(".")
        sp = parse_spool(parsed.trace_spool)
        spans = [s for rs in sp.resource_spans for ss in rs["scopeSpans"] for s in ss["spans"]]
        ids = {s["spanId"] for s in spans}
        root = next(s for s in spans if s["parentSpanId"] not in ids)
        res = {
            kv["key"]: kv["value"]["stringValue"]
            for kv in sp.resource_spans[0]["resource"].get("attributes", [])
            if kv["key"] in FACTORY_KEYS and "stringValue" in kv["value"]
        }
        clusters[(err.parent, int(cluster))][int(proc)] = (root["traceId"], root["parentSpanId"], res)
    n = 0
    for (log_dir, cluster), procs in clusters.items():
        trace_id, _, res = next(iter(procs.values()))
        spans = [procs[p][1] if p in procs else secrets.token_hex(8) for p in range(max(procs) + 1)]
        L.append_record(log_dir, cluster, trace_id, secrets.token_hex(8), spans, res)
        n += len(procs)
    return n


def issue(log_dir: Path, cluster: int, trace_id: str, parents: list[str], resource: dict[str, str]) -> str:
    """One cluster's record; the factory's condor_submit span id is returned."""
    span_id = secrets.token_hex(8)
    L.append_record(log_dir, cluster, trace_id, span_id, parents, resource)
    return span_id


def read_ledger(log_dir: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (log_dir / L.LEDGER_NAME).read_text().splitlines()]
