"""What the benchmark scripts share: the cached simulated factory, a measurement in a fresh
process, and writing figures to benchmarks/results/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORK = Path(__file__).resolve().parent / "work"


def simulated_factory(pilots: int, seed: int) -> Path:
    """A factory of ``pilots`` simulated pilots, made once and cached under benchmarks/work/."""
    d = WORK / f"factory-{pilots}-{seed}"
    if not (d / ".done").exists():
        from gwms_obs.simulate.factory import simulate

        print(f"simulating {pilots} pilots into {d} (cached for later runs)...", flush=True)
        t0 = time.perf_counter()
        simulate(d, pilots, seed)
        (d / ".done").write_text(f"{time.perf_counter() - t0:.1f}\n")
    return d


def child(script: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script --child ARGS`` in a fresh process (its peak RSS is its own); its last line, as JSON."""
    out = subprocess.run(
        [sys.executable, script, "--child", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def record(out: Path, text: str) -> None:
    """Write ``text`` to ``out``, keeping a hand-written "## Analysis" section already there.

    The figures are the script's; the analysis (where the time goes, what was
    tried) is a person's, and survives re-recording.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    old = out.read_text() if out.exists() else ""
    i = old.find("\n## Analysis")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text + old[i:] if i >= 0 else text)
    tmp.replace(out)
    print(f"recorded in {out}")
