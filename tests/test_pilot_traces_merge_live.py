"""A pilot the factory traced live gets its log spans inside its own trace, no phase twice.

The factory's FactoryTracer submits the pilot's cluster (its trace ledger beside the pilot's
files), gwms-trace.sh runs as the pilot and, with no endpoint, returns its spool in the
.err; `gwms-obs export --once` then forwards the spool and builds the pilot's trace from
its logs. Jaeger (real, behind our real collector, 127.0.0.1) holds one trace: the
factory's spans, the pilot's own phases, and from the logs only the accounting root, the
queue and the user jobs, under the pilot's own `main` phase.

Needs `make otelcol jaeger` (skipped, with the reason, without them).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.outputs import pilot_traces as P
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from gwms_obs.tracing.factory import FactoryTracer, make_provider
from tests.support.trace_pilot import run_pilot
from tests.support.trace_stack import stack
from tools import tracing_backends
from tools.polling import poll

pytestmark = [pytest.mark.live, pytest.mark.slow]

ENTRY = "CMSHTPC_T2_US_Nebraska_red"
# Span names that are one phase of one pilot: each at most once in its trace.
PHASE_NAMES = {C.SPAN_PILOT, *C.PHASES, *C.LOG_PHASES, P.SPAN_RUNNING, P.SPAN_RECORD} - {P.SPAN_HELD}


def _pilot_with_jobs(factory: Path) -> tuple[Path, int, int]:
    """The .err of a simulated pilot of ENTRY that ran user jobs (its StartdHistoryLog), its cluster, proc."""
    for err in sorted(factory.rglob(f"entry_{ENTRY}/job.*.err")):
        if b"StartdHistoryLog" in err.read_bytes():
            _, cluster, proc, _ = err.name.split(".")
            return err, int(cluster), int(proc)
    raise AssertionError(f"no pilot of {ENTRY} with user jobs in the simulated factory")


def _tags(kvs: list[dict[str, Any]]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in kvs}


def test_a_pilot_traced_live_has_one_trace_with_its_own_and_its_log_spans_no_phase_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    factory = tmp_path / "factory"
    simulate(factory, 30, seed=11, start=now - 2 * 86400, span_hours=12)
    err, cluster, proc = _pilot_with_jobs(factory)
    with stack(tmp_path) as st:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", st.col.traces_url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"Authorization=Bearer%20{st.col.token}")
        ft = FactoryTracer("OSG", "gfactory_instance", make_provider("OSG", "gfactory_instance"))
        with ft.submit_cluster(ENTRY, "CMSG-v1_0.main-token", proc + 1, site="Nebraska", log_dir=str(err.parent)) as sc:
            env = dict(e.split("=", 1) for e in sc.submit_env())
            sc.submitted(cluster, proc + 1)
        assert ft.flush()
        tp = env[C.ENV_TRACEPARENT_LIST].split(",")[proc]
        trace_id, submit_span = tp[3:35], tp[36:52]
        res = env["GLIDEIN_OTEL_RESOURCE_ATTRIBUTES"] + f",gwms.condor.cluster={cluster},gwms.condor.proc={proc}"
        # The pilot passes validation and runs HTCondor; no endpoint: its spool comes back in its stderr.
        run = run_pilot(tmp_path / "pilot", fail=None, traceparent=tp, env={"OTEL_RESOURCE_ATTRIBUTES": res})
        assert "result stderr" in run.stdout, run.stderr[-2000:]
        own = {s["name"]: s["spanId"] for s in run.spans() if s["name"] in (C.SPAN_PILOT, *C.PHASES)}
        assert set(own) == {C.SPAN_PILOT, *C.PHASES}
        with err.open("ab") as f:  # the simulated .err (the user jobs) and the pilot's traced stderr
            f.write(b"\n" + run.stderr)

        token = tmp_path / "token"
        token.write_text(st.col.token)
        cmd = [
            *(sys.executable, "-m", "gwms_obs.cli", "export", "--once", "--factory-dir", str(factory)),
            *("--checkpoint", str(tmp_path / "state" / "checkpoint.json"), "--settle-seconds", "0"),
            *("--traces-endpoint", st.col.traces_url, "--traces-token-file", str(token)),
        ]
        (tmp_path / "state").mkdir()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180, env=clean)
        assert r.returncode == 0, r.stderr[-3000:]

        def merged() -> list[dict[str, Any]] | None:
            s = tracing_backends.jaeger_trace(st.jaeger.query, trace_id)
            ok = any(x["operationName"] == P.SPAN_RECORD for x in s) and len(s) >= 2 + proc + len(run.spans())
            return s if ok else None

        spans = poll("the pilot's own and log spans in its live trace", merged, timeout=60)
        by_id = {s["spanID"]: s for s in spans}

        def parent(s: dict[str, Any]) -> str:
            return next((r["spanID"] for r in s.get("references", []) if r["refType"] == "CHILD_OF"), "")

        # The pilot's spans: those of the factory's glidein submit span for this proc, the spool's root and below.
        mine: set[str] = set()
        frontier = {submit_span}
        while frontier:
            kids = {s["spanID"] for s in spans if parent(s) in frontier} - mine
            mine |= kids
            frontier = kids
        names = Counter(by_id[i]["operationName"] for i in mine)
        # Each phase once: the pilot's own init..cleanup and root, and from the logs only what it cannot trace.
        assert {n: c for n, c in names.items() if n in PHASE_NAMES and c > 1} == {}, names
        assert names[C.SPAN_PILOT] == 1 and names[P.SPAN_RECORD] == 1
        for skipped in (P.SPAN_RUNNING, P.SPAN_VALIDATION, P.SPAN_CONDOR):
            assert names[skipped] == 0, names  # the pilot's root, setup and main stand for them
        assert names[C.PHASE_CLEANUP] == 1 and by_id[own[C.PHASE_CLEANUP]]["operationName"] == C.PHASE_CLEANUP

        # The spool's spans are the pilot's own, unchanged (ids from its spool).
        assert {s["spanId"] for s in run.spans()} <= mine
        # The log's root: the accounting, under the factory's glidein submit span, the factory's resource.
        (record,) = (by_id[i] for i in mine if by_id[i]["operationName"] == P.SPAN_RECORD)
        assert parent(record) == submit_span
        tags = _tags(record["tags"])
        assert tags[P.OUTCOME] and any(k.startswith(P.CPU_SECONDS) for k in tags)
        # The user jobs: under the pilot's own main phase, each with its category and cores.
        jobs = [by_id[i] for i in mine if by_id[i]["operationName"] == P.SPAN_JOB]
        assert jobs and {parent(j) for j in jobs} == {own[C.PHASE_MAIN]}
        assert all(P.JOB_CATEGORY in _tags(j["tags"]) and P.JOB_CPUS in _tags(j["tags"]) for j in jobs)

        # And no second, log-only trace of this pilot: every trace naming its job is this one.
        others = [
            t["traceID"]
            for t in J.search(st.jaeger.query, entry=ENTRY, start=now - 10 * 86400, end=now + 86400, limit=10_000)
            for p in t["processes"].values()
            if {(x["key"], str(x["value"])) for x in p["tags"]}
            >= {(C.CONDOR_CLUSTER, str(cluster)), (C.CONDOR_PROC, str(proc))}
        ]
        assert set(others) == {trace_id}, others
        ft.shutdown()
