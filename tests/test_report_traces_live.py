"""`gwms-obs report --traces --since --until`: a past window's pilots sent as traces, one-shot,
through our collector into Jaeger (both real, on 127.0.0.1), with the ids export gives them.

Needs `make otelcol jaeger` (skipped, with the reason, without them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from gwms_obs.outputs import pilot_traces as P
from gwms_obs.outputs.pilot_traces import pilot_trace_id
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from tests.support.trace_stack import stack
from tests.test_pilot_traces_live import _keys, _settled, _telemetry
from tools.tracing_backends import free_port

PILOTS = 60
FACTORY = "report-test-factory"


def _report(factory: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(factory), *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, env=env)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_past_windows_pilots_are_sent_once_with_exports_ids(tmp_path: Path) -> None:
    now = time.time()
    start = now - 6 * 86400
    factory = tmp_path / "factory"
    simulate(factory, PILOTS, seed=9, start=start, span_hours=48)
    # The window: the second day of the factory's pilots, by their end.
    since, until = start + 86400, start + 2 * 86400
    window = ("--since", _iso(since), "--until", _iso(until), "--factory-name", FACTORY)
    listed = _report(factory, *window, "--format", "json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    outcomes = ("validation_failed", "no_match", "ran_jobs", "lost")
    want_n = sum(row[o] for row in json.loads(listed.stdout)["pilots"] for o in outcomes)
    assert 0 < want_n < PILOTS  # the window holds some pilots, not all

    with stack(tmp_path) as st:
        token = st.work / "token"
        token.write_text(st.col.token)
        outbox = tmp_path / "outbox"
        send = (
            "--traces",
            *("--traces-endpoint", st.col.traces_url, "--traces-token-file", str(token)),
            *("--traces-outbox", str(outbox), "--format", "json"),
        )
        r = _report(factory, *window, *send)
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout) == json.loads(listed.stdout)  # the report itself is unchanged by --traces
        traces = _settled(st, start - 86400, want_n)
        keys = _keys(traces)
        assert len(keys) == want_n and set(keys.values()) == {1}  # one trace per pilot of the window
        ends = [max(int(s["startTime"]) + int(s["duration"]) for s in t["spans"]) / 1e6 for t in traces]
        assert all(since - 600 <= e <= until + 600 for e in ends)
        # The ids are export's: the pilot's identity, its start (the running span's) and the factory's name.
        for t in traces:
            tags = {x["key"]: x["value"] for p in t["processes"].values() for x in p["tags"]}
            run = next(s for s in t["spans"] if s["operationName"] == P.SPAN_RUNNING)
            cluster, proc = int(tags[C.CONDOR_CLUSTER]), int(tags[C.CONDOR_PROC])
            tid = pilot_trace_id(FACTORY, tags[C.ENTRY], cluster, proc, int(run["startTime"]) / 1e6)
            assert tid.lstrip("0") == t["traceID"].lstrip("0")  # Jaeger drops a trace id's leading zeros
        received = _telemetry(st, "otelcol_receiver_accepted_spans", "otlp")
        assert received == sum(len(t["spans"]) for t in traces)
        assert not list(outbox.glob("*.json"))  # all taken by the collector

        # Sent again: the same spans, so Jaeger holds each once.
        again = _report(factory, *window, *send)
        assert again.returncode == 0, again.stderr[-3000:]
        after = _settled(st, start - 86400, want_n)
        spans = {(t["traceID"], s["spanID"]) for t in after for s in t["spans"]}
        assert len(spans) == sum(len(t["spans"]) for t in after) == received


def test_no_collector_keeps_the_traces_and_says_where(tmp_path: Path) -> None:
    factory = tmp_path / "factory"
    simulate(factory, 20, seed=3)
    outbox = tmp_path / "outbox"
    dead = f"http://127.0.0.1:{free_port()}/v1/traces"
    r = _report(factory, "--traces", "--traces-endpoint", dead, "--traces-outbox", str(outbox),
                "--traces-drain-seconds", "2")  # fmt: skip
    assert r.returncode == 1, r.stderr[-2000:]
    assert "not sent" in r.stderr and str(outbox) in r.stderr
    assert list(outbox.glob("gwms-spool-*.json"))  # kept for the next run


def test_traces_without_an_endpoint_is_refused(tmp_path: Path) -> None:
    factory = tmp_path / "factory"
    simulate(factory, 5, seed=1)
    r = _report(factory, "--traces")
    assert r.returncode == 2 and "--traces needs --traces-endpoint" in r.stderr
    bad = _report(factory, "--traces", "--traces-endpoint", "http://127.0.0.1:9/v1/traces",
                  "--trace-spans-per-second", "-3")  # fmt: skip
    assert bad.returncode == 2
