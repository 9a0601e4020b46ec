"""Factory-side spans: a span per submit cluster, a traceparent per glidein, never blocking."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gwms_obs.controller.client import ControllerClient
from gwms_obs.controller.policy import Effect, Verbosity, sampled
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.factory import FactoryTracer, make_provider, otlp_traces_configured
from tests.support.canned_controller import answer, canned_controller, hung
from tests.support.otlp_capture import otlp_capture
from tests.support.trace_pilot import attrs, run_pilot
from tests.support.traceparent import parse_traceparent


def _tracer(exporter: SpanExporter) -> FactoryTracer:
    return FactoryTracer("OSG", "gfactory_instance", make_provider("OSG", "gfactory_instance", exporter))


def test_cluster_span_and_one_traceparent_per_glidein() -> None:
    mem = InMemorySpanExporter()
    ft = _tracer(mem)
    with ft.submit_cluster("Entry_A", "fe.main", 3, frontend="fe", site="Nebraska", schedd="s@h") as sc:
        env = dict(e.split("=", 1) for e in sc.submit_env())
        sc.submitted(10176598, 3)
    ft.flush()
    spans = mem.get_finished_spans()
    cluster = next(s for s in spans if s.name == C.SPAN_SUBMIT)
    glideins = sorted((s for s in spans if s.name == C.SPAN_GLIDEIN_SUBMIT), key=lambda s: s.attributes[C.CONDOR_PROC])
    assert len(spans) == 4 and cluster.parent is None and cluster.kind is SpanKind.CLIENT
    assert dict(cluster.attributes or {}) == {
        C.FACTORY: "OSG", C.ENTRY: "Entry_A", C.CLIENT: "fe.main", C.FRONTEND: "fe", C.SITE: "Nebraska",
        C.CONDOR_SCHEDD: "s@h", C.GLIDEIN_NAME: "gfactory_instance", C.GLIDEIN_COUNT: 3, C.CONDOR_CLUSTER: 10176598,
    }  # fmt: skip
    assert cluster.resource.attributes[C.SERVICE_NAME] == C.SERVICE_FACTORY
    assert cluster.resource.attributes[C.CONVENTIONS] == C.VERSION
    tps = env[C.ENV_TRACEPARENT_LIST].split(",")
    assert len(tps) == 3
    for i, (g, tp) in enumerate(zip(glideins, tps, strict=True)):
        assert g.parent is not None and g.parent.span_id == cluster.context.span_id
        assert g.kind is SpanKind.PRODUCER
        assert g.attributes[C.CONDOR_PROC] == i and g.attributes[C.CONDOR_CLUSTER] == 10176598
        p = parse_traceparent(tp)
        assert p is not None and p.sampled
        assert p.trace_id == f"{cluster.context.trace_id:032x}" and p.span_id == f"{g.context.span_id:016x}"
    res = env["GLIDEIN_OTEL_RESOURCE_ATTRIBUTES"]
    assert res == "gwms.factory=OSG,gwms.entry=Entry_A,gwms.client=fe.main,gwms.frontend=fe,gwms.site=Nebraska," + (
        "gwms.glidein.name=gfactory_instance"
    )


def test_partial_and_failed_submits_are_marked() -> None:
    mem = InMemorySpanExporter()
    ft = _tracer(mem)
    with ft.submit_cluster("E", "c", 3) as sc:
        sc.submitted(7, 2)
    with pytest.raises(RuntimeError), ft.submit_cluster("E", "c", 2):
        raise RuntimeError("condor_submit failed: schedd down")
    ft.flush()
    spans = mem.get_finished_spans()
    g = [s for s in spans if s.name == C.SPAN_GLIDEIN_SUBMIT]
    assert [s.status.status_code for s in g[:3]] == [StatusCode.UNSET, StatusCode.UNSET, StatusCode.ERROR]
    failed = [s for s in spans if s.name == C.SPAN_SUBMIT][1]
    assert failed.status.status_code is StatusCode.ERROR and "schedd down" in (failed.status.description or "")
    assert failed.events[0].name == "exception"
    assert all(s.status.status_code is StatusCode.ERROR for s in g[3:])


class _Blocking(SpanExporter):
    """An exporter stuck on a dead collector."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        self.release.wait(30)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_factory_loop_never_waits_for_the_exporter() -> None:
    """With the exporter blocked, 200 clusters of 10 submit at in-memory speed: spans are dropped, not waited on."""
    blocked = _Blocking()
    ft = FactoryTracer(
        "OSG",
        provider=make_provider(
            "OSG", exporter=blocked, max_queue_size=64, max_export_batch_size=16, schedule_delay_millis=1
        ),
    )
    t0 = time.monotonic()
    for i in range(200):
        with ft.submit_cluster("E", "c", 10) as sc:
            sc.submit_env()
            sc.submitted(1000 + i, 10)
    took = time.monotonic() - t0
    assert took < 5.0, took  # ~2,200 spans; a blocking design would hang for 30 s on the first batch
    blocked.release.set()
    ft.shutdown()


