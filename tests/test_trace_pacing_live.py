"""The span forwarder's pacing, against our real collector in front of real Jaeger (127.0.0.1).

A backfill queues far more spans than the rate allows: the collector must see them arrive
no faster than ``spans_per_second`` (one second's burst aside), all of them, none dropped,
while queueing them stays a file write.

Needs `make otelcol jaeger` (skipped, with the reason, without them).
"""

from __future__ import annotations

import secrets
import time
import urllib.request
from pathlib import Path
from typing import Any

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from gwms_obs.tracing.outbox import SpoolForwarder
from tests.support.trace_stack import Stack, stack

RATE = 100.0  # spans/s under test: low enough that 1,200 spans take ~11 s
REQUESTS = 3
RESOURCES = 20  # per request, 20 spans each: 400 spans a request, cut into pieces of 100
SPANS = 20


def _request(now: float) -> dict[str, Any]:
    rss = []
    for _ in range(RESOURCES):
        tid = secrets.token_hex(16)
        spans = [
            {
                "traceId": tid,
                "spanId": secrets.token_hex(8),
                "name": "paced",
                "kind": 1,
                "startTimeUnixNano": str(int((now - 60 + i) * 1e9)),
                "endTimeUnixNano": str(int((now - 59 + i) * 1e9)),
            }
            for i in range(SPANS)
        ]
        attrs = [{"key": C.SERVICE_NAME, "value": {"stringValue": "gwms-pacing-test"}}]
        rss.append({"resource": {"attributes": attrs}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]})
    return {"resourceSpans": rss}


def _accepted(st: Stack) -> float:
    with urllib.request.urlopen(st.col.telemetry, timeout=5) as r:
        text = r.read().decode()
    name = "otelcol_receiver_accepted_spans"
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name) and "otlp" in ln)


def test_a_backlog_reaches_the_collector_at_the_paced_rate_and_nothing_is_dropped(tmp_path: Path) -> None:
    total = REQUESTS * RESOURCES * SPANS
    now = time.time()
    with stack(tmp_path) as st:
        fwd = SpoolForwarder(
            st.col.traces_url,
            tmp_path / "outbox",
            ParseErrors(),
            token=st.col.token,
            require_issued=False,
            spans_per_second=RATE,
        )
        fwd.start()
        try:
            queued: list[float] = []
            samples: list[tuple[float, float]] = [(time.monotonic(), _accepted(st))]
            for _ in range(REQUESTS):
                t = time.monotonic()
                assert fwd.enqueue(_request(now), RESOURCES * SPANS, "pacing test")
                queued.append(time.monotonic() - t)
                samples.append((time.monotonic(), _accepted(st)))
            deadline = time.monotonic() + 4 * total / RATE
            while samples[-1][1] < total and time.monotonic() < deadline:
                time.sleep(0.2)
                samples.append((time.monotonic(), _accepted(st)))
            assert fwd.drain(10.0)
        finally:
            fwd.stop()
        assert samples[-1][1] == total, samples[-5:]
        # Queueing is a file write, whatever the sender is waiting for.
        assert max(queued) < 0.25, queued
        # In any window, at most the rate's share plus one bucket (and one piece in flight at its edge).
        for i, (ti, ci) in enumerate(samples):
            for tj, cj in samples[i + 1 :]:
                assert cj - ci <= RATE * (tj - ti) + 2 * fwd.burst, (tj - ti, cj - ci)
        first = next(t for t, c in samples if c > 0)
        last = next(t for t, c in samples if c >= total)
        took = last - samples[0][0]
        print(
            f"\n{total} spans in {took:.1f} s: {total / took:.1f} spans/s (limit {RATE:.0f}); "
            f"first at {first - samples[0][0]:.2f} s"
        )
        assert took >= (total - 2 * fwd.burst) / RATE
        assert fwd.stats.sent_spans == total and fwd.stats.dropped_spans == 0 and fwd.stats.failures == 0
        assert fwd.stats.sent_requests == total // fwd.burst  # the 400-span requests went in 100-span pieces
        assert not fwd.pending()

        # Jaeger holds every one of them (the collector forwards them on its own schedule: bounded wait).
        def in_jaeger() -> int:
            traces = J.search(st.jaeger.query, services=["gwms-pacing-test"], start=now - 3600, limit=10_000)
            return sum(len(t["spans"]) for t in traces)

        deadline = time.monotonic() + 60
        while in_jaeger() < total and time.monotonic() < deadline:
            time.sleep(0.5)
        assert in_jaeger() == total
