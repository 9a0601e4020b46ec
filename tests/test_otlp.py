"""OTLP push: the same numbers as /metrics reach an OTLP/HTTP receiver.

The receiver here decodes the protobuf requests with opentelemetry-proto; the
end-to-end run through our collector distribution lives with the tracing
tests. The exporter side is the real SDK pipeline configured by OTEL_* only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from gwms_obs import registry as R
from gwms_obs.outputs.otlp import start_otlp
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from tests.support.servers import wait_for


class Receiver:
    def __init__(self) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        self.lock = threading.Lock()

    def latest(self, name: str) -> dict[tuple[tuple[str, str], ...], float] | None:
        """The newest data points of metric ``name``: attributes -> value."""
        with self.lock:
            reqs = list(self.requests)
        for req in reversed(reqs):
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
def receiver() -> Iterator[tuple[str, Receiver]]:
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            req = ExportMetricsServiceRequest()
            req.ParseFromString(body)
            with rec.lock:
                rec.requests.append(req)
            out = ExportMetricsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", rec
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_otlp_push_carries_the_ledger(
    receiver: tuple[str, Receiver], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, rec = receiver
    simulate(tmp_path / "f", 120, seed=4)
    ing = Ingest(IngestConfig(factory_dir=str(tmp_path / "f"), settle_seconds=0.0))
    ing.scan()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gwms-obs-test")
    provider = start_otlp(ing)
    try:
        got = wait_for("cpu seconds over OTLP", lambda: rec.latest(R.CPU_SECONDS.base), 30)
    finally:
        provider.shutdown()
    want = {tuple(sorted(zip(R.CPU_SECONDS.labels, k, strict=True))): v for k, v in ing.ledger.cpu.items()}
    assert got == pytest.approx(want)
    pilots = rec.latest(R.PILOTS.base)
    assert pilots is not None and sum(pilots.values()) == sum(ing.ledger.pilots.values())
    with rec.lock:
        res = rec.requests[-1].resource_metrics[0].resource
    attrs = {a.key: a.value.string_value for a in res.attributes}
    assert attrs["service.name"] == "gwms-obs-test"  # the standard variables win