def test_otlp_configuration_from_standard_variables() -> None:
    assert not otlp_traces_configured({})
    assert otlp_traces_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"})
    assert otlp_traces_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"})
    assert not otlp_traces_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"})


def test_factory_exports_over_otlp_http_and_pilot_continues_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_* alone routes factory spans; the pilot given the glidein's traceparent joins the trace."""
    with otlp_capture() as cap:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", cap.traces_url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "Authorization=Bearer%20tok")
        ft = FactoryTracer("OSG", "gfactory_instance")
        with ft.submit_cluster("Entry_A", "fe.main", 2) as sc:
            env = dict(e.split("=", 1) for e in sc.submit_env())
            sc.submitted(42, 2)
        assert ft.flush()
        assert cap.wait_for(1, 10)
        req = cap.requests[0]
        ft.shutdown()
    assert req.headers["authorization"] == "Bearer tok"
    assert req.headers["content-type"] == "application/x-protobuf"
    # What condor_submit would hand glidein 1 ($CHOICE(Process, ...) with Process=1).
    tp1 = env[C.ENV_TRACEPARENT_LIST].split(",")[1]
    res = env["GLIDEIN_OTEL_RESOURCE_ATTRIBUTES"] + ",gwms.condor.cluster=42,gwms.condor.proc=1"
    run = run_pilot(tmp_path, traceparent=tp1, env={"OTEL_RESOURCE_ATTRIBUTES": res})
    root = next(s for s in run.spans() if s["name"] == C.SPAN_PILOT)
    p = parse_traceparent(tp1)
    assert p is not None and (root["traceId"], root["parentSpanId"]) == (p.trace_id, p.span_id)
    r = run.resources()[0]
    assert (r[C.ENTRY], r[C.CLIENT], r[C.CONDOR_CLUSTER], r[C.CONDOR_PROC]) == ("Entry_A", "fe.main", 42, 1)
    assert C.PARENT_INVALID not in attrs(root["attributes"])


# --- sampling by the monitoring controller (ControllerSampler) ---------------------------------------------


def _controlled(exporter: SpanExporter, client: ControllerClient) -> FactoryTracer:
    return FactoryTracer("OSG", "gfactory_instance", make_provider("OSG", "gfactory_instance", exporter,
                                                                   controller=client))  # fmt: skip


def test_controller_sampled_cluster_carries_the_decision() -> None:
    mem = InMemorySpanExporter()
    with canned_controller(body=answer("scripts", 1.0, rule=17, kind="site")) as ctl:
        ft = _controlled(mem, ControllerClient(ctl.url, "tok"))
        with ft.submit_cluster("Entry_A", "fe.main", 2, frontend="fe", site="Nebraska", security_class="main") as sc:
            tps = sc.traceparents
            sc.submitted(7, 2)
        (asked,) = ctl.requests
    ft.flush()
    spans = mem.get_finished_spans()
    cluster = next(s for s in spans if s.name == C.SPAN_SUBMIT)
    assert len(spans) == 3
    a = dict(cluster.attributes or {})
    assert a[C.CONTROLLER_RULE] == 17 and a[C.CONTROLLER_KIND] == "site" and a[C.CONTROLLER_RESULT] == "answered"
    assert a[C.ENTRY] == "Entry_A" and a[C.SECURITY_CLASS] == "main" and a[C.CONDOR_CLUSTER] == 7  # kept, and later set
    assert all((p := parse_traceparent(tp)) is not None and p.sampled for tp in tps)
    assert asked.query == {"factory": "OSG", "entry": "Entry_A", "site": "Nebraska", "frontend": "fe",
                           "security_class": "main", "pilot": ""}  # fmt: skip
    assert asked.headers["authorization"] == "Bearer tok"


