"""OTLP push: the same numbers as /metrics reach an OTLP/HTTP receiver.

The receiver (tests/support/otlp_capture.py) records the requests and this test
decodes them with opentelemetry-proto; the
end-to-end run through our collector distribution lives with the tracing
tests. The exporter side is the real SDK pipeline configured by OTEL_* only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from gwms_obs import catalogue
from gwms_obs.outputs.otlp import start_otlp
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from tests.support.otlp_capture import Capture, otlp_capture
from tests.support.servers import wait_for


def latest(cap: Capture, name: str) -> dict[tuple[tuple[str, str], ...], float] | None:
    """The newest data points of metric ``name`` the receiver got: attributes -> value."""
    with cap.got:
        bodies = [r.body for r in cap.requests if r.path == "/v1/metrics"]
    for body in reversed(bodies):
        req = ExportMetricsServiceRequest()
        req.ParseFromString(body)
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name != name:
                        continue
                    points = m.sum.data_points if m.HasField("sum") else m.gauge.data_points
                    return {
                        tuple(sorted((a.key, a.value.string_value) for a in p.attributes)): (
                            p.as_double if p.HasField("as_double") else float(p.as_int)
                        )
                        for p in points
                    }
    return None


@pytest.fixture
def receiver() -> Iterator[Capture]:
    with otlp_capture() as cap:
        yield cap


def test_otlp_push_carries_the_ledger(receiver: Capture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = receiver.url
    simulate(tmp_path / "f", 120, seed=4)
    ing = Ingest(IngestConfig(factory_dir=str(tmp_path / "f"), settle_seconds=0.0))
    ing.scan()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gwms-obs-test")
    provider = start_otlp(ing)
    try:
        got = wait_for("cpu seconds over OTLP", lambda: latest(receiver, catalogue.CPU_SECONDS.base), 30)
    finally:
        provider.shutdown()
    want = {tuple(sorted(zip(catalogue.CPU_SECONDS.labels, k, strict=True))): v for k, v in ing.ledger.cpu.items()}
    assert got == pytest.approx(want)
    pilots = latest(receiver, catalogue.PILOTS.base)
    assert pilots is not None and sum(pilots.values()) == sum(ing.ledger.pilots.values())
    last = ExportMetricsServiceRequest()
    with receiver.got:
        last.ParseFromString(receiver.requests[-1].body)
    res = last.resource_metrics[0].resource
    attrs = {a.key: a.value.string_value for a in res.attributes}
    assert attrs["service.name"] == "gwms-obs-test"  # the standard variables win
