"""The site-health rules scored on a simulated fleet with labelled anomalies (benchmarks/detection.py).

A factory simulated with anomalies (scenario.fleet(n, anomalies=True)), the
newer part of every entry's pilot files held back (alert_scenario.hold_back,
generalised to every entry and to batches), exported and scraped by a real
Prometheus with our rules in seconds (config.Timing). Counters only increase
after Prometheus has a baseline, so the held pilots are released after the
first scrapes; ``gwms:site_problem`` is then read over the time since the
release (max_over_time), so a problem seen in any evaluation counts.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dashboards.gen import config, health, rulefiles
from dashboards.gen import names as N
from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import DEFAULT_ENTRIES, EntrySpec, fleet
from tests.support import alert_scenario as S
from tests.support.alert_scenario import move_pilots
from tests.support.local_stack import exporter, prometheus_config
from tests.support.servers import free_port, prom_query, prom_value, wait_for

# Which reason of gwms:site_problem detects which labelled kind (a reason the rules do not have yet is skipped).
KIND_REASONS = {"black_hole": "black_hole", "resource_hog": "resource_hog", "drift": "validation_worsening"}
SCRAPE = 2  # seconds: the exporter's scan interval and Prometheus' scrape interval


def reasons() -> set[str]:
    return {str(r) for r in health.Reason}


def _pilot_key(out: Path) -> tuple[int, int]:
    _, cluster, proc, _ = out.name.split(".")
    return int(cluster), int(proc)


def pilot_outs(factory: Path) -> dict[str, list[Path]]:
    """entry -> its pilots' .out files in submit (cluster.proc) order, over every client directory."""
    by: dict[str, list[Path]] = defaultdict(list)
    for out in factory.glob("client/*/*/entry_*/job.*.out"):
        by[out.parent.name.removeprefix("entry_")].append(out)
    return {e: sorted(v, key=_pilot_key) for e, v in by.items()}


