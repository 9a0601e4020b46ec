"""Sizing the global tier (issue 13): series per factory, bytes per sample, disk per year, query latency.

1. Series per factory: a simulated factory of N entries (default 500, five to a
   site, scenario.fleet), scanned, and the samples of what `gwms-obs export`
   serves counted per metric family; beside it the bound the cardinality
   budget (catalogue.LABEL_CAPS) puts on the same families.
2. Bytes per sample: three simulated factories' histories (``gwms-obs report
   --format openmetrics``) over --days at --step, backfilled with promtool into
   each one's Prometheus, shipped by its Thanos sidecar, compacted and
   downsampled by the compactor (tests/support/thanos_stack.py: the roles'
   own command lines). Bytes on disk / samples, per resolution, from the
   bucket's blocks.
3. Disk per year for F factories x N entries from 1 and 2, at the role's
   scrape interval and the compactor's retention defaults.
4. Query latency: the global 30-day per-frontend accounting through the Thanos
   query (store gateway: the history is in the bucket), raw and at the 1h
   downsampled resolution, instant and as a 30-day range panel (1h steps);
   min and median of --repeats.

    .venv/bin/python benchmarks/thanos.py [--entries 500] [--days 30] [--step 900] [--repeats 7]

Writes benchmarks/results/thanos.md. Needs Debian's prometheus and `make thanos`
(GWMS_OBS_THANOS, which the Makefile exports: `make bench-thanos`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import record
from gwms_obs import catalogue
from gwms_obs.outputs.prometheus import exporter_registry
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import fleet
from tests.support import thanos_stack as T
from tools import render
from tools.polling import http_get
from tools.polling import poll as wait_for

OUT = Path(__file__).resolve().parent / "results" / "thanos.md"
CPU = catalogue.CPU_SECONDS.name
ACCOUNTING = f"sum by (client) (increase({CPU}[30d]))"
RANGE_PANEL = f"sum by (client) (increase({CPU}[1h]))"
DAY = 86400.0
RESOLUTIONS = {0: "raw", 300_000: "5m", 3_600_000: "1h"}


def series_at(entries: int, work: Path) -> tuple[Counter[str], float]:
    """Samples per metric family that the exporter serves for a factory of ``entries``; scan seconds."""
    tree = work / f"fleet-{entries}"
    simulate(tree, 3 * entries, seed=11, entries=fleet(entries))
    t0 = time.perf_counter()
    ing = Ingest(IngestConfig(factory_dir=str(tree), settle_seconds=0.0))
    ing.scan()
    scan = time.perf_counter() - t0
    per: Counter[str] = Counter()
    for line in generate_latest(exporter_registry(ing)).decode().splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            per[_family(name)] += 1
    return per, scan


def _family(sample: str) -> str:
    for suffix in ("_bucket", "_count", "_sum"):
        base = sample.removesuffix(suffix)
        if base != sample and base in catalogue.BY_NAME:
            return base
    return sample


def block_sizes(bucket: Path) -> dict[str, dict[str, float]]:
    """Per resolution: blocks, samples, series (summed over blocks), bytes on disk."""
    out: dict[str, dict[str, float]] = {}
    for meta_file in bucket.glob("*/meta.json"):
        meta = json.loads(meta_file.read_text())
        if meta.get("deletion") or (meta_file.parent / "deletion-mark.json").exists():
            continue
        res = RESOLUTIONS.get(meta["thanos"]["downsample"]["resolution"], "other")
        size = sum(f.stat().st_size for f in meta_file.parent.rglob("*") if f.is_file())
        row = out.setdefault(res, {"blocks": 0, "samples": 0, "series": 0, "bytes": 0, "level": 0})
        row["blocks"] += 1
        row["samples"] += meta["stats"]["numSamples"]
        row["series"] += meta["stats"]["numSeries"]
        row["bytes"] += size
        row["level"] = max(row["level"], meta["compaction"]["level"])
    return out


def timed(fn: Any, repeats: int) -> tuple[float, float]:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def range_query(stack: T.ThanosStack, expr: str, start: float, end: float, step: float, **params: Any) -> int:
    import urllib.parse

    q = {"query": expr, "start": f"{start:.0f}", "end": f"{end:.0f}", "step": f"{step:.0f}", "dedup": "true", **params}
    doc = json.loads(http_get(f"{stack.query}/api/v1/query_range?{urllib.parse.urlencode(q)}", timeout=300))
    assert doc["status"] == "success", doc
    return len(doc["data"]["result"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=500, help="entries of the factory whose series are counted")
    ap.add_argument("--factories", type=int, default=10, help="factories of the disk-per-year estimate")
    ap.add_argument("--days", type=float, default=30.0, help="history backfilled per factory")
    ap.add_argument("--pilots", type=int, default=1500, help="pilots per simulated factory history")
    ap.add_argument("--step", type=float, default=900.0, help="seconds between history samples")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--output", type=Path, default=OUT)
    a = ap.parse_args()
    if why := T.unavailable():
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    load0 = os.getloadavg()
    defaults = render.role_defaults("prometheus")
    scrape = _seconds(str(defaults["prometheus_scrape_interval"]))
    thanos_defaults = render.role_defaults("thanos")
    with tempfile.TemporaryDirectory(prefix="gwms-thanos-bench-") as tmp:
        work = Path(tmp)
        print(f"series of a {a.entries}-entry factory...", flush=True)
        per, scan = series_at(a.entries, work)
        series = sum(per.values())
        # the families that grow with the entries (an entry label); the rest stay as they are
        grows = {m.name for m in catalogue.EXPORTER_METRICS if "entry" in m.labels}

        print(f"three factories, {a.days:g} days of history each, at {a.step:g} s...", flush=True)
        now = time.time()
        start = now - (a.days + 0.5) * DAY
        specs = []
        t0 = time.perf_counter()
        for i in range(3):
            tree = work / f"factory-{i}"
            simulate(tree, a.pilots, seed=90 + i, start=start, span_hours=a.days * 24 - 6)
            hist = T.write_history(tree, work / f"factory-{i}.om", a.step)
            specs.append(T.FactorySpec(f"factory-{i}", tree, ("0",), hist))
        history_s = time.perf_counter() - t0
        with T.thanos_stack(work / "stack", specs, store_sync="5s") as stack:
            t0 = time.perf_counter()
            # the sidecars ship every backfilled block; they upload every 30 s
            want = sum(len(list(r.data.glob("*/meta.json"))) for r in stack.replicas)
            wait_for("every backfilled block in the bucket", lambda: len(stack.bucket_blocks()) >= want, 600, 1)
            shipped_s = time.perf_counter() - t0
            raw_before = block_sizes(stack.bucket).get("raw", {})
            t0 = time.perf_counter()
            with stack.compactor(work / "compact.log") as url:
                wait_for(
                    "the compactor's first pass (compaction, downsampling)",
                    lambda: T.metric_value(http_get(f"{url}/metrics").decode(), "thanos_compact_iterations_total") >= 1,
                    1800,
                    1,
                )
            compact_s = time.perf_counter() - t0
            sizes = block_sizes(stack.bucket)
            blocks = sum(int(r["blocks"]) for r in sizes.values())
            wait_for(
                "the store gateway to load the compacted bucket",
                lambda: (
                    T.metric_value(
                        http_get(f"{stack.store_http}/metrics").decode(), "thanos_bucket_store_blocks_loaded"
                    )
                    == blocks
                ),
                600,
                1,
            )
            end = max(T.history_end(s.history) for s in specs if s.history)
            store = {"storeMatch[]": f'{{__address__="{stack.store_grpc}"}}'}
            lat: dict[str, tuple[float, float]] = {}
            for res_name, res in (("raw", "0s"), ("1h", "1h")):
                extra = {**store, "max_source_resolution": res}
                lat[f"instant {res_name}"] = timed(
                    lambda extra=extra: stack.query_api(ACCOUNTING, time=end, **extra), a.repeats
                )
                lat[f"range {res_name}"] = timed(
                    lambda extra=extra: range_query(stack, RANGE_PANEL, end - 30 * DAY, end, 3600, **extra), a.repeats
                )
            answer = stack.by("client", ACCOUNTING, time=end, **store)
    load1 = os.getloadavg()
    text = render_results(
        a, per, grows, series, scan, scrape, thanos_defaults, raw_before, sizes, lat, answer,
        history_s, shipped_s, compact_s, load0, load1,
    )  # fmt: skip
    record(a.output, text)
    return 0


def _seconds(s: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}
    return float(s[:-1]) * units[s[-1]] if s[-1] in units else float(s)


def render_results(
    a: argparse.Namespace,
    per: Counter[str],
    grows: set[str],
    series: int,
    scan: float,
    scrape: float,
    td: dict[str, Any],
    raw_before: dict[str, float],
    sizes: dict[str, dict[str, float]],
    lat: dict[str, tuple[float, float]],
    answer: dict[str, float],
    history_s: float,
    shipped_s: float,
    compact_s: float,
    load0: tuple[float, float, float],
    load1: tuple[float, float, float],
) -> str:
    cap = catalogue.LABEL_CAPS["entry"]
    lines = [
        "# Thanos sizing: series, bytes per sample, disk per year, global query latency",
        "",
        f"`{' '.join(['benchmarks/thanos.py', *sys.argv[1:]])}` (`make bench-thanos`), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {platform.node()}: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; Thanos {Path(T.thanos_binary() or '?').name}. "
        f"Load average (1, 5, 15 min) at the start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
        f"at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}.",
        "",
        f"## Series per factory ({a.entries} entries, {3 * a.entries} pilots; scan {scan:.1f} s)",
        "",
        "What `gwms-obs export` serves (samples per scrape), per family; and the same factory grown to the "
        f"cardinality budget's entry cap (`catalogue.LABEL_CAPS`: {cap:,} entries), with as many frontends per "
        "entry: the per-entry families scale with the entries, the others stay.",
        "",
        f"| family | series | per entry | at {cap:,} entries |",
        "|---|---:|---:|---:|",
    ]
    for name, n in per.most_common():
        scaled = n * cap / a.entries if name in grows else n
        lines.append(f"| `{name}` | {n:,} | {n / a.entries:.2f} | {scaled:,.0f} |")
    at_cap = sum(n * cap / a.entries if name in grows else n for name, n in per.items())
    lines += [f"| **total** | **{series:,}** | {series / a.entries:.1f} | **{at_cap:,.0f}** |", ""]
    raw = sizes.get("raw", {})
    bps_raw = raw["bytes"] / raw["samples"] if raw.get("samples") else float("nan")
    bps_before = raw_before["bytes"] / raw_before["samples"] if raw_before.get("samples") else float("nan")
    lines += [
        f"## Bytes per sample ({a.days:g} days x 3 factories, a sample every {a.step:g} s)",
        "",
        f"History written and backfilled in {history_s:.0f} s, shipped by the sidecars in {shipped_s:.0f} s, "
        f"compacted and downsampled in {compact_s:.0f} s. One history sample every {a.step:g} s, where Prometheus "
        "scrapes every 30 s: a counter moves more between two samples here, and its deltas compress worse, so the "
        "raw figure is an upper bound for a scraped factory (most consecutive scrapes of a pilot counter are equal).",
        "",
        "| resolution | blocks | top level | series (summed over blocks) | samples | bytes on disk | bytes/sample |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| raw, as shipped (2 h blocks) | {int(raw_before.get('blocks', 0))} | 1 "
        f"| {int(raw_before.get('series', 0)):,} | {int(raw_before.get('samples', 0)):,} "
        f"| {int(raw_before.get('bytes', 0)):,} | {bps_before:.2f} |",
    ]
    for res in ("raw", "5m", "1h"):
        r = sizes.get(res)
        if r:
            bps = r["bytes"] / r["samples"] if r["samples"] else float("nan")
            lines.append(
                f"| {res}, compacted | {int(r['blocks'])} | {int(r['level'])} | {int(r['series']):,} "
                f"| {int(r['samples']):,} | {int(r['bytes']):,} | {bps:.2f} |"
            )
    # disk per year: raw at the scrape interval for the raw retention; 5m and 1h tiers hold 5
    # aggregates (count, sum, min, max, counter) per series per window; both at the measured bytes/sample
    fleet_series = series * a.factories
    raw_days = min(365.0, _seconds(str(td["thanos_compact_retention_raw"])) / DAY)
    d5_days = min(365.0, _seconds(str(td["thanos_compact_retention_5m"])) / DAY)
    d1_days = min(365.0, _seconds(str(td["thanos_compact_retention_1h"])) / DAY)
    bps5 = _bps(sizes.get("5m"), bps_raw)
    bps1 = _bps(sizes.get("1h"), bps_raw)
    raw_b = fleet_series * raw_days * DAY / scrape * bps_raw
    d5_b = fleet_series * d5_days * DAY / 300 * 5 * bps5
    d1_b = fleet_series * d1_days * DAY / 3600 * 5 * bps1
    lines += [
        "",
        f"## Disk per year: {a.factories} factories x {a.entries} entries",
        "",
        f"{fleet_series:,} series (the measured {series:,} per factory x {a.factories}), scraped every {scrape:g} s "
        "(prometheus role default); retention from the thanos role's defaults; bytes/sample as measured above "
        "(each downsampled window keeps 5 aggregates: count, sum, min, max, counter). A year of the bucket after "
        "the compactor's retention has run:",
        "",
        "| tier | kept | samples/series/day | bytes/sample | bucket |",
        "|---|---:|---:|---:|---:|",
        f"| raw | {raw_days:g} d | {DAY / scrape:,.0f} | {bps_raw:.2f} | {_gib(raw_b)} |",
        f"| 5m | {d5_days:g} d | {5 * 288:,} | {bps5:.2f} | {_gib(d5_b)} |",
        f"| 1h | {d1_days:g} d (of {td['thanos_compact_retention_1h']}) | {5 * 24:,} | {bps1:.2f} | {_gib(d1_b)} |",
        f"| **total** | | | | **{_gib(raw_b + d5_b + d1_b)}** |",
        "",
        "Each further year at the 1h tier adds "
        f"{_gib(fleet_series * 365 * 24 * 5 * bps1)}. Each factory's own Prometheus holds "
        f"{_gib(series * raw_days * DAY / scrape * bps_raw * 1.5)} (its raw retention, x1.5 for the head and WAL).",
        "",
        "## Global 30-day accounting through the Thanos query (store gateway, three factories)",
        "",
        f"`{ACCOUNTING}` (instant) and `{RANGE_PANEL}` over 30 days at 1 h steps (a Grafana panel), from the "
        f"bucket via the store gateway (`storeMatch[]`), deduplicated; {a.repeats} repeats.",
        "",
        "| query | resolution | min | median |",
        "|---|---|---:|---:|",
    ]
    for k, (mn, md) in lat.items():
        kind, res = k.split(" ")
        lines.append(f"| {kind} | {res} | {mn * 1000:.0f} ms | {md * 1000:.0f} ms |")
    lines += [
        "",
        f"The instant answer: {len(answer)} frontends, {sum(answer.values()) / 3600:,.0f} CPU unit-hours in all.",
        "",
    ]
    return "\n".join(lines)


def _bps(row: dict[str, float] | None, fallback: float) -> float:
    return row["bytes"] / row["samples"] if row and row.get("samples") else fallback


def _gib(b: float) -> str:
    return f"{b / 2**30:,.1f} GiB" if b >= 2**30 else f"{b / 2**20:,.0f} MiB"


if __name__ == "__main__":
    sys.exit(main())
