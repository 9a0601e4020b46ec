"""`gwms-obs export` on a small simulated factory sends one trace per counted pilot through our
collector into Jaeger (both real, on 127.0.0.1), and a restart sends none again.

Needs `make otelcol jaeger` (skipped, with the reason, without them).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gwms_obs.outputs import pilot_traces as P
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from tests.support.servers import export_command, first_scan_done, process
from tests.support.trace_stack import Stack, stack
from tools.polling import http_get
from tools.polling import poll as wait_for
from tools.tracing_backends import free_port

PILOTS = 40


def _export_once(factory: Path, st: Stack, checkpoint: Path, log: Path) -> None:
    token = st.work / "token"
    token.write_text(st.col.token)
    cmd = [
        *(sys.executable, "-m", "gwms_obs.cli", "export", "--once", "--factory-dir", str(factory)),
        *("--checkpoint", str(checkpoint), "--settle-seconds", "0", "--lost-after-seconds", "0"),
        *("--traces-endpoint", st.col.traces_url, "--traces-token-file", str(token)),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180, env=env)
    log.write_text(r.stdout + r.stderr)
    assert r.returncode == 0, r.stderr[-3000:]


def _pilots_counted(checkpoint: Path) -> set[str]:
    return set(json.loads(checkpoint.read_text())["seen"])


def _jaeger(st: Stack, since: float) -> list[dict[str, Any]]:
    return J.search(st.jaeger.query, start=since, end=time.time() + 86400, limit=100_000)


def _settled(st: Stack, since: float, want: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Jaeger's traces once it holds ``want`` of them and their span count stopped growing (bounded)."""
    deadline = time.monotonic() + timeout
    last = -1
    while True:
        traces = _jaeger(st, since)
        spans = sum(len(t["spans"]) for t in traces)
        if len(traces) >= want and spans == last:
            return traces
        last = spans
        if time.monotonic() > deadline:
            return traces
        time.sleep(1.0)


def _keys(traces: list[dict[str, Any]]) -> Counter[str]:
    """entry/cluster.proc of each trace's pilot, from its resource (the factory's names)."""
    out: Counter[str] = Counter()
    for t in traces:
        roots = [s for s in t["spans"] if s["operationName"] == C.SPAN_PILOT]
        assert len(roots) == 1, [s["operationName"] for s in t["spans"]]
        tags = {x["key"]: x["value"] for x in t["processes"][roots[0]["processID"]]["tags"]}
        out[f"{tags[C.ENTRY]}/{tags[C.CONDOR_CLUSTER]}.{tags[C.CONDOR_PROC]}"] += 1
    return out


def _telemetry(st: Stack, name: str, label: str) -> float:
    """The collector's own counter ``name`` summed over the series whose labels hold ``label``."""
    with urllib.request.urlopen(st.col.telemetry, timeout=5) as r:
        text = r.read().decode()
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name) and label in ln)


@contextlib.contextmanager
def _daemon(factory: Path, st: Stack, checkpoint: Path, log: Path) -> Iterator[str]:
    """`gwms-obs export` as a daemon (a scan every 2 s) sending to the stack; yields its /metrics URL."""
    token = st.work / "token"
    token.write_text(st.col.token)
    port = free_port()
    cmd = [
        *export_command(factory, port, checkpoint, interval=2, settle=0),
        *("--lost-after-seconds", "0", "--traces-endpoint", st.col.traces_url, "--traces-token-file", str(token)),
    ]
    with process(cmd, log) as p:
        url = f"http://127.0.0.1:{port}/metrics"

        def scanned() -> bool:
            if p.poll() is not None:
                raise AssertionError(f"export exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            return first_scan_done(http_get(url))

        wait_for("the exporter's first scan", scanned, 120, step=0.5)
        yield url
    assert p.returncode == 0, log.read_text()[-3000:]


def test_the_daemon_sends_one_trace_per_counted_pilot_and_a_restart_none_again(tmp_path: Path) -> None:
    now = time.time()
    since = now - 10 * 86400
    factory = tmp_path / "factory"
    simulate(factory, PILOTS, seed=5, start=now - 4 * 86400, span_hours=24)
    with stack(tmp_path) as st:
        ck = tmp_path / "state" / "checkpoint.json"
        ck.parent.mkdir()
        with _daemon(factory, st, ck, tmp_path / "export1.log"):
            counted = _pilots_counted(ck)
            assert len(counted) > PILOTS // 2
            traces = _settled(st, since, len(counted))
        assert _pilots_counted(ck) == counted  # nothing more to count in a finished tree
        keys = _keys(traces)
        assert set(keys) == counted and set(keys.values()) == {1}  # exactly one trace per counted pilot
        spans = {(t["traceID"], s["spanID"]) for t in traces for s in t["spans"]}
        assert len(spans) == sum(len(t["spans"]) for t in traces)  # no span twice
        shapes = Counter(s["operationName"] for t in traces for s in t["spans"])
        assert shapes[P.SPAN_RUNNING] == len(counted) and shapes[P.SPAN_JOB] > 0 and shapes[P.SPAN_VALIDATION] > 0
        received = _telemetry(st, "otelcol_receiver_accepted_spans", "otlp")
        assert received == len(spans)

        # Restarted on its checkpoint: it scans (twice, at least) and counts nothing again, so it sends nothing.
        with _daemon(factory, st, ck, tmp_path / "export2.log") as url:

            def last_scan() -> float:
                lines = http_get(url).decode().splitlines()
                return float(
                    next(ln for ln in lines if ln.startswith("gwms_obs_last_scan_timestamp_seconds ")).split()[-1]
                )

            first = last_scan()
            wait_for("a second scan", lambda: last_scan() > first, 30, step=0.5)
        assert _pilots_counted(ck) == counted
        assert _telemetry(st, "otelcol_receiver_accepted_spans", "otlp") == received
        again = _jaeger(st, since)
        assert {(t["traceID"], s["spanID"]) for t in again for s in t["spans"]} == spans


def _sent_to_jaeger(st: Stack) -> float:
    """Spans the collector's exporters have handed to Jaeger (its own telemetry)."""
    return _telemetry(st, "otelcol_exporter_sent_spans", "jaeger")


def test_a_rescan_from_nothing_sends_the_same_spans_and_jaeger_keeps_each_once(tmp_path: Path) -> None:
    """A lost checkpoint: every pilot is counted and sent again, with the same ids, so Jaeger
    (which stores a span identical to one it has once) shows the same spans, none twice."""
    now = time.time()
    since = now - 10 * 86400
    factory = tmp_path / "factory"
    simulate(factory, 10, seed=6, start=now - 4 * 86400, span_hours=24)
    with stack(tmp_path) as st:
        ck = tmp_path / "state" / "checkpoint.json"
        ck.parent.mkdir()
        _export_once(factory, st, ck, tmp_path / "export1.log")
        counted = _pilots_counted(ck)
        traces = _settled(st, since, len(counted))
        ids = [(t["traceID"], s["spanID"]) for t in traces for s in t["spans"]]
        assert len(_keys(traces)) == len(counted) > 0 and len(set(ids)) == len(ids)
        ck.unlink()
        _export_once(factory, st, ck, tmp_path / "export2.log")
        assert _pilots_counted(ck) == counted
        # The second copy has reached Jaeger once the collector says it handed over twice as many.
        deadline = time.monotonic() + 60
        while _sent_to_jaeger(st) < 2 * len(ids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _sent_to_jaeger(st) == 2 * len(ids)
        again = _jaeger(st, since)
        assert sorted((t["traceID"], s["spanID"]) for t in again for s in t["spans"]) == sorted(ids)
