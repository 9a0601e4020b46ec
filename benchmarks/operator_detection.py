"""Detection of the factory operator's troubles (issue 33) by our rules: precision and recall per reason.

As benchmarks/detection.py's live part (tests/support/detection.py's pieces): a simulated factory
with the default cast, the anomaly entries and the operator's three (``simulate(..., anomalies=True)``:
a CE refusing the factory's credentials, one down since 45 minutes before the snapshot, one whose
queue grows 8 times half-way), its files ending now; the exporter and a real Prometheus with our
recording rules in seconds (config.Timing, thresholds unchanged). Three quarters of every entry's
pilots are held back and released after a baseline (the long-queue entry's in batches, oldest
first, a window apart: a running factory's pilots come back over time, and the queue histograms
observe a pilot only when its .out arrives after the event log was read). ``gwms:site_problem``
seen from the start is scored against ``anomalies.json`` per entry: ``held``, ``ce_unreachable``
and ``queue_slow`` against the labels of those kinds.

    .venv/bin/python benchmarks/operator_detection.py [--seeds 1 2] [--pilots 1300]

Writes benchmarks/results/operator-detection.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import ANOMALY_ENTRIES, DEFAULT_ENTRIES, OPERATOR_ENTRIES
from tests.support import detection as L

RESULTS = Path(__file__).resolve().parent / "results" / "operator-detection.md"
KINDS = {"held": "held", "ce_unreachable": "ce_unreachable", "queue_slow": "queue_slow"}
SLOW = next(e for e in OPERATOR_ENTRIES if e.queue_slow != 1.0)
BATCHES, GAP = 6, 25.0  # the long-queue entry's pilots: 6 batches, 25 s apart (the window is 20 s)


def one(work: Path, seed: int, pilots: int) -> tuple[list[dict[str, object]], set[tuple[str, str]], float]:
    t0 = time.perf_counter()
    work.mkdir(parents=True)
    factory, held = work / "factory", work / "held"
    simulate(factory, pilots, seed=seed, end=time.time(), anomalies=True)
    labels = json.loads((factory / "anomalies.json").read_text())["anomalies"]
    plan = L.hold_back(factory, held, 0.25, {SLOW.name: BATCHES})
    with L.stack(work, factory, L.FAST) as url:
        start = time.time()
        for i, outs in enumerate(plan):
            if i:
                time.sleep(GAP)
            L.release(held, factory, outs)
        time.sleep(30)  # a scan, a scrape, the window
        seen = L.problems_since(url, start - 120)  # the baseline too: holds and outages are there from the start
    return labels, seen, time.perf_counter() - t0


def fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--pilots", type=int, default=1300)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    t0 = time.perf_counter()
    score = {k: [0, 0, 0] for k in KINDS}  # tp, fp, fn
    rows, fps = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in a.seeds:
            labels, seen, secs = one(Path(tmp) / f"seed{seed}", seed, a.pilots)
            found = []
            for kind, reason in KINDS.items():
                want = {str(x["entry"]) for x in labels if x["kind"] == kind}
                got = {e for e, r in seen if r == reason}
                s = score[kind]
                s[0] += len(want & got)
                s[1] += len(got - want)
                s[2] += len(want - got)
                fps += [f"seed{seed}: {reason} at {e}" for e in sorted(got - want)]
                found.append(f"{reason}: {', '.join(sorted(got)) or '-'}")
            rows.append(f"| `seed{seed}` | {len(DEFAULT_ENTRIES + ANOMALY_ENTRIES + OPERATOR_ENTRIES)} | "
                        f"{'; '.join(found)} | {secs:.0f} s |")  # fmt: skip
    load = os.getloadavg()
    lines = [
        "# Detection of the factory operator's troubles",
        "",
        f"`.venv/bin/python benchmarks/operator_detection.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {platform.node()}: {os.cpu_count()} cores, load"
        f" {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at the end, {time.perf_counter() - t0:.0f} s"
        " in all. Labels: `anomalies.json` (docs/simulator.md); rules: `dashboards/gen/rules.py`, `health.py`.",
        "",
        f"Trees: `simulate(out, {a.pilots}, seed, end=now, anomalies=True)`; three quarters of each entry's"
        f" pilots held back and released after a baseline, {SLOW.name}'s in {BATCHES} batches {GAP:g} s apart."
        " The problems seen from the stack's start to 30 s after the last release, per entry.",
        "",
        "| tree | entries | entries with each problem | run |",
        "|---|---|---|---|",
        *rows,
        "",
        "| kind | reason | precision | recall | TP | FP | FN |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, reason in KINDS.items():
        tp, fp, fn = score[kind]
        p = tp / (tp + fp) if tp + fp else math.nan
        r = tp / (tp + fn) if tp + fn else math.nan
        lines.append(f"| {kind} | `{reason}` | {fmt(p)} | {fmt(r)} | {tp} | {fp} | {fn} |")
    lines += ["", f"False positives: {', '.join(fps) or 'none'}.", ""]
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
