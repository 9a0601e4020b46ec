"""Span spools from .err files: validation, bounds, forwarding with retries, and the pipeline hook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gwms_obs import catalogue
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.outputs.prometheus import ForwarderCollector
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources.condor_sections import encode
from gwms_obs.sources.glidein_err import parse_err
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.ledger import LEDGER_NAME
from gwms_obs.tracing.outbox import SpoolForwarder, otlp_headers, traces_endpoint
from gwms_obs.tracing.spool import SpoolError, parse_spool
from tests.support.otlp_capture import otlp_capture
from tests.support.trace_ledger import issue

T = "4bf92f3577b34da6a3ce929d0e0e4736"
CLUSTER = 10176598
PARENTS = ["a000000000000001", "a000000000000002", "a000000000000003"]  # the factory's glidein submit spans
FACTORY_RES = {C.FACTORY: "OSG", C.ENTRY: "Entry_A", C.CLIENT: "fe.main"}


def glidein(log_dir: Path, proc: int = 0, cluster: int = CLUSTER) -> str:
    """The .err path of a glidein the factory issued trace T to (the ledger written once per cluster)."""
    if not (log_dir / LEDGER_NAME).exists():
        issue(log_dir, cluster, T, PARENTS, FACTORY_RES)
    return str(log_dir / f"job.{cluster}.{proc}.err")


def span(**kw: Any) -> dict[str, Any]:
    s = {
        "traceId": T,
        "spanId": "00f067aa0ba902b7",
        "parentSpanId": "",
        "name": "glidein",
        "kind": 5,
        "startTimeUnixNano": "1781000000000000000",
        "endTimeUnixNano": "1781000001000000000",
        "attributes": [{"key": "gwms.phase", "value": {"stringValue": "setup"}}],
    }
    s.update(kw)
    return s


def line(*spans: dict[str, Any]) -> bytes:
    doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {}, "spans": list(spans)}]}]}
    return json.dumps(doc).encode() + b"\n"


def test_valid_jsonl_and_single_document() -> None:
    data = line(span()) + line(span(spanId="1111111111111111", parentSpanId="00F067AA0BA902B7"))
    sp = parse_spool(data)
    assert sp.spans == 2 and sp.rejected == 0
    req = sp.request()
    assert len(req["resourceSpans"]) == 1  # same resource and scope: grouped
    assert req["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["parentSpanId"] == "00f067aa0ba902b7"  # normalized
    assert parse_spool(json.dumps(req, indent=2).encode()).spans == 2


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\xff garbage \x1f\x8b", "bad_json"),
        (b"[1, 2, 3]", "bad_shape"),
        (b'{"resourceSpans": "x"}', "bad_shape"),
        (b"", "empty"),
        (line(span(traceId="abc")), "bad_id"),
        (line(span(traceId="0" * 32)), "bad_id"),
        (line(span(spanId="zz" * 8)), "bad_id"),
        (line(span(spanId="00f067aa0ba902b7aa")), "bad_id"),
        (line(span(parentSpanId="123")), "bad_id"),
        (line(span(links=[{"traceId": T, "spanId": "nothex!!nothex!!"}])), "bad_id"),
        (line(span(endTimeUnixNano="1")), "bad_time"),
        (line(span(startTimeUnixNano="-5")), "bad_time"),
        (line(span(kind=9)), "bad_shape"),
        (line(span(name="")), "bad_shape"),
        (line(span(attributes=[{"key": "k", "value": {"evilValue": 1}}])), "bad_shape"),
        (line(span(status={"code": "ERROR"})), "bad_shape"),
    ],
)
def test_garbage_and_bad_ids_are_refused_and_counted(data: bytes, reason: str) -> None:
    errors = ParseErrors()
    with pytest.raises(SpoolError) as e:
        parse_spool(data, "job.1.0.err", errors)
    assert e.value.reason == reason
    assert errors.total("trace_spool") == (0 if reason == "empty" else 1)


def test_bad_spans_dropped_good_ones_kept() -> None:
    errors = ParseErrors()
    data = line(span(), span(spanId="bad")) + b"not json\n" + line(span(spanId="2222222222222222"))
    sp = parse_spool(data, "e", errors)
    assert sp.spans == 2 and sp.rejected == 2
    assert errors.counts == {("trace_spool", "bad_id"): 1, ("trace_spool", "bad_json"): 1}


def test_oversized_and_too_many_spans() -> None:
    with pytest.raises(SpoolError, match="too_large"):
        parse_spool(b" " * 100, max_bytes=99)
    many = b"".join(line(span(spanId=f"{i + 1:016x}")) for i in range(11))
    with pytest.raises(SpoolError, match="too_many_spans"):
        parse_spool(many, max_spans=10)


def test_garbage_spool_does_not_harm_the_rest_of_the_err(tmp_path: Path) -> None:
    """A refused spool is counted under trace_spool; the history and config of the .err are still read."""
    history = b"JobCurrentStartDate = 100\nCompletionDate = 200\nExitCode = 0\n*** Offset = 0\n"
    err_bytes = (
        b"-------- glidein_config in condor_startup.sh ----------\nGLIDEIN_CPUS 8\n" + b"-" * 53 + b"\n"
        + encode("GWMSTraceSpool", b"\x00garbage{{{")
        + encode("StartdHistoryLog", history)
    )  # fmt: skip
    errors = ParseErrors()
    err = parse_err(err_bytes, "job.1.0.err", errors)
    fwd = SpoolForwarder("http://127.0.0.1:9/v1/traces", tmp_path / "outbox", errors)
    assert err.trace_spool is not None
    fwd(err.trace_spool, "job.1.0.err")
    assert errors.counts == {("trace_spool", "bad_json"): 2}  # the line, then the refused spool
    assert fwd.stats.refused == 1 and not fwd.pending()
    assert err.jobs is not None and len(err.jobs) == 1 and err.cpus == 8
    # ... and exported: the forwarder's counters are metrics of the catalogue
    registry = CollectorRegistry()
    registry.register(ForwarderCollector(fwd.stats))
    assert registry.get_sample_value(catalogue.TRACE_SPOOLS.name, {"result": "refused"}) == 1
    assert registry.get_sample_value(catalogue.TRACE_SPOOLS.name, {"result": "accepted"}) == 0


def test_forwarder_retries_then_sends_with_token(tmp_path: Path) -> None:
    a, b = glidein(tmp_path, proc=0), glidein(tmp_path, proc=1)
    with otlp_capture(statuses=[503, 503]) as cap:
        fwd = SpoolForwarder(cap.traces_url, tmp_path / "ob", ParseErrors(), token="tok", retry_min=0.05)
        fwd(line(span(parentSpanId=PARENTS[0])), a)
        fwd(line(span(spanId="3333333333333333", parentSpanId=PARENTS[1])), b)
        fwd.start()
        assert fwd.drain(20)
        fwd.stop()
        reqs = cap.requests
    assert len(reqs) == 4 and fwd.stats.failures == 2 and fwd.stats.sent_spans == 2
    registry = CollectorRegistry()
    registry.register(ForwarderCollector(fwd.stats))
    assert registry.get_sample_value(catalogue.TRACE_SPANS.name, {"result": "sent"}) == 2
    assert registry.get_sample_value(catalogue.TRACE_REQUESTS.name, {"result": "failed"}) == 2
    assert registry.get_sample_value(catalogue.TRACE_REQUESTS.name, {"result": "sent"}) == 2
    assert {r.headers["authorization"] for r in reqs} == {"Bearer tok"}
    sent = [json.loads(r.body) for r in reqs[2:]]
    assert [d["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] for d in sent] == [
        "00f067aa0ba902b7",
        "3333333333333333",
    ]  # in arrival order


def test_forwarder_outbox_survives_restart_and_rejections_are_kept(tmp_path: Path) -> None:
    errors = ParseErrors()
    first = SpoolForwarder("http://127.0.0.1:9/v1/traces", tmp_path / "ob", errors)
    first(line(span(parentSpanId=PARENTS[0])), glidein(tmp_path))  # the exporter stops before sending
    assert len(first.pending()) == 1
    with otlp_capture(statuses=[401]) as cap:
        second = SpoolForwarder(cap.traces_url, tmp_path / "ob", errors)
        assert second.send_once()
        assert len(cap.requests) == 1
    assert not second.pending() and len(list((tmp_path / "ob" / "rejected").iterdir())) == 1
    assert errors.counts[("trace_spool", "collector_rejected")] == 1


def test_otel_environment() -> None:
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}) == "http://t/x"
    assert traces_endpoint({}) is None
    assert otlp_headers({"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20x, a=b"}) == {
        "Authorization": "Bearer x",
        "a": "b",
    }


def test_pipeline_hands_simulated_spools_to_the_sink(tmp_path: Path) -> None:
    """The simulator's spools reach the spools outlet with their .err path and validate; accounting is unchanged."""
    summary = simulate(tmp_path / "f", 200, 3, ground_truth=True)
    got: list[tuple[bytes, str]] = []
    ingest = Ingest(
        IngestConfig(str(tmp_path / "f"), settle_seconds=0), outlets=Outlets(spools=lambda b, p: got.append((b, p)))
    )
    plain = Ingest(IngestConfig(str(tmp_path / "f"), settle_seconds=0))
    res, res_plain = ingest.scan(), plain.scan()
    assert res.pilots == res_plain.pilots and ingest.ledger.to_json() == plain.ledger.to_json()
    errs = sorted(tmp_path.rglob("*.err"))
    assert 0 < len(got) < len(errs)
    assert ingest.errors.total("trace_spool") == 0
    truth = {(p.cluster, p.proc): p for p in summary.ground_truth or []}
    for data, path in got:
        sp = parse_spool(data, path)
        spans = [s for rs in sp.resource_spans for ss in rs["scopeSpans"] for s in ss["spans"]]
        by = {s["name"]: s for s in spans}
        res_attrs = {a["key"]: a["value"] for a in sp.resource_spans[0]["resource"]["attributes"]}
        cluster, proc = int(res_attrs[C.CONDOR_CLUSTER]["intValue"]), int(res_attrs[C.CONDOR_PROC]["intValue"])
        assert path.endswith(f"job.{cluster}.{proc}.err")
        p = truth[(cluster, proc)]
        root = by[C.SPAN_PILOT]
        assert (
            int(root["startTimeUnixNano"]) == p.startup * 10**9
            and int(root["endTimeUnixNano"]) == p.glidein_end * 10**9
        )
        assert all(s["parentSpanId"] == root["spanId"] for s in spans if s["name"] in C.PHASES)
        if p.failed_script:
            assert by[p.failed_script]["status"]["code"] == C.STATUS_ERROR and C.PHASE_MAIN not in by
        else:
            assert by["condor_startup.sh"]["parentSpanId"] == by[C.PHASE_MAIN]["spanId"]
