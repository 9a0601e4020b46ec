"""Our alerts evaluated over a backfilled history (issue 33: GwmsEntryQueueSlow needs a week of it).

A live run has no week of time in queue for the alert's baseline, so the history is made
the way an operator makes it: ``gwms-obs report --format openmetrics`` over a simulated
factory with a week and more of pilots, ``promtool tsdb create-blocks-from openmetrics``
into a real Prometheus's data dir, then the recording rules the alerts read backfilled with
``promtool tsdb create-blocks-from rules`` (what it is for), one pass per level of rules
reading rules (promtool evaluates every rule of a pass against the data already loaded, so
a rule reading another's output waits for the next pass, and Prometheus is restarted to
load each pass's blocks). The alert expressions are then read with range queries over the
history, and an alert counts as firing where its expression held for its ``for:``.
Used by benchmarks/operator_detection.py ``--backfill`` and tests/test_queue_slow_backfill_live.py.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from dashboards.gen import config, rules
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import DEFAULT_ENTRIES, OPERATOR_ENTRIES, EntrySpec
from tests.support.servers import prometheus
from tools.polling import http_get

STEP = 300  # the history's step and the rules' evaluation interval, seconds (report's default)
# What a history carries (outputs/history.py): the alerts of the kinds read from counters.
ALERTS = {"queue_slow": "GwmsEntryQueueSlow", "submit_failing": "GwmsEntrySubmitFailing"}
SLOW = next(e for e in OPERATOR_ENTRIES if e.queue_slow != 1.0)


def cast(
    span_hours: float, slow_hours: float, slow_weight: float = 3.0, others: Sequence[EntrySpec] = DEFAULT_ENTRIES
) -> tuple[EntrySpec, ...]:
    """``others`` (the default entries) and the operator's three, the long queue turning slow
    ``slow_hours`` before the last submission and as busy as the busiest default entry
    (``slow_weight``): an hour's median needs ``queue_slow_pilots`` pilots."""
    slow = replace(SLOW, weight=slow_weight, queue_slow_from=1.0 - slow_hours / span_hours)
    return (*others, *(slow if e is SLOW else e for e in OPERATOR_ENTRIES))


def make_factory(out: Path, pilots: int, seed: int, entries: Sequence[EntrySpec], span_hours: float) -> float:
    """The tree, its files ending now; returns the snapshot time."""
    s = simulate(out, pilots, seed, end=time.time(), entries=entries, anomalies=True, span_hours=span_hours)
    return float(s.snapshot)


def block_duration(seconds: float) -> str:
    """The smallest of promtool's block ranges (2 h x 3^k) holding ``seconds`` (as benchmarks/import_rrd.py)."""
    k = max(0, math.ceil(math.log(max(seconds, 7200) / 7200, 3) - 1e-9))
    return f"{2 * 3**k}h"


def _run(cmd: list[str], timeout: float) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed ({r.returncode}): {r.stderr[-2000:]}")
    return time.perf_counter() - t0


