"""Our OpenTelemetry Collector distribution and Jaeger v2: names, configs, and a runner for tests.

The collector is built from ``otel-collector/builder-config.yaml`` by ``make
otelcol`` and Jaeger by ``make jaeger``; both configs are the Ansible roles'
templates (``ansible/roles/{otel_collector,jaeger}/templates/config.yaml.j2``)
rendered by :mod:`tools.render`, so what the tests run is what a factory
host runs. docs/tracing-backends.md describes the pipeline.

The names of the metrics these binaries produce live in the catalogue
(``gwms_obs.catalogue``, "metrics the OpenTelemetry Collector produces").
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gwms_obs.catalogue import FEATURE_GATES
from tools import ROOT, render
from tools.polling import http_get, poll


class ToolUnavailable(RuntimeError):
    """The binary is absent and could not be built (no Go toolchain, no network)."""


def find_binary(tool: str, build: bool = True) -> Path:
    """Path of ``otelcol`` or ``jaeger``: $GWMS_OBS_OTELCOL/$GWMS_OBS_JAEGER (set by the Makefile),
    else ``make <tool>`` (a no-op when the cached binary is current; a build otherwise)."""
    if tool not in ("otelcol", "jaeger"):
        raise ValueError(tool)
    env = os.environ.get(f"GWMS_OBS_{tool.upper()}")
    if env and Path(env).is_file():
        return Path(env)
    if not build:
        raise ToolUnavailable(f"{tool}: ${'GWMS_OBS_' + tool.upper()} unset or missing and build=False")
    if shutil.which("go") is None or shutil.which("make") is None:
        raise ToolUnavailable(f"{tool}: not built and no Go toolchain/make to build it (`make {tool}`)")
    r = subprocess.run(["make", "-s", "-C", str(ROOT), tool], capture_output=True, text=True, timeout=5400, check=False)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines or not Path(lines[-1]).is_file():
        raise ToolUnavailable(f"`make {tool}` failed ({r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")
    return Path(lines[-1])


def _below_ephemeral() -> tuple[int, int]:
    """A port range just below the kernel's ephemeral range (32768-60999 by default).

    Under pytest-xdist each worker gets its own slice of it: _HANDED_OUT keeps
    one process from handing a port out twice, but two workers drawing at once
    could pick the same port before either server binds it.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    lo, hi = max(1024, low - 12000), low
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        size = (hi - lo) // int(count)
        lo += size * (int(worker[2:]) % int(count))
        hi = lo + size
    return lo, hi


# Every port free_port has handed out in this process: none is handed out twice.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server the caller starts next.

    Taken below the ephemeral range: bind(port 0) would hand out an ephemeral
    port, which any outgoing connection may take before the server binds it
    (a collector once failed so: "address already in use"). The kernel never
    picks these for a client socket, so only another server could take one.
    Nor is a port handed out twice: a config asks for several ports before
    any server binds one, and two random draws from the same range met once
    (Jaeger's six and the collector's four ports: the collector failed with
    "address already in use").
    """
    lo, hi = _below_ephemeral()
    for _ in range(500):
        port = random.randrange(lo, hi)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {lo}-{hi} on 127.0.0.1")


def validate(binary: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """``<binary> validate --config=<config>`` (with our feature gates); returncode 0 when valid."""
    return subprocess.run(
        [str(binary), "validate", f"--config={config}", *_gate_args(binary)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _gate_args(binary: Path) -> list[str]:
    return [f"--feature-gates={','.join(FEATURE_GATES)}"] if "otelcol" in binary.name else []


@dataclass
class CollectorConfig:
    """A rendered collector config on 127.0.0.1 ports, and how to reach it."""

    path: Path
    token: str
    otlp_http: str  # base URL; POST {otlp_http}/v1/traces
    otlp_grpc: str  # host:port
    health: str  # GET -> 200 when ready
    telemetry: str  # otelcol_* metrics (Prometheus text)
    queue_dir: Path
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def traces_url(self) -> str:
        return f"{self.otlp_http}/v1/traces"

    @property
    def telemetry_target(self) -> str:
        return self.telemetry.removeprefix("http://").removesuffix("/metrics")


def collector_config(
    workdir: Path,
    *,
    jaeger_otlp_grpc: str,
    remote_write_url: str,
    token: str = "test-token-0123456789",
    **overrides: Any,
) -> CollectorConfig:
    """Render the role's config for a local run: loopback, free ports, queue in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    grpc, http, health, tel = free_port(), free_port(), free_port(), free_port()
    values: dict[str, Any] = {
        "otel_collector_production": False,
        "otel_collector_pilot_tokens": [token],
        "otel_collector_listen_host": "127.0.0.1",
        "otel_collector_otlp_grpc_port": grpc,
        "otel_collector_otlp_http_port": http,
        "otel_collector_health_port": health,
        "otel_collector_telemetry_port": tel,
        "otel_collector_jaeger_endpoint": jaeger_otlp_grpc,
        "otel_collector_prometheus_remote_write_url": remote_write_url,
        "otel_collector_queue_dir": str(workdir / "queue"),
        "otel_collector_memory_limit_mib": 512,
        "otel_collector_memory_spike_mib": 128,
        "otel_collector_instance_id": "test",
        **overrides,
    }
    path = workdir / "otelcol.yaml"
    render.write("otel_collector", "config.yaml.j2", path, **values)
    return CollectorConfig(
        path=path,
        token=token,
        otlp_http=f"http://127.0.0.1:{http}",
        otlp_grpc=f"127.0.0.1:{grpc}",
        health=f"http://127.0.0.1:{health}/",
        telemetry=f"http://127.0.0.1:{tel}/metrics",
        queue_dir=workdir / "queue",
        values=values,
    )


