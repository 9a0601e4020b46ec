"""Byte-for-byte: does the ingest of this tree give what an older commit's gives?

    python benchmarks/ingest_equality.py --before COMMIT [--keep]

For a refactoring of the ingest (issue 32) that must change nothing a user
sees. The older commit is checked out with ``git worktree add`` in a temporary
directory (removed after, unless --keep), and both sides read the same
simulated factories, each in its own process with ``PYTHONPATH`` set to its
tree's ``exporters/``:

* ``gwms-obs report --format json`` (one-shot; the 2,500-pilot tree with
  ``--workers 2`` goes through the worker pool of a backfill);
* the exporter's path: a scan with a checkpoint, then a second ``Ingest``
  restored from it scanning again, on a fixed clock; what /metrics serves of
  the factory (``FactoryCollector``) after each scan, and the checkpoint file.

Exits 1 naming each output that differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from gwms_obs.cli import main; main()"]
# (pilots, seed, simulate flags, report workers)
TREES = [(800, 1, [], 1), (600, 5, ["--anomalies"], 1), (2500, 2, [], 2)]
CLOCK = 1.9e9  # long after the simulated day: every pilot settled, every lost one past lost_after


def _child(tree: str, workdir: str) -> None:
    """Runs on one side: the exporter's path, printed as one JSON line of outputs."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gwms_obs.outputs.prometheus import FactoryCollector
    from gwms_obs.pipeline import Ingest, IngestConfig

    ckpt = os.path.join(workdir, "state.json")
    out: dict[str, str] = {}
    for i in (1, 2):  # the second restores the first's checkpoint
        ing = Ingest(IngestConfig(factory_dir=tree, checkpoint=ckpt, settle_seconds=0.0), clock=lambda: CLOCK)
        ing.scan()
        registry = CollectorRegistry()
        registry.register(FactoryCollector(ing))
        out[f"metrics after scan {i}"] = generate_latest(registry).decode()
        with open(ckpt) as f:
            out[f"checkpoint after scan {i}"] = json.dumps(json.load(f), sort_keys=True)
    print(json.dumps(out))


def _side(exporters: Path, tree: Path, workers: int, workdir: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(exporters)}
    report = subprocess.run(
        [*CLI, "report", "--factory-dir", str(tree), "--format", "json", "--workers", str(workers)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    workdir.mkdir(parents=True)
    path = subprocess.run(
        [sys.executable, __file__, "--child", str(tree), str(workdir)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    got: dict[str, str] = json.loads(path.strip().splitlines()[-1])
    return {"report json": report, **got}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="the commit to compare with")
    ap.add_argument("--keep", action="store_true", help="keep the worktree and the trees")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(*a.child)
        return 0
    if not a.before:
        ap.error("--before is required")
    tmp = Path(tempfile.mkdtemp(prefix="ingest-eq-"))
    old = tmp / "before"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(old), a.before], check=True)
    differ = 0
    try:
        for pilots, seed, flags, workers in TREES:
            tree = tmp / f"factory-{pilots}-{seed}"
            subprocess.run(
                [*CLI, "simulate", "--out", str(tree), "--pilots", str(pilots), "--seed", str(seed), *flags],
                env={**os.environ, "PYTHONPATH": str(REPO / "exporters")},
                check=True,
                capture_output=True,
            )
            before = _side(old / "exporters", tree, workers, tmp / f"before-{seed}")
            after = _side(REPO / "exporters", tree, workers, tmp / f"after-{seed}")
            for what in before:
                b, n = before[what].encode(), after.get(what, "").encode()
                same = b == n
                differ += not same
                digest = hashlib.sha256(b).hexdigest()[:12]
                name = f"{pilots} pilots, seed {seed} {' '.join(flags)}"
                print(f"{name}: {what}: {len(b)} bytes, sha256 {digest}", end="")
                print(" identical" if same else f" DIFFERS (after: {len(n)} bytes)")
    finally:
        if not a.keep:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False)
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