def hold_back(factory: Path, dest: Path, keep: float = 0.5, batches: dict[str, int] | None = None) -> list[list[Path]]:
    """Move the newer ``1 - keep`` of every entry's pilot files to ``dest`` (and their completed_jobs
    lines are removed, so those pilots are not counted from there first). Returns the release batches:
    batch 0 holds every entry's held pilots except those of ``batches``' entries, which are split, in
    submit order, into that many batches of their own (batch i of each such entry in batch i + 1)."""
    batches = batches or {}
    out: list[list[Path]] = [[] for _ in range(1 + max(batches.values(), default=0))]
    for entry, outs in pilot_outs(factory).items():
        late = outs[math.ceil(len(outs) * keep) :]
        moved = move_pilots(factory, dest, late)
        n = batches.get(entry, 0)
        if n:
            for i in range(n):
                out[i + 1] += moved[i * len(moved) // n : (i + 1) * len(moved) // n]
        else:
            out[0] += moved
        drop_completed(factory, entry, {_pilot_key(o) for o in late})
    return out


_ID = re.compile(r"\bid=\"(?:b')?([0-9]+)\.([0-9]+)")


def drop_completed(factory: Path, entry: str, pilots: set[tuple[int, int]]) -> None:
    """Remove these pilots' completed_jobs lines, so they are counted only once their .out is back.
    (The other lines stay: they name the frontend of the entry's client directories.)"""
    for f in factory.glob(f"server/entry_{entry}/completed_jobs_*.log"):
        keep = []
        for line in f.read_text().splitlines(keepends=True):
            m = _ID.search(line)
            if not (m and (int(m[1]), int(m[2])) in pilots):
                keep.append(line)
        f.write_text("".join(keep))


def release(held: Path, factory: Path, outs: Sequence[Path]) -> None:
    """Put back these held pilots (.err before .out, as alert_scenario.release)."""
    for o in outs:
        for f in (o.with_suffix(".err"), o):
            if f.exists():
                f.replace(factory / f.relative_to(held))


@contextlib.contextmanager
def stack(work: Path, factory: Path, timing: config.Timing) -> Iterator[str]:
    """The exporter on ``factory`` and a Prometheus with our recording rules rendered with ``timing``;
    yields its URL once the rules cover every exported entry (local_stack's pieces, shorter intervals)."""
    from tests.support.servers import prometheus

    rules_dir = work / "rules"
    rules_dir.mkdir()
    (rules_dir / "rec.yml").write_text(rulefiles.recording_yaml(config.Config(timing=timing)))
    exp_port, prom_port = free_port(), free_port()
    cfg = prometheus_config([str(rules_dir / "rec.yml")], exp_port, prom_port, scrape_interval=f"{SCRAPE}s")
    with exporter(factory, work, exp_port, interval=SCRAPE), prometheus(work / "prom", cfg, port=prom_port) as url:
        recorded = f"count(count by (entry) ({N.RR_CPU_RATE}))"
        exported = f"count(count by (entry) ({catalogue.CPU_SECONDS.name}))"
        wait_for("the recording rules", lambda: prom_value(url, exported) > 0 and prom_value(url, recorded) > 0, 120)
        # A baseline: every counter known for a few scrapes before anything is released.
        wait_for("a baseline", lambda: prom_value(url, f"min(count_over_time({catalogue.PILOTS.name}[1m]))") >= 3, 60)
        yield url


def problems_since(url: str, t0: float) -> set[tuple[str, str]]:
    """(entry, reason) of every gwms:site_problem seen since ``t0``."""
    secs = max(5, math.ceil(time.time() - t0))
    return {
        (r["metric"]["entry"], r["metric"]["reason"])
        for r in prom_query(url, f"max_over_time({N.RR_SITE_PROBLEM}[{secs}s])")
    }


@dataclass
class LiveRun:
    name: str
    entries: int
    pilots: int
    labels: list[dict[str, Any]]
    before: set[tuple[str, str]]  # problems before the release (the baseline only)
    after: set[tuple[str, str]]  # problems from the release on
    seconds: float


def run(
    work: Path,
    name: str,
    specs: Sequence[EntrySpec],
    pilots: int,
    seed: int,
    timing: config.Timing,
    *,
    keep: float = 0.5,
    batches: dict[str, int] | None = None,
    batch_gap: float = 0.0,
    settle: float = 30.0,
) -> LiveRun:
    t_start = time.perf_counter()
    work.mkdir(parents=True)
    factory, held = work / "factory", work / "held"
    simulate(factory, pilots, seed=seed, start=time.time() - 48 * 3600, entries=specs, anomalies=True)
    labels = json.loads((factory / "anomalies.json").read_text())["anomalies"]
    plan = hold_back(factory, held, keep, batches)
    with stack(work, factory, timing) as url:
        before = problems_since(url, time.time() - 60)
        t0 = time.time()
        for i, outs in enumerate(plan):
            if i and batch_gap:
                time.sleep(batch_gap)
            release(held, factory, outs)
            print(f"{name}: released batch {i} ({len(outs)} pilots)", flush=True)
        time.sleep(settle)  # a scan, a scrape, the window
        after = problems_since(url, t0)
    return LiveRun(name, len(specs), pilots, labels, before, after, time.perf_counter() - t_start)


def drift_cast(copies: int = 3) -> tuple[EntrySpec, ...]:
    """Drifting entries (2 % -> 62 % validation failures over the span) and as many steady controls
    at a constant 30 % (and Nebraska, healthy): the trend must tell them apart."""
    drift = next(e for e in fleet(10, anomalies=True) if e.drift)
    good = DEFAULT_ENTRIES[0]
    out = [replace(good, weight=1.0)]
    for i in range(copies):
        out.append(replace(drift, name=f"Fermilab_DRIFT_ce_{i}", site=f"DriftSite{i}", weight=1.0))
        out.append(
            replace(
                good,
                name=f"CMSHTPC_T2_STEADY30_{i}",
                site=f"SteadySite{i}",
                gatekeeper=f"ce{i}.steady.example.org",
                validation_failure=0.3,
                weight=1.0,
            )
        )
    return tuple(out)


FAST = S.FAST  # windows of seconds, thresholds unchanged
