"""Several simulated factories, each with its Prometheus and Thanos sidecar, behind one global Thanos tier.

Shared by tests/test_thanos_live.py and benchmarks/thanos.py. Every server is the
real binary (Debian's prometheus and promtool, Thanos built by ``make thanos``) and
is started with what the Ansible roles deploy: Prometheus's config from
``prometheus.yml.j2`` and its block flags from ``prometheus.service.j2``, each
Thanos component's command line from its systemd unit template
(``ansible/roles/thanos/templates``), the bucket from ``objstore.yml.j2``. Only the
addresses, paths and the store gateway's sync period are changed for 127.0.0.1.

A factory may come with a history: ``gwms-obs report --format openmetrics`` of its
tree, turned into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics``
in its Prometheus's data dir before Prometheus starts, so the sidecar ships them
to the bucket like any block Prometheus cut.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gwms_obs import catalogue
from tests.support.servers import export_command, first_scan_done, have, process, prometheus_process
from tools import render
from tools.polling import http_get
from tools.polling import poll as wait_for
from tools.tracing_backends import free_port, stop


def thanos_binary() -> str | None:
    """The Thanos binary: $GWMS_OBS_THANOS (the Makefile sets it), else thanos on PATH."""
    path = os.environ.get("GWMS_OBS_THANOS")
    if path and Path(path).is_file():
        return path
    return shutil.which("thanos")


def unavailable() -> str | None:
    """Why the stack cannot run here, or None."""
    if not have("prometheus") or not have("promtool"):
        return "Debian prometheus (prometheus, promtool) not installed"
    if thanos_binary() is None:
        return "no Thanos binary: run `make thanos` (GWMS_OBS_THANOS)"
    return None


def exec_start(role: str, template: str, **overrides: Any) -> list[str]:
    """The command line of a role's systemd unit template, rendered: what the host runs."""
    text = render.render(role, template, **overrides)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    parts = [lines[start].removeprefix("ExecStart=")]
    while parts[-1].endswith("\\"):
        parts[-1] = parts[-1][:-1]
        start += 1
        parts.append(lines[start])
    return shlex.split(" ".join(parts))


def block_flags() -> list[str]:
    """The flags the prometheus role gives a Prometheus with a sidecar beside it (local compaction off)."""
    cmd = exec_start("prometheus", "prometheus.service.j2", prometheus_thanos_sidecar=True)
    return [f for f in cmd if f.startswith(("--storage.tsdb.min-block-duration", "--storage.tsdb.max-block-duration"))]


def thanos_command(component: str, etc: Path, **overrides: Any) -> list[str]:
    """``thanos <component> ...`` as its unit runs it, with this machine's binary and paths."""
    binary = thanos_binary()
    assert binary is not None
    return exec_start(
        "thanos", f"thanos-{component}.service.j2", thanos_binary=binary, thanos_config_dir=str(etc), **overrides
    )


@dataclass(frozen=True)
class FactorySpec:
    """A simulated factory: its tree, the replicas of its Prometheus (two: an HA pair), its history."""

    name: str
    tree: Path
    replicas: tuple[str, ...] = ("0",)
    history: Path | None = None  # OpenMetrics, backfilled into every replica


@dataclass
class Replica:
    factory: str
    replica: str
    prometheus: str  # base URL
    data: Path
    sidecar_grpc: str
    sidecar_http: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)  # [prometheus, sidecar]


@dataclass
class ThanosStack:
    work: Path
    etc: Path
    bucket: Path
    query: str  # base URL of the global query
    store_grpc: str
    store_http: str
    replicas: list[Replica]
    exporters: dict[str, str]  # factory -> /metrics URL

    def replica(self, factory: str, replica: str = "0") -> Replica:
        return next(r for r in self.replicas if r.factory == factory and r.replica == replica)

    def stop_prometheus(self, factory: str, replica: str = "0") -> Replica:
        r = self.replica(factory, replica)
        stop(r.procs[0])
        return r

    def query_api(self, expr: str, *, time: float | None = None, dedup: bool = True, **params: Any) -> dict[str, Any]:
        """An instant query through the global query; the whole answer (data and warnings)."""
        q: dict[str, Any] = {"query": expr, "dedup": str(dedup).lower(), **params}
        if time is not None:
            q["time"] = f"{time:.3f}"
        doc: dict[str, Any] = json.loads(http_get(f"{self.query}/api/v1/query?{urllib.parse.urlencode(q, doseq=True)}"))
        if doc.get("status") != "success":
            raise ValueError(doc)
        return doc

    def by(self, label: str, expr: str, **kw: Any) -> dict[str, float]:
        res = self.query_api(expr, **kw)["data"]["result"]
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in res}

    def bucket_blocks(self) -> list[dict[str, Any]]:
        """The meta.json of every block in the FILESYSTEM bucket."""
        return [json.loads(m.read_text()) for m in sorted(self.bucket.glob("*/meta.json"))]

    @contextlib.contextmanager
    def compactor(self, log: Path) -> Iterator[str]:
        """The compactor over the bucket (its unit's command, plus --consistency-delay=0s: the
        test's blocks are seconds old, and the compactor leaves blocks younger than that alone);
        yields its HTTP base URL."""
        http = f"127.0.0.1:{free_port()}"
        cmd = thanos_command(
            "compact", self.etc, thanos_compact_http_address=http, thanos_data_dir=str(self.work / "thanos")
        )
        with process([*cmd, "--consistency-delay=0s"], log, f"http://{http}/-/ready", 60):
            yield f"http://{http}"


