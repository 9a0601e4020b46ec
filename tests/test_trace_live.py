"""End to end with real processes on 127.0.0.1: factory span -> pilot script -> our collector -> Jaeger.

Needs the binaries of `make otelcol` and `make jaeger` (found through
$GWMS_OBS_OTELCOL / $GWMS_OBS_JAEGER, which the Makefile exports); skipped,
with the reason, when they are not built. The collector and Jaeger configs
are the Ansible roles' templates, rendered by tools.tracing_backends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gwms_obs.ingest.outlets import Outlets
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.factory import FactoryTracer, make_provider
from gwms_obs.tracing.outbox import SpoolForwarder
from tests.support.trace_pilot import SCRIPTS, PilotRun, run_pilot
from tests.support.trace_stack import Stack, binaries, stack
from tools import tracing_backends

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _factory(st: Stack, monkeypatch: pytest.MonkeyPatch) -> FactoryTracer:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", st.col.traces_url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"Authorization=Bearer%20{st.col.token}")
    return FactoryTracer("OSG", "gfactory_instance", make_provider("OSG", "gfactory_instance"))


def _submit(ft: FactoryTracer, log_dir: Path | None = None, cluster: int = 10176598) -> tuple[str, str, str]:
    """One cluster of 2 glideins; (trace id, glidein 1's traceparent, its resource attributes).

    With ``log_dir`` the cluster goes into that directory's trace ledger.
    """
    with ft.submit_cluster("CMSHTPC_T2_US_Nebraska_red", "CMSG-v1_0.main-token", 2, site="Nebraska",
                           log_dir=str(log_dir or "")) as sc:  # fmt: skip
        env = dict(e.split("=", 1) for e in sc.submit_env())
        sc.submitted(cluster, 2)
    assert ft.flush()
    tp = env[C.ENV_TRACEPARENT_LIST].split(",")[1]
    res = env["GLIDEIN_OTEL_RESOURCE_ATTRIBUTES"] + f",gwms.condor.cluster={cluster},gwms.condor.proc=1"
    return tp[3:35], tp, res


def _trace(st: Stack, trace_id: str, n: int) -> list[dict[str, Any]]:
    return list(
        tracing_backends.poll(
            f"{n} spans of {trace_id} in Jaeger",
            lambda: (s := tracing_backends.jaeger_trace(st.jaeger.query, trace_id)) and len(s) >= n and s,
            timeout=60,
        )
    )


def _check_tree(spans: list[dict[str, Any]], run: PilotRun, glidein_tp: str) -> None:
    """Jaeger's spans of the pilot are the spool's, with the same tree, times and statuses."""
    by_id = {s["spanID"]: s for s in spans}
    spool = run.spans()
    for s in spool:
        j = by_id[s["spanId"]]
        assert j["operationName"] == s["name"]
        parent = next((r["spanID"] for r in j.get("references", []) if r["refType"] == "CHILD_OF"), "")
        assert parent == s["parentSpanId"]
        assert j["startTime"] == int(s["startTimeUnixNano"]) // 1000
        tags = {t["key"]: t["value"] for t in j["tags"]}
        if s["name"] == "entry/check_os.sh":
            assert tags.get("otel.status_code") == "ERROR" and tags.get("error") is True
            assert tags[C.PROCESS_EXIT_CODE] == 3
    root = next(s for s in spool if s["name"] == C.SPAN_PILOT)
    assert root["parentSpanId"] == glidein_tp[36:52]  # the factory's per-glidein span...
    assert by_id[root["parentSpanId"]]["operationName"] == C.SPAN_GLIDEIN_SUBMIT  # ...which Jaeger has too
    starts = [by_id[s["spanId"]]["startTime"] for s in spool if s["name"] in SCRIPTS]
    assert starts == sorted(starts)


def test_pilot_to_collector_to_jaeger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with stack(tmp_path) as st:
        ft = _factory(st, monkeypatch)
        trace_id, tp, res = _submit(ft)
        run = run_pilot(
            tmp_path / "pilot",
            traceparent=tp,
            env={
                "OTEL_RESOURCE_ATTRIBUTES": res,
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": st.col.traces_url,
                "GWMS_TRACE_TOKEN": st.col.token,
            },
        )
        assert "result sent" in run.stdout, run.stderr[-2000:]
        spans = _trace(st, trace_id, 3 + len(run.spans()))
        _check_tree(spans, run, tp)
        ft.shutdown()


def test_no_endpoint_spans_come_back_through_err_and_exporter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with stack(tmp_path) as st:
        ft = _factory(st, monkeypatch)
        # A factory tree whose one pilot, job 10176598.1, returned this stderr.
        factory = tmp_path / "factory"
        simulate(factory, 1, 1)
        (err,) = factory.rglob("*.err")
        (out,) = factory.rglob("*.out")
        trace_id, tp, res = _submit(ft, log_dir=err.parent)  # the ledger beside the job's files
        run = run_pilot(tmp_path / "pilot", traceparent=tp, env={"OTEL_RESOURCE_ATTRIBUTES": res})
        assert "result stderr" in run.stdout
        out.rename(out.with_name("job.10176598.1.out"))
        err.unlink()
        err = err.with_name("job.10176598.1.err")
        err.write_bytes(run.stderr)
        errors = ParseErrors()
        fwd = SpoolForwarder(st.col.traces_url, tmp_path / "outbox", errors, token=st.col.token)
        ingest = Ingest(IngestConfig(str(factory), settle_seconds=0), outlets=Outlets(spools=fwd), errors=errors)
        fwd.start()
        ingest.scan()
        assert fwd.drain(30) and fwd.stats.sent_spans == len(run.spans())
        assert ingest.errors.total("trace_spool") == 0
        fwd.stop()
        _check_tree(_trace(st, trace_id, 3 + len(run.spans())), run, tp)
        ft.shutdown()


def test_jaeger_outage_loses_no_span(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jaeger stopped while pilots report: the collector's persistent queue delivers once it is back."""
    otelcol, jaeger = binaries()
    jcfg = tracing_backends.jaeger_config(tmp_path / "jaeger")
    ccfg = tracing_backends.collector_config(
        tmp_path / "col",
        jaeger_otlp_grpc=jcfg.otlp_grpc,
        remote_write_url=f"http://127.0.0.1:{tracing_backends.free_port()}/api/v1/write",
    )
    with tracing_backends.run(otelcol, ccfg.path, ccfg.health, tmp_path / "otelcol.log"):
        st = Stack(ccfg, jcfg, jaeger, tmp_path)
        ft = _factory(st, monkeypatch)
        runs = []
        # Jaeger down: the pilots' POSTs still succeed (the collector accepted and queued them).
        for i in range(3):
            trace_id, tp, res = _submit(ft)
            env = {"OTEL_RESOURCE_ATTRIBUTES": res, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ccfg.traces_url,
                   "GWMS_TRACE_TOKEN": ccfg.token}  # fmt: skip
            run = run_pilot(tmp_path / f"pilot{i}", traceparent=tp, env=env)
            assert "result sent" in run.stdout, run.stderr[-2000:]
            runs.append((trace_id, tp, run))
        with tracing_backends.run(jaeger, jcfg.path, jcfg.health, tmp_path / "jaeger.log"):
            for trace_id, tp, run in runs:
                _check_tree(_trace(st, trace_id, 3 + len(run.spans())), run, tp)
        ft.shutdown()


def test_otlp_without_token_is_refused(tmp_path: Path) -> None:
    with stack(tmp_path) as st:
        run = run_pilot(tmp_path / "pilot", env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": st.col.traces_url})
        assert "result stderr" in run.stdout  # refused (401): the spool falls back to stderr
        assert tracing_backends.post_otlp(st.col.traces_url, run.spool.splitlines()[0], None) == 401
        assert tracing_backends.post_otlp(st.col.traces_url, run.spool.splitlines()[0], "wrong-token") == 401
