"""Collector throughput: spans/s through our pipeline, with no drops.

    make bench-collector            # or: python benchmarks/collector.py [--spans 300000] [--record]

Real processes on 127.0.0.1, configs rendered from the Ansible roles exactly
as the tests do: our collector (OTLP/HTTP with the bearer token ->
memory_limiter -> redaction -> batch -> OTLP/gRPC to Jaeger through the
persistent file_storage queue, and -> spanmetrics -> remote write into a real
Prometheus) and Jaeger v2 (memory storage). Pilot-like traces (a root and five
phase spans, entry/client/site/phase attributes) are encoded as OTLP protobuf
before the clock starts and POSTed by --workers keep-alive connections.

Figures: the rate the collector accepted them (client side, all 200), and the
end-to-end rate until Jaeger's own receiver had counted every span. "No drops"
is checked from both processes' otelcol_* counters (accepted = sent = Jaeger
accepted = spans sent; refused, send-failed and enqueue-failed all 0), and a
sample of traces is read back from Jaeger's query API complete.

--record writes benchmarks/results/collector.md.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status  # noqa: E402

from gwms_obs import catalogue  # noqa: E402
from gwms_obs.tracing import conventions as C  # noqa: E402
from tests.support.servers import prometheus  # noqa: E402
from tools import render, tracing_backends  # noqa: E402

SPANS_PER_TRACE = 1 + len(C.PHASES)


def _kv(k: str, v: str) -> KeyValue:
    return KeyValue(key=k, value=AnyValue(string_value=v))


def encode_requests(n_spans: int, per_request: int, seed: int = 1) -> tuple[list[bytes], list[bytes]]:
    """OTLP protobuf requests of whole pilot traces; also returns every trace id."""
    rnd = random.Random(seed)
    traces_per_req = max(1, per_request // SPANS_PER_TRACE)
    n_traces = n_spans // SPANS_PER_TRACE
    bodies: list[bytes] = []
    trace_ids: list[bytes] = []
    now = time.time_ns() - 3600 * 10**9
    made = 0
    while made < n_traces:
        entry = f"ENTRY_bench_{rnd.randrange(20)}"
        rs = ResourceSpans()
        rs.resource.attributes.extend(
            [
                _kv(C.SERVICE_NAME, C.SERVICE_PILOT),
                _kv(C.ENTRY, entry),
                _kv(C.CLIENT, f"frontend_{rnd.randrange(4)}.main"),
                _kv(C.SITE, f"Site_{rnd.randrange(10)}"),
            ]
        )
        ss = ScopeSpans()
        ss.scope.name = "gwms-trace.sh"
        for _ in range(min(traces_per_req, n_traces - made)):
            tid = rnd.randbytes(16)
            trace_ids.append(tid)
            root = rnd.randbytes(8)
            t = now
            phases = []
            for ph in C.PHASES:
                d = rnd.randrange(10**8, 6 * 10**11)
                phases.append(
                    Span(
                        trace_id=tid,
                        span_id=rnd.randbytes(8),
                        parent_span_id=root,
                        name=ph,
                        kind=Span.SPAN_KIND_INTERNAL,
                        start_time_unix_nano=t,
                        end_time_unix_nano=t + d,
                        attributes=[_kv(C.PHASE, ph), _kv(C.SCRIPT, f"{ph}/check.sh")],
                        status=Status(code=Status.STATUS_CODE_OK),
                    )
                )
                t += d
            ss.spans.append(
                Span(
                    trace_id=tid,
                    span_id=root,
                    name=C.SPAN_PILOT,
                    kind=Span.SPAN_KIND_CONSUMER,
                    start_time_unix_nano=now,
                    end_time_unix_nano=t,
                    attributes=[_kv(C.GLIDEIN_UUID, rnd.randbytes(8).hex())],
                )
            )
            ss.spans.extend(phases)
            made += 1
        rs.scope_spans.append(ss)
        bodies.append(ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString())
    return bodies, trace_ids


def send_all(url: str, token: str, bodies: list[bytes], workers: int) -> tuple[float, dict[int, int]]:
    """POST every body over ``workers`` keep-alive connections; (seconds, {status: count})."""
    host_port = url.removeprefix("http://").split("/", 1)[0]
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    nxt = iter(range(len(bodies)))
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"}

    def worker() -> None:
        conn = http.client.HTTPConnection(host_port, timeout=30)
        local: dict[int, int] = {}
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                break
            conn.request("POST", "/v1/traces", body=bodies[i], headers=headers)
            r = conn.getresponse()
            r.read()
            local[r.status] = local.get(r.status, 0) + 1
        conn.close()
        with lock:
            for k, v in local.items():
                statuses[k] = statuses.get(k, 0) + v

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t0, statuses


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(n_spans: int, per_request: int, workers: int) -> dict[str, Any]:
    otelcol, jaeger = tracing_backends.find_binary("otelcol"), tracing_backends.find_binary("jaeger")
    t = time.perf_counter()
    bodies, trace_ids = encode_requests(n_spans, per_request)
    n = len(trace_ids) * SPANS_PER_TRACE
    print(f"encoded {n} spans in {len(bodies)} requests in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gwms-bench-collector-") as tmpd:
        tmp = Path(tmpd)
        jcfg = tracing_backends.jaeger_config(tmp / "jaeger", jaeger_memory_max_traces=len(trace_ids) + 10)
        ccfg = tracing_backends.collector_config(
            tmp / "otelcol", jaeger_otlp_grpc=jcfg.otlp_grpc, remote_write_url="http://x/"
        )
        prom_cfg = (
            "global: {scrape_interval: 5s}\nscrape_configs:\n"
            f"  - job_name: otelcol\n    static_configs: [{{targets: ['{ccfg.telemetry_target}']}}]\n"
        )
        with prometheus(tmp / "prom", prom_cfg, ["--web.enable-remote-write-receiver"]) as prom:
            values = {
                **ccfg.values,
                "otel_collector_prometheus_remote_write_url": f"{prom}/api/v1/write",
                "otel_collector_memory_limit_mib": 2048,
                "otel_collector_memory_spike_mib": 512,
            }
            render.write("otel_collector", "config.yaml.j2", ccfg.path, **values)
            with (
                tracing_backends.run(jaeger, jcfg.path, jcfg.health, tmp / "jaeger.log") as jp,
                tracing_backends.run(otelcol, ccfg.path, ccfg.health, tmp / "otelcol.log") as cp,
            ):
                c_cpu0, j_cpu0 = cpu_seconds(cp.pid), cpu_seconds(jp.pid)
                t0 = time.perf_counter()
                send_s, statuses = send_all(ccfg.traces_url, ccfg.token, bodies, workers)

                def jaeger_accepted() -> float:
                    return tracing_backends.metric_sum(
                        tracing_backends.scrape(jcfg.telemetry), catalogue.OTELCOL_ACCEPTED_SPANS
                    )

                tracing_backends.poll("every span in Jaeger", lambda: jaeger_accepted() >= n, timeout=600, step=0.05)
                e2e_s = time.perf_counter() - t0
                c_cpu, j_cpu = cpu_seconds(cp.pid) - c_cpu0, cpu_seconds(jp.pid) - j_cpu0
                cm = tracing_backends.scrape(ccfg.telemetry)
                sample = random.Random(2).sample(trace_ids, 20)
                complete = sum(
                    len(tracing_backends.jaeger_trace(jcfg.query, tid.hex())) == SPANS_PER_TRACE for tid in sample
                )
                return {
                    "spans": n,
                    "requests": len(bodies),
                    "spans_per_request": per_request,
                    "workers": workers,
                    "statuses": statuses,
                    "send_s": send_s,
                    "e2e_s": e2e_s,
                    "accept_rate": n / send_s,
                    "e2e_rate": n / e2e_s,
                    "collector_cpu_s": c_cpu,
                    "jaeger_cpu_s": j_cpu,
                    "collector_accepted": tracing_backends.metric_sum(cm, catalogue.OTELCOL_ACCEPTED_SPANS),
                    "collector_refused": tracing_backends.metric_sum(cm, catalogue.OTELCOL_REFUSED_SPANS),
                    "collector_sent_jaeger": tracing_backends.metric_sum(
                        cm, catalogue.OTELCOL_SENT_SPANS, exporter=catalogue.JAEGER_EXPORTER
                    ),
                    "collector_send_failed": tracing_backends.metric_sum(cm, catalogue.OTELCOL_SEND_FAILED_SPANS),
                    "collector_enqueue_failed": tracing_backends.metric_sum(cm, catalogue.OTELCOL_ENQUEUE_FAILED_SPANS),
                    "jaeger_accepted": jaeger_accepted(),
                    "sample_complete": f"{complete}/{len(sample)}",
                    "otelcol": otelcol.name,
                    "jaeger": jaeger.name,
                }


def report(r: dict[str, Any], cmd: str) -> str:
    ok = (
        r["statuses"] == {200: r["requests"]}
        and r["collector_accepted"] == r["spans"] == r["collector_sent_jaeger"] == r["jaeger_accepted"]
        and r["collector_refused"] == r["collector_send_failed"] == r["collector_enqueue_failed"] == 0
        and r["sample_complete"] == "20/20"
    )
    rows = [
        (f"spans (pilot traces of {SPANS_PER_TRACE})", f"{r['spans']} in {r['requests']} requests"),
        ("spans per request, connections", f"~{r['spans_per_request']}, {r['workers']}"),
        ("accepted by the collector (all HTTP 200)", f"{r['send_s']:.2f} s = **{r['accept_rate']:,.0f} spans/s**"),
        ("end to end, until Jaeger counted every span", f"{r['e2e_s']:.2f} s = **{r['e2e_rate']:,.0f} spans/s**"),
        (
            "collector CPU",
            f"{r['collector_cpu_s']:.1f} s = {r['spans'] / max(r['collector_cpu_s'], 1e-9):,.0f} spans/CPU-s",
        ),
        ("Jaeger CPU", f"{r['jaeger_cpu_s']:.1f} s"),
        ("HTTP statuses", str(r["statuses"])),
        (
            "collector accepted / sent to Jaeger / Jaeger accepted",
            f"{r['collector_accepted']:.0f} / {r['collector_sent_jaeger']:.0f} / {r['jaeger_accepted']:.0f}",
        ),
        (
            "refused / send failed / enqueue failed",
            f"{r['collector_refused']:.0f} / {r['collector_send_failed']:.0f} / {r['collector_enqueue_failed']:.0f}",
        ),
        ("sampled traces complete in Jaeger's query API", r["sample_complete"]),
        ("**no drops**", f"**{'yes' if ok else 'NO'}**"),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return (
        "# Collector throughput\n\n"
        f"`{cmd}` on {platform.node()} ({os.cpu_count()} CPUs, {platform.platform()}), {time.strftime('%Y-%m-%d')}.\n"
        f"Binaries: `{r['otelcol']}`, `{r['jaeger']}` (memory storage). Pipeline: OTLP/HTTP protobuf with the\n"
        "bearer token -> memory_limiter -> redaction -> batch -> OTLP/gRPC to Jaeger through the persistent\n"
        "file_storage queue, and -> spanmetrics -> remote write into a real Prometheus. Client, collector,\n"
        "Jaeger and Prometheus share the machine.\n\n"
        "| | |\n|---|---|\n" + table + "\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spans", type=int, default=300_000)
    ap.add_argument("--per-request", type=int, default=600)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/collector.md")
    a = ap.parse_args()
    r = run(a.spans, a.per_request, a.workers)
    cmd = f"python benchmarks/collector.py --spans {a.spans} --per-request {a.per_request} --workers {a.workers}"
    text = report(r, cmd)
    print(text)
    if a.record:
        out = HERE / "results" / "collector.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return 0 if "**no drops** | **yes**" in text else 1


if __name__ == "__main__":
    sys.exit(main())