def metric_value(metrics_text: str, name: str) -> float:
    """The sum of a metric's samples in a /metrics text (0 when absent)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def write_history(tree: Path, out: Path, step: float) -> Path:
    """``gwms-obs report --format openmetrics`` of a factory's tree, as users run it."""
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(tree), "--workers", "1"]
    subprocess.run([*cmd, "--format", "openmetrics", "--step", f"{step:g}", "-o", str(out)], check=True, timeout=600)
    return out


def backfill(history: Path, data: Path, *, max_block: str | None = None, timeout: float = 900) -> None:
    """The history's TSDB blocks, into a Prometheus data dir (before Prometheus starts), cut at
    most ``max_block`` long (promtool's --max-block-duration; a year in 2 h blocks is read 4,380 times)."""
    data.mkdir(parents=True, exist_ok=True)
    size = [f"--max-block-duration={max_block}"] if max_block else []
    r = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", *size, str(history), str(data)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"promtool backfill of {history} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def prometheus_config(factory: str, replica: str, exporter: str, self_port: int) -> str:
    """The prometheus role's config for a factory's Prometheus beside a sidecar."""
    return render.render(
        "prometheus",
        "prometheus.yml.j2",
        prometheus_scrape_interval="1s",
        prometheus_evaluation_interval="1s",
        prometheus_external_labels={catalogue.FACTORY_LABEL: factory, catalogue.REPLICA_LABEL: replica},
        prometheus_rule_files=[],
        prometheus_alertmanagers=[],
        prometheus_exporter_targets=[exporter],
        prometheus_collector_targets=[],
        prometheus_controller_targets=[],
        prometheus_self_targets=[f"127.0.0.1:{self_port}"],
    )


@contextlib.contextmanager
def thanos_stack(work: Path, factories: list[FactorySpec], store_sync: str = "2s") -> Iterator[ThanosStack]:
    """Every factory's exporter, Prometheus replicas and sidecars; the store gateway and the query."""
    etc, bucket = work / "etc", work / "bucket"
    etc.mkdir(parents=True, exist_ok=True)
    bucket.mkdir(parents=True, exist_ok=True)
    (etc / "objstore.yml").write_text(
        render.render(
            "thanos", "objstore.yml.j2", thanos_objstore_type="FILESYSTEM", thanos_objstore_directory=str(bucket)
        )
    )
    with contextlib.ExitStack() as es:
        exporters: dict[str, str] = {}
        replicas: list[Replica] = []
        for f in factories:
            fw = work / f.name
            fw.mkdir(parents=True, exist_ok=True)
            port = free_port()
            cmd = export_command(f.tree, port, fw / "checkpoint.json", interval=3600, settle=0)
            es.enter_context(process(cmd, fw / "exporter.log"))
            url = f"http://127.0.0.1:{port}/metrics"
            wait_for(f"{f.name}'s exporter's first scan", _scanned(url), 300)
            exporters[f.name] = url
            for rep in f.replicas:
                rw = fw / f"prometheus-{rep}"
                if f.history is not None:
                    backfill(f.history, rw / "data")
                pport = free_port()
                cfg = prometheus_config(f.name, rep, f"127.0.0.1:{port}", pport)
                purl, pp = es.enter_context(prometheus_process(rw, cfg, extra_args=block_flags(), port=pport))
                grpc, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
                side = thanos_command(
                    "sidecar",
                    etc,
                    thanos_sidecar_http_address=http,
                    thanos_sidecar_grpc_address=grpc,
                    thanos_sidecar_prometheus_url=purl,
                    thanos_sidecar_tsdb_path=str(rw / "data"),
                )
                sp = es.enter_context(process(side, rw / "sidecar.log", f"http://{http}/-/ready", 60))
                replicas.append(Replica(f.name, rep, purl, rw / "data", grpc, http, [pp, sp]))
        store_grpc, store_http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        store = thanos_command(
            "store",
            etc,
            thanos_store_grpc_address=store_grpc,
            thanos_store_http_address=store_http,
            thanos_store_sync_block_duration=store_sync,
            thanos_data_dir=str(work / "thanos"),
        )
        es.enter_context(process(store, work / "store.log", f"http://{store_http}/-/ready", 60))
        endpoints = [r.sidecar_grpc for r in replicas] + [store_grpc]
        (etc / "endpoints.yml").write_text(
            render.render(
                "thanos", "endpoints.yml.j2", thanos_components=["query"], thanos_query_extra_endpoints=endpoints
            )
        )
        qgrpc, qhttp = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        query = thanos_command(
            "query",
            etc,
            thanos_query_grpc_address=qgrpc,
            thanos_query_http_address=qhttp,
            thanos_query_endpoints_reload_interval="5s",
        )
        es.enter_context(process(query, work / "query.log", f"http://{qhttp}/-/ready", 60))
        stack = ThanosStack(
            work, etc, bucket, f"http://{qhttp}", store_grpc, f"http://{store_http}", replicas, exporters
        )
        want = len(endpoints)
        wait_for(f"the query to see its {want} stores", lambda: len(healthy_stores(stack)) == want, 120, 0.5)
        yield stack


def _scanned(url: str) -> Callable[[], bool]:
    return lambda: first_scan_done(http_get(url))


def healthy_stores(stack: ThanosStack) -> list[str]:
    """The StoreAPI addresses the query reaches now (no lastError)."""
    doc = json.loads(http_get(f"{stack.query}/api/v1/stores"))
    return [s["name"] for group in (doc.get("data") or {}).values() for s in group or [] if not s.get("lastError")]


def history_end(history: Path) -> float:
    """The last sample time of an OpenMetrics history."""
    last = 0.0
    with history.open() as f:
        for line in f:
            if not line.startswith("#"):
                last = max(last, float(line.rsplit(" ", 1)[1]))
    return last
