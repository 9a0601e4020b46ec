"""A real Jaeger holding a simulated factory's pilot traces, for the controller's pilot pages.

The traces are the exporter's own: `gwms-obs export --once` on a simulated
factory sends them through our collector into Jaeger (both real, on
127.0.0.1; tests/support/trace_stack.py), as tests/test_pilot_traces_live.py
does; the context waits (bounded) until Jaeger holds every counted pilot.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from tests.support.trace_stack import Stack, stack

SEED = 5


@dataclass
class Populated:
    stack: Stack
    factory: Path
    traces: list[dict[str, Any]]  # Jaeger's JSON of every counted pilot's trace
    since: float

    @property
    def jaeger(self) -> str:
        """Jaeger's query API base URL."""
        return self.stack.jaeger.query

    def resource(self, t: dict[str, Any]) -> dict[str, Any]:
        root = next(s for s in t["spans"] if s["operationName"] == C.SPAN_PILOT)
        return {x["key"]: x["value"] for x in t["processes"][root["processID"]]["tags"]}

    def of_entry(self, entry: str) -> list[dict[str, Any]]:
        return [t for t in self.traces if self.resource(t)[C.ENTRY] == entry]


def export_once(factory: Path, st: Stack, checkpoint: Path, log: Path) -> set[str]:
    """`gwms-obs export --once` sending to the stack's collector; the pilots it counted."""
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
    if r.returncode != 0:
        raise AssertionError(f"export --once failed:\n{r.stderr[-3000:]}")
    return set(json.loads(checkpoint.read_text())["seen"])


@contextlib.contextmanager
def populated(tmp_path: Path, pilots: int = 40, timeout: float = 90.0) -> Iterator[Populated]:
    now = time.time()
    since = now - 10 * 86400
    factory = tmp_path / "factory"
    simulate(factory, pilots, seed=SEED, start=now - 4 * 86400, span_hours=24)
    with stack(tmp_path) as st:
        ck = tmp_path / "state" / "checkpoint.json"
        ck.parent.mkdir()
        counted = export_once(factory, st, ck, tmp_path / "export.log")
        deadline = time.monotonic() + timeout
        last = -1
        while True:  # every counted pilot in Jaeger, and its span count no longer growing
            traces = J.search(st.jaeger.query, start=since, end=now + 86400, limit=100_000)
            spans = sum(len(t["spans"]) for t in traces)
            if len(traces) >= len(counted) and spans == last:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"Jaeger holds {len(traces)} of the {len(counted)} pilots counted")
            last = spans
            time.sleep(1.0)
        yield Populated(st, factory, traces, since)
