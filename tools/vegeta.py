"""vegeta, the controller benchmark's HTTP load generator: find or build it, attack, read its report.

vegeta (github.com/tsenart/vegeta) is open-loop: it sends at a constant rate
whatever the server's latency, starting more workers when all are busy, so a
slow server meets more concurrent requests instead of fewer (the closed-loop
"coordinated omission" that hides queueing). That holds while ``max_workers``
is not reached: a report whose achieved ``rate`` falls short of the requested
one means the generator fell behind, and its latencies understate the server's.
``make vegeta`` builds the pinned version into the cache (Makefile,
VEGETA_VERSION), like the repo's other Go tools.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import ROOT
from tools.tracing_backends import ToolUnavailable

NS_PER_MS = 1e6


def find_vegeta(build: bool = True) -> Path:
    """Path of vegeta: $GWMS_OBS_VEGETA (set by the Makefile), else ``make vegeta``
    (a no-op when the cached binary of the pinned version is there; a build otherwise)."""
    env = os.environ.get("GWMS_OBS_VEGETA")
    if env and Path(env).is_file():
        return Path(env)
    if not build:
        raise ToolUnavailable("vegeta: $GWMS_OBS_VEGETA unset or missing and build=False")
    if shutil.which("go") is None or shutil.which("make") is None:
        raise ToolUnavailable("vegeta: not built and no Go toolchain/make to build it (`make vegeta`)")
    r = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "vegeta"], capture_output=True, text=True, timeout=1800, check=False
    )
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines or not Path(lines[-1]).is_file():
        raise ToolUnavailable(f"`make vegeta` failed ({r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")
    return Path(lines[-1])


@dataclass(frozen=True)
class Target:
    """One request vegeta sends (targets are sent round-robin)."""

    url: str
    method: str = "GET"
    body: bytes = b""
    headers: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def json_line(self) -> str:
        # vegeta's JSON target format: body base64, each header a list of values
        doc: dict[str, Any] = {
            "method": self.method,
            "url": self.url,
            "header": {k: list(v) for k, v in self.headers.items()},
        }
        if self.body:
            doc["body"] = base64.b64encode(self.body).decode()
        return json.dumps(doc)


@dataclass(frozen=True)
class Report:
    """``vegeta report -type=json``, latencies in milliseconds."""

    requests: int
    rate: float  # requests sent per second (the attack's achieved rate)
    throughput: float  # successful responses per second
    success: float  # ratio of 2xx/3xx responses
    status_codes: dict[str, int]  # "0" counts requests that got no response (timeouts, refused)
    latency_ms: dict[str, float]  # min mean 50th 90th 95th 99th max
    errors: list[str]
    raw: dict[str, Any]

    @classmethod
    def parse(cls, text: str) -> Report:
        doc = json.loads(text)
        lat = {k: v / NS_PER_MS for k, v in doc["latencies"].items() if k != "total"}
        return cls(
            requests=int(doc["requests"]),
            rate=float(doc["rate"]),
            throughput=float(doc["throughput"]),
            success=float(doc["success"]),
            status_codes={str(k): int(v) for k, v in (doc.get("status_codes") or {}).items()},
            latency_ms=lat,
            errors=list(doc.get("errors") or []),
            raw=doc,
        )


def attack(
    targets: Sequence[Target],
    *,
    rate: int,
    duration: float,
    workdir: Path,
    workers: int = 10,
    max_workers: int | None = None,
    max_connections: int | None = None,
    timeout: float = 30.0,
    binary: Path | None = None,
) -> Report:
    """Send ``rate`` requests/s for ``duration`` seconds at ``targets``; the report.

    ``workers`` start, more are added as needed up to ``max_workers`` (unbounded
    unless given: open loop); so ~1,000 concurrent connections means a rate and
    a server latency whose product is ~1,000, with ``workers=1000`` to have them
    from the first second. ``max_connections`` caps connections per host.
    ``workdir`` keeps the targets, the binary results (``vegeta report``,
    ``vegeta plot`` read them again) and the JSON report.
    """
    vegeta = binary or find_vegeta()
    workdir.mkdir(parents=True, exist_ok=True)
    targets_file, results, report = workdir / "targets.jsonl", workdir / "results.bin", workdir / "report.json"
    targets_file.write_text("".join(t.json_line() + "\n" for t in targets))
    cmd = [str(vegeta), "attack", "-format=json", f"-targets={targets_file}", f"-output={results}"]
    cmd += [f"-rate={rate}/s", f"-duration={duration:g}s", f"-timeout={timeout:g}s", f"-workers={workers}"]
    cmd += ["-keepalive=true", "-redirects=-1"]  # a redirect is the controller's answer, not followed
    if max_workers is not None:
        cmd.append(f"-max-workers={max_workers}")
    if max_connections is not None:
        cmd.append(f"-max-connections={max_connections}")
    # the attack ends by itself after duration; the bound covers the last requests' timeout
    r = subprocess.run(
        cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=duration + timeout + 60, check=False
    )
    if r.returncode != 0:
        raise RuntimeError(f"vegeta attack failed ({r.returncode}): {r.stderr[-2000:]}")
    rep = subprocess.run(
        [str(vegeta), "report", "-type=json", f"-output={report}", str(results)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if rep.returncode != 0:
        raise RuntimeError(f"vegeta report failed ({rep.returncode}): {rep.stderr[-2000:]}")
    return Report.parse(report.read_text())