def passes(c: config.Config, alerts: Sequence[rules.Alert]) -> list[list[dict[str, str]]]:
    """The recording rules the alerts read (and those they read), in passes: a rule in pass n reads
    only raw series and rules of earlier passes."""
    recorded = {r["record"]: r for r in rules.recording_rules(c)}

    def reads(expr: str) -> set[str]:
        return {n for n in recorded if re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", expr)}

    level: dict[str, int] = {}

    def lvl(name: str) -> int:
        if name not in level:
            level[name] = 1 + max((lvl(d) for d in reads(recorded[name]["expr"]) - {name}), default=-1)
        return level[name]

    for a in alerts:
        for n in reads(a.expr):
            lvl(n)
    out: list[list[dict[str, str]]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for n, k in level.items():
        out[k].append(recorded[n])
    return out


@dataclass
class Backfill:
    url: str  # the Prometheus holding the history and the recorded rules
    start: float  # the first rule evaluation (a multiple of STEP)
    end: float
    seconds: dict[str, float]  # what each step took
    blocks: int
    samples: int  # lines of OpenMetrics


def _prom_config() -> str:
    return "global:\n  scrape_interval: 1m\nscrape_configs: []\n"


@contextlib.contextmanager
def backfilled(
    work: Path,
    factory: Path,
    c: config.Config,
    alerts: Sequence[rules.Alert],
    *,
    final_config: str | None = None,
    port: int | None = None,
) -> Iterator[Backfill]:
    """The history of ``factory`` and the recording rules ``alerts`` read in a running Prometheus.

    ``final_config`` (and its ``port``): that Prometheus's own config, e.g. scraping the live
    exporter with our rules for the stretch after the history; else none scraped, no rules."""
    secs: dict[str, float] = {}
    om, data, prom = work / "history.om", work / "prom" / "data", work / "prom"
    report = [sys.executable, "-m", "gwms_obs.cli", "--log-level", "WARNING", "report", "--factory-dir", str(factory)]
    secs["report"] = _run([*report, "--format", "openmetrics", "--step", str(STEP), "-o", str(om)], 1800)
    samples = sum(1 for line in om.open() if not line.startswith("#"))
    stamps = _span(om)
    start = math.ceil(stamps[0] / STEP) * STEP
    end = math.floor(stamps[1] / STEP) * STEP
    data.mkdir(parents=True)
    dur = block_duration(end - start + STEP)
    create = ["promtool", "tsdb", "create-blocks-from"]
    secs["promtool openmetrics"] = _run(
        [*create, "openmetrics", "-q", f"--max-block-duration={dur}", str(om), str(data)], 1800
    )
    om.unlink()  # hundreds of MB; the blocks have it
    secs["promtool rules"] = 0.0
    for i, group in enumerate(passes(c, alerts)):
        rf = work / f"rules-pass{i}.yml"
        rf.write_text(yaml.safe_dump({"groups": [{"name": f"backfill-{i}", "interval": f"{STEP}s", "rules": group}]}))
        with prometheus(prom, _prom_config()) as url:
            secs["promtool rules"] += _run(
                [*create, "rules", "-q", f"--url={url}", f"--start={start:.0f}", f"--end={end:.0f}",
                 f"--eval-interval={STEP}s", f"--output-dir={data}", str(rf)],
                1800,
            )  # fmt: skip
    blocks = len(list(data.glob("*/meta.json")))
    with prometheus(prom, final_config or _prom_config(), port=port) as url:
        yield Backfill(url, start, end, secs, blocks, samples)


def _span(om: Path) -> tuple[float, float]:
    """The first and last timestamps of an OpenMetrics file (a sample line's last field)."""
    lo, hi = math.inf, -math.inf
    with om.open() as f:
        for line in f:
            if line.startswith("#"):
                continue
            t = float(line.rsplit(" ", 1)[1])
            lo, hi = min(lo, t), max(hi, t)
    return lo, hi


Series = tuple[dict[str, str], list[tuple[float, float]]]


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list[Series]:
    """A range query's series (labels, points), in pieces of Prometheus's 11,000 points at most."""
    out: dict[str, Series] = {}
    chunk = 10_000 * step
    t = start
    while t <= end:
        q = urllib.parse.urlencode({"query": expr, "start": t, "end": min(end, t + chunk), "step": step})
        doc = json.loads(http_get(f"{url}/api/v1/query_range?{q}", timeout=120))
        if doc.get("status") != "success":
            raise ValueError(doc)
        for s in doc["data"]["result"]:
            labels = {str(k): str(v) for k, v in s["metric"].items()}
            _, points = out.setdefault(json.dumps(labels, sort_keys=True), (labels, []))
            points += [(float(ts), float(v)) for ts, v in s["values"]]
        t += chunk + step
    return list(out.values())


def firing(url: str, alert: rules.Alert, start: float, end: float, step: float = STEP) -> dict[str, float]:
    """Entry -> the first time ``alert`` fired over [start, end]: its expression true at every
    evaluation (every ``step``) for its ``for:``, as the rule manager holds a pending alert."""
    need = _seconds(alert.for_)
    out: dict[str, float] = {}
    for labels, points in query_range(url, alert.expr, start, end, step):
        since = prev = -math.inf
        for t, _ in points:
            if t - prev > step:
                since = t
            prev = t
            if t - since >= need:
                out[labels["entry"]] = min(out.get(labels["entry"], math.inf), t)
                break
    return out


def _seconds(d: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhd])", d)))
