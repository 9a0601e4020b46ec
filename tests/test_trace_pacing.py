"""The span forwarder's pacing without a collector: pieces, a send cut short, the rate bound.

The real collector's view is tests/test_trace_pacing_live.py.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gwms_obs import catalogue
from gwms_obs.outputs.prometheus import ForwarderCollector
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing.outbox import SpoolForwarder, _name_spans


def _request(resources: int, spans: int) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "r", "value": {"intValue": str(r)}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "t"},
                        "spans": [
                            {
                                "traceId": f"{r + 1:032x}",
                                "spanId": f"{r * 1000 + i + 1:016x}",
                                "name": "s",
                                "startTimeUnixNano": "1",
                                "endTimeUnixNano": "2",
                            }
                            for i in range(spans)
                        ],
                    }
                ],
            }
            for r in range(resources)
        ]
    }


class _Collector:
    """Answers 200, or ``fail`` (an HTTP status) once ``ok_before_fail`` posts have been taken."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail: int | None = None
        self.ok_before_fail = 0
        self.lock = threading.Lock()


@contextlib.contextmanager
def _collector() -> Iterator[tuple[str, _Collector]]:
    col = _Collector()

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with col.lock:
                if col.fail is not None and len(col.bodies) >= col.ok_before_fail:
                    code = col.fail
                else:
                    col.bodies.append(json.loads(body))
                    code = 200
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *_: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1/traces", col
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def _ids(bodies: list[dict[str, Any]]) -> list[str]:
    return [s["spanId"] for b in bodies for rs in b["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def test_a_request_larger_than_a_second_goes_in_pieces_each_naming_its_resource(tmp_path: Path) -> None:
    with _collector() as (url, col):
        fwd = SpoolForwarder(url, tmp_path / "o", ParseErrors(), require_issued=False, spans_per_second=1000)
        assert fwd.enqueue(_request(7, 300), 2100, "t")  # 2,100 spans: pieces of 1,000
        assert fwd.send_once()
    assert [len(_ids([b])) for b in col.bodies] == [1000, 1000, 100]
    want = _ids([_request(7, 300)])
    assert _ids(col.bodies) == want  # each once, in order
    # a resource cut across pieces keeps its attributes in each
    r3 = [
        rs["resource"]
        for b in col.bodies
        for rs in b["resourceSpans"]
        if rs["resource"]["attributes"][0]["value"]["intValue"] == "3"
    ]
    assert len(r3) == 2
    assert fwd.stats.sent_spans == 2100 and fwd.stats.sent_requests == 3
    # The wait for 1,100 spans beyond the first second's bucket, served on /metrics
    paced = {m.name: m for m in ForwarderCollector(fwd.stats).collect()}[catalogue.TRACE_PACED.base]
    assert 0.9 <= paced.samples[0].value <= 5.0


def test_an_outage_in_the_middle_of_a_file_keeps_only_what_was_not_sent(tmp_path: Path) -> None:
    with _collector() as (url, col):
        fwd = SpoolForwarder(url, tmp_path / "o", ParseErrors(), require_issued=False, spans_per_second=1000)
        assert fwd.enqueue(_request(10, 300), 3000, "t")
        col.fail, col.ok_before_fail = 503, 1
        assert not fwd.send_once()  # the second piece hit the outage
        (left,) = fwd.pending()
        assert _name_spans(left.name) == 2000 and fwd.outbox_bytes() == left.stat().st_size
        col.fail = None
        assert fwd.send_once()
    assert _ids(col.bodies) == _ids([_request(10, 300)])  # every span once: none lost, none sent twice
    assert not fwd.pending() and fwd.stats.failures == 1 and fwd.stats.dropped_spans == 0


def test_unpaced_sends_a_file_whole(tmp_path: Path) -> None:
    with _collector() as (url, col):
        fwd = SpoolForwarder(url, tmp_path / "o", ParseErrors(), require_issued=False, spans_per_second=0)
        assert fwd.enqueue(_request(10, 300), 3000, "t")
        assert fwd.send_once()
    assert [len(_ids([b])) for b in col.bodies] == [3000]


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_rate_that_is_not_a_rate_is_refused(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="spans_per_second"):
        SpoolForwarder("http://127.0.0.1:1/", tmp_path / "o", ParseErrors(), spans_per_second=bad)
