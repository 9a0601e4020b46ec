"""Start real servers (Prometheus, Alertmanager, our exporter) on 127.0.0.1 for tests.

Every wait is a bounded poll of a readiness endpoint; every process started
is stopped by the context manager that started it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tools.mailsink import MailStore
from tools.polling import http_get
from tools.polling import poll as wait_for
from tools.render import role_defaults
from tools.tracing_backends import free_port, stop


@contextlib.contextmanager
def process(
    cmd: list[str], log: Path, ready_url: str | None = None, timeout: float = 30.0
) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        if ready_url:

            def ready() -> bool:
                if p.poll() is not None:
                    raise RuntimeError(f"{cmd[0]} exited with {p.returncode}:\n{log.read_text()[-3000:]}")
                return bool(http_get(ready_url, timeout=2))

            wait_for(f"{cmd[0]} at {ready_url}", ready, timeout)
        yield p
    finally:
        stop(p)


def export_command(factory: Path, port: int, checkpoint: Path, *, interval: float, settle: float) -> list[str]:
    """`gwms-obs export` as users start it, on 127.0.0.1:port."""
    return [
        *(sys.executable, "-m", "gwms_obs.cli", "export", "--factory-dir", str(factory)),
        *("--listen", f"127.0.0.1:{port}", "--interval", f"{interval:g}", "--settle-seconds", f"{settle:g}"),
        *("--checkpoint", str(checkpoint)),
    ]


def first_scan_done(metrics: bytes) -> bool:
    """Whether an exporter's /metrics shows a finished scan (the scan timestamp is there from start)."""
    return b"\ngwms_obs_scan_duration_seconds " in metrics


def have(binary: str) -> bool:
    return shutil.which(binary) is not None


def feature_flags() -> str:
    """The prometheus role's --enable-feature (exemplar storage), as its unit and the compose stack give it."""
    return f"--enable-feature={','.join(role_defaults('prometheus')['prometheus_feature_flags'])}"


@contextlib.contextmanager
def prometheus(
    workdir: Path, config_yaml: str, extra_args: list[str] | None = None, port: int | None = None
) -> Iterator[str]:
    """A real Prometheus on 127.0.0.1 with its own config and data dir; yields its base URL.

    ``port``: when the config must name it (Prometheus scraping itself).
    """
    with prometheus_process(workdir, config_yaml, extra_args, port) as (url, _):
        yield url


@contextlib.contextmanager
def prometheus_process(
    workdir: Path, config_yaml: str, extra_args: list[str] | None = None, port: int | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """:func:`prometheus`, yielding its process too, for a test that stops it early."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "prometheus.yml"
    cfg.write_text(config_yaml)
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        "prometheus",
        f"--config.file={cfg}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        feature_flags(),
        *(extra_args or []),
    ]
    with process(cmd, workdir / "prometheus.log", f"{url}/-/ready") as p:
        yield url, p


def prom_query(url: str, expr: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr})
    doc = json.loads(http_get(f"{url}/api/v1/query?{q}"))
    if doc.get("status") != "success":
        raise ValueError(doc)
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def prom_value(url: str, expr: str) -> float:
    """The first sample's value of an instant query, 0 when it returns nothing."""
    res = prom_query(url, expr)
    return float(res[0]["value"][1]) if res else 0.0


@contextlib.contextmanager
def alertmanager(workdir: Path, config_yaml: str) -> Iterator[str]:
    """A real Alertmanager on 127.0.0.1 (no cluster gossip); yields its base URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "alertmanager.yml"
    cfg.write_text(config_yaml)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        "prometheus-alertmanager",
        f"--config.file={cfg}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # else it gossips on 0.0.0.0:9094
    ]
    with process(cmd, workdir / "alertmanager.log", f"{url}/-/ready"):
        yield url


class SmtpSink(MailStore):
    """The mail sink (tools/mailsink.py) in process, SMTP on 127.0.0.1."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        super().__init__()
        self.port = free_port()
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpSink:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()