@dataclass
class JaegerConfig:
    path: Path
    otlp_grpc: str  # host:port, for the collector's exporter
    otlp_http: str
    query: str  # base URL of the query API: {query}/api/traces/<id>
    health: str
    telemetry: str
    values: dict[str, Any] = field(default_factory=dict)


def jaeger_config(workdir: Path, storage: str = "memory", **overrides: Any) -> JaegerConfig:
    """Render the Jaeger role's config on free loopback ports (memory storage unless told)."""
    workdir.mkdir(parents=True, exist_ok=True)
    grpc, http, qh, qg, health, tel = (free_port() for _ in range(6))
    values: dict[str, Any] = {
        "jaeger_storage": storage,
        "jaeger_badger_dir": str(workdir / "badger"),
        "jaeger_listen_host": "127.0.0.1",
        "jaeger_query_host": "127.0.0.1",
        "jaeger_otlp_grpc_port": grpc,
        "jaeger_otlp_http_port": http,
        "jaeger_query_http_port": qh,
        "jaeger_query_grpc_port": qg,
        "jaeger_health_port": health,
        "jaeger_telemetry_port": tel,
        **overrides,
    }
    path = workdir / "jaeger.yaml"
    render.write("jaeger", "config.yaml.j2", path, **values)
    return JaegerConfig(
        path=path,
        otlp_grpc=f"127.0.0.1:{grpc}",
        otlp_http=f"http://127.0.0.1:{http}",
        query=f"http://127.0.0.1:{qh}",
        health=f"http://127.0.0.1:{health}/status",
        telemetry=f"http://127.0.0.1:{tel}/metrics",
        values=values,
    )


def _get(url: str, timeout: float = 2.0) -> bytes:
    return http_get(url, timeout)


@contextlib.contextmanager
def run(
    binary: Path, config: Path, ready_url: str, log: Path, timeout: float = 60.0
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``binary --config=<config>``, wait (bounded) for ``ready_url``, stop it on exit."""
    with open(log, "ab") as out:
        p = subprocess.Popen(
            [str(binary), f"--config={config}", *_gate_args(binary)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:

        def ready() -> bool:
            if p.poll() is not None:
                raise RuntimeError(f"{binary.name} exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            return bool(_get(ready_url))

        poll(f"{binary.name} at {ready_url}", ready, timeout)
        yield p
    finally:
        stop(p)


def stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


# --- talking to them -------------------------------------------------------------------------------
def post_otlp(url: str, body: bytes, token: str | None, content_type: str = "application/json") -> int:
    """POST an OTLP/HTTP request; the HTTP status (401 without a valid token)."""
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            status: int = r.status
            return status
    except urllib.error.HTTPError as e:
        return e.code


def jaeger_trace(query_url: str, trace_id: str) -> list[dict[str, Any]]:
    """The spans of one trace from Jaeger's query API, each with its ``process`` (resource) inlined;
    empty when not (yet) there."""
    try:
        doc = json.loads(_get(f"{query_url}/api/traces/{trace_id}", timeout=5))
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise
    spans: list[dict[str, Any]] = []
    for t in doc.get("data") or []:
        procs = t.get("processes", {})
        for s in t.get("spans", []):
            spans.append({**s, "process": procs.get(s.get("processID"), {})})
    return spans


def span_tags(span: dict[str, Any]) -> dict[str, Any]:
    """Tags of a Jaeger API span, plus its process (resource) tags, as a flat dict."""
    out: dict[str, Any] = {t["key"]: t["value"] for t in span.get("process", {}).get("tags", [])}
    out.update({t["key"]: t["value"] for t in span.get("tags", [])})
    return out


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(url: str) -> dict[str, float]:
    """A Prometheus text endpoint as {'name{labels}': value} (one scrape)."""
    out: dict[str, float] = {}
    for line in _get(url, timeout=5).decode().splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def metric_sum(samples: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for key, v in samples.items():
        base, _, rest = key.partition("{")
        if base not in (name, name + "_total"):
            continue
        if all(f'{k}="{val}"' in rest for k, val in labels.items()):
            total += v
    return total
