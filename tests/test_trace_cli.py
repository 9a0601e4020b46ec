"""`gwms-obs traces` against a canned Jaeger API answer, and `gwms-obs export` forwarding spools."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.cli import main
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import jaeger as J
from tests.support.otlp_capture import otlp_capture
from tests.support.servers import free_port
from tests.support.trace_ledger import issue_from_spools

TRACE = "6b934decf61abafeb052bb65697cf4f1"


def _jaeger_trace() -> dict[str, Any]:
    """What Jaeger's /api/traces returns for a pilot: spans with processID, processes with resource tags."""

    def sp(sid: str, parent: str | None, name: str, start: int, dur: int, tags: list[dict[str, Any]]) -> dict[str, Any]:
        refs = [{"refType": "CHILD_OF", "traceID": TRACE, "spanID": parent}] if parent else []
        return {"traceID": TRACE, "spanID": sid, "operationName": name, "references": refs,
                "startTime": start, "duration": dur, "tags": tags, "processID": "p1"}  # fmt: skip

    return {
        "traceID": TRACE,
        "spans": [
            sp(
                "36014dffdb54eae3",
                "53d43bdbc6b9d56b",
                "setup",
                1660327275000000,
                1171248,
                [
                    {"key": "gwms.phase", "type": "string", "value": "setup"},
                    {"key": "otel.status_code", "type": "string", "value": "ERROR"},
                ],
            ),
            sp("53d43bdbc6b9d56b", None, "glidein", 1660327274500000, 9000000, []),
        ],
        "processes": {
            "p1": {
                "serviceName": "glidein",
                "tags": [
                    {"key": "gwms.entry", "type": "string", "value": "CMSHTPC_T2_US_Nebraska_red"},
                    {"key": "gwms.client", "type": "string", "value": "CMSG-v1_0.main-token"},
                ],
            }
        },
    }


@contextlib.contextmanager
def fake_jaeger() -> Iterator[tuple[str, list[dict[str, list[str]]]]]:
    queries: list[dict[str, list[str]]] = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            u = urllib.parse.urlparse(self.path)
            queries.append(urllib.parse.parse_qs(u.query) | {"_path": [u.path]})
            body = json.dumps({"data": [_jaeger_trace()]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", queries
    finally:
        srv.shutdown()
        srv.server_close()


def test_traces_table_and_query(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_jaeger() as (url, queries):
        rc = main(["traces", "--jaeger", url, "--entry", "CMSHTPC_T2_US_Nebraska_red", "--client",
                   "CMSG-v1_0.main-token", "--since", "2022-08-12", "--until", "2022-08-13"])  # fmt: skip
    assert rc == 0
    (q,) = queries
    assert q["_path"] == ["/api/traces"] and q["service"] == ["glidein"]
    assert json.loads(q["tags"][0]) == {
        "gwms.entry": "CMSHTPC_T2_US_Nebraska_red",
        "gwms.client": "CMSG-v1_0.main-token",
    }
    assert q["start"] == ["1660262400000000"] and q["end"] == ["1660348800000000"]
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["trace:span", "parent", "entry", "client", "start", "(UTC)", "duration", "(µs)", "status",
                              "name"]  # fmt: skip
    assert out[1].split() == [f"{TRACE}:53d43bdbc6b9d56b", "CMSHTPC_T2_US_Nebraska_red", "CMSG-v1_0.main-token",
                              "2022-08-12", "18:01:14.500", "9000000", "UNSET", "glidein"]  # fmt: skip
    assert out[2].split()[:2] == [f"{TRACE}:36014dffdb54eae3", "53d43bdbc6b9d56b"]
    assert out[2].split()[-3:] == ["1171248", "ERROR", "setup"]


def test_traces_csv_by_trace_id_and_filters(tmp_path: Path) -> None:
    with fake_jaeger() as (url, queries):
        assert (
            main(["traces", "--jaeger", url, "--trace-id", TRACE, "--format", "csv", "-o", str(tmp_path / "t.csv")])
            == 0
        )
        # The entry filter is applied to whole traces here too, whatever the storage searched.
        assert J.search(url, entry="another_entry") == []
    assert queries[0]["_path"] == [f"/api/traces/{TRACE}"]
    rows = list(csv.reader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert rows[0] == list(J.COLUMNS) and len(rows) == 3 and rows[2][6] == "ERROR"


def test_traces_parquet_without_pyarrow_is_a_clear_error(tmp_path: Path) -> None:
    try:
        import pyarrow  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pyarrow is installed")
    with fake_jaeger() as (url, _):
        assert main(["traces", "--jaeger", url, "--format", "parquet", "-o", str(tmp_path / "t.parquet")]) == 1


def test_traces_unreachable_jaeger() -> None:
    assert main(["traces", "--jaeger", "http://127.0.0.1:9"]) == 1


def test_export_forwards_spools_from_err_files(tmp_path: Path) -> None:
    """`gwms-obs export --once --traces-endpoint` sends every spool of the simulated .err files."""
    simulate(tmp_path / "f", 60, 5)
    issued = issue_from_spools(tmp_path / "f")  # as the factory's FactoryTracer would have
    with otlp_capture() as cap:
        rc = main(["export", "--factory-dir", str(tmp_path / "f"), "--listen", f"127.0.0.1:{free_port()}", "--once",
                   "--settle-seconds", "0", "--traces-endpoint", cap.traces_url,
                   "--traces-outbox", str(tmp_path / "ob")])  # fmt: skip
        # export also sends a trace per counted pilot from the factory's files (outputs/pilot_traces.py)
        reqs = [r for r in cap.requests if b'"gwms_obs.pilot_traces"' not in r.body]
    assert rc == 0
    spools = sum(1 for p in tmp_path.rglob("*.err") if b"GWMSTraceSpool" in p.read_bytes())
    assert len(reqs) == spools == issued > 0
    assert not [p for p in (tmp_path / "ob").iterdir() if p.suffix == ".json"]