@pytest.mark.parametrize("body", [answer("commands", 0.0), answer("off", 1.0)])
def test_controller_drop_gives_unsampled_traceparents_and_a_silent_pilot(tmp_path: Path, body: bytes) -> None:
    mem = InMemorySpanExporter()
    with canned_controller(body=body) as ctl:
        ft = _controlled(mem, ControllerClient(ctl.url))
        with ft.submit_cluster("Entry_A", "fe.main", 2) as sc:
            env = dict(e.split("=", 1) for e in sc.submit_env())
            sc.submitted(8, 2)
    ft.flush()
    assert mem.get_finished_spans() == ()
    tps = [parse_traceparent(tp) for tp in env[C.ENV_TRACEPARENT_LIST].split(",")]
    assert all(p is not None and not p.sampled for p in tps)  # flags 00 (02: the W3C random-trace-id bit)
    run = run_pilot(  # the script echoes GWMS_PILOT_TRACEPARENT, which an off pilot leaves as it was
        tmp_path, traceparent=env[C.ENV_TRACEPARENT_LIST].split(",")[1], fail=None, env={C.ENV_PILOT_TRACEPARENT: "-"}
    )
    assert run.returncode == 0 and run.spool == b"" and "result off" in run.stdout


def test_controller_sampling_follows_the_trace_id_and_asks_once_per_entry() -> None:
    mem = InMemorySpanExporter()
    with canned_controller(body=answer("phases", 0.5)) as ctl:
        ft = _controlled(mem, ControllerClient(ctl.url))
        kept: dict[str, bool] = {}
        for i in range(40):
            with ft.submit_cluster("Entry_A", "fe.main", 1) as sc:
                kept[sc.traceparent.split("-")[1]] = sc.span.is_recording()
                sc.submitted(100 + i, 1)
        assert len(ctl.requests) == 1
    ft.flush()
    effect = Effect(Verbosity.PHASES, 0.5)
    assert kept == {t: sampled(t, effect) for t in kept}
    assert {f"{s.context.trace_id:032x}" for s in mem.get_finished_spans()} == {t for t, k in kept.items() if k}


def test_dead_controller_falls_back_to_the_default_without_waiting_per_cluster() -> None:
    mem = InMemorySpanExporter()
    with hung() as url:
        ft = _controlled(mem, ControllerClient(url, timeout=0.3))
        t0 = time.monotonic()
        for i in range(50):
            with ft.submit_cluster(f"Entry_{i % 5}", "fe.main", 2) as sc:
                sc.submitted(200 + i, 2)
        took = time.monotonic() - t0
    ft.flush()
    clusters = [s for s in mem.get_finished_spans() if s.name == C.SPAN_SUBMIT]
    assert len(clusters) == 50 and took < 0.3 + 2.0, took  # one timeout, then the cached failure
    assert {(s.attributes or {})[C.CONTROLLER_RESULT] for s in clusters} <= {"timeout", "error"}
    assert all(C.CONTROLLER_RULE not in (s.attributes or {}) for s in clusters)


def test_controller_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("envtok\n")
    mem = InMemorySpanExporter()
    with canned_controller(body=answer("commands", 0.0)) as ctl:
        monkeypatch.setenv("GWMS_OBS_CONTROLLER_URL", ctl.url)
        monkeypatch.setenv("GWMS_OBS_CONTROLLER_TOKEN_FILE", str(tmp_path / "tok"))
        ft = _tracer(mem)
        with ft.submit_cluster("E", "c", 1) as sc:
            sc.submitted(1, 1)
        (asked,) = ctl.requests
    ft.flush()
    assert asked.headers["authorization"] == "Bearer envtok" and mem.get_finished_spans() == ()
    with pytest.raises(ValueError, match="make_provider"):
        FactoryTracer("OSG", provider=make_provider("OSG", exporter=mem), controller=ControllerClient(ctl.url))


def test_no_controller_is_todays_sampler() -> None:
    ft = _tracer(InMemorySpanExporter())
    assert "ControllerSampler" not in ft.provider.sampler.get_description()
