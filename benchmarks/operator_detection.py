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

``--backfill``: GwmsEntryQueueSlow compares an entry's time in queue with its own last week,
which a live run started now does not have. A factory of 9 days (the default entries and the
operator's three, the long queue as busy as the busiest entry and 8 times slower for its last
day of submissions) is backfilled as an operator would, ``report --format openmetrics`` then
promtool (tests/support/queue_backfill.py), into a real Prometheus, and the production rules'
alert expressions (config.CONFIG: 1 h window, 7 d baseline, ``for:`` as deployed) are read over
the history: queue_slow and submit_failing scored per entry against ``anomalies.json``. Writes
its section of benchmarks/results/detection.md.

    .venv/bin/python benchmarks/operator_detection.py --backfill [--seeds 1 2] [--pilots 15000]
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import ANOMALY_ENTRIES, DEFAULT_ENTRIES, OPERATOR_ENTRIES
from tests.support import detection as L
from tests.support.local_stack import prometheus_config, rule_files
from tests.support.servers import export_command, first_scan_done, process, prom_query
from tools.polling import http_get
from tools.polling import poll as wait_for
from tools.tracing_backends import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "operator-detection.md"
DETECTION = RESULTS.parent / "detection.md"
# The backfill's section of detection.md, between these (benchmarks/detection.py keeps it when it rewrites the file).
BEGIN, END = "<!-- operator_detection.py --backfill -->", "<!-- end operator_detection.py --backfill -->"
SPAN_HOURS, SLOW_HOURS = 9 * 24.0, 24.0
DELAY_NOTE = (
    "The delay is the pilots': a glidein's time in queue is observed when it ends (as the exporter counts it),"
    " after its queue (8 times the usual, about 2.8 h median) and its 3 to 10 h of life, and the hour's"
    " median turns slow once most of the glideins ending in it were submitted after the onset."
)
KINDS = {"held": "held", "ce_unreachable": "ce_unreachable", "queue_slow": "queue_slow"}
SLOW = next(e for e in OPERATOR_ENTRIES if e.queue_slow != 1.0)
BATCHES, GAP = 6, 25.0  # the long-queue entry's pilots: 6 batches, 25 s apart (the window is 20 s)


def tally(s: list[int], want: set[str], got: set[str]) -> list[str]:
    """Adds true positives, false positives and misses to ``s``; returns the false positives."""
    s[0] += len(want & got)
    s[1] += len(got - want)
    s[2] += len(want - got)
    return sorted(got - want)


def scored(s: list[int]) -> str:
    """``precision | recall | TP | FP | FN`` of a table row (nan where a ratio has no denominator)."""
    tp, fp, fn = s
    p = tp / (tp + fp) if tp + fp else math.nan
    r = tp / (tp + fn) if tp + fn else math.nan
    return f"{fmt(p)} | {fmt(r)} | {tp} | {fp} | {fn}"


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


ANALYZED = ("held", "submit_failing", "queue_slow")  # analyze's entry actions' reasons, the labels' kinds


def backfill_one(
    work: Path, seed: int, pilots: int
) -> tuple[
    list[dict[str, Any]], dict[str, dict[str, float]], dict[str, set[str]], set[tuple[str, str]], dict[str, float]
]:
    """One seed's tree backfilled; returns its labels, alert -> entry -> first firing, analyze's
    entries per reason on the same tree, and what each step took."""
    from dashboards.gen import config, rules
    from gwms_obs.analysis.collect import collect
    from gwms_obs.analysis.entry_actions import entry_actions
    from tests.support import queue_backfill as Q

    t0 = time.perf_counter()
    Q.make_factory(work / "factory", pilots, seed, Q.cast(SPAN_HOURS, SLOW_HOURS), SPAN_HOURS)
    labels = json.loads((work / "factory" / "anomalies.json").read_text())["anomalies"]
    sim = time.perf_counter() - t0
    data, _, _ = collect(str(work / "factory"), lost_after_seconds=1e9)  # as benchmarks/detection.py
    acts = entry_actions(data.health, data.pilots)
    analyzed = {k: {x.entry for x in acts if x.reason == k} for k in ANALYZED}
    del data
    sim_an = time.perf_counter() - t0
    alerts = [a for a in rules.alerts(config.CONFIG) if a.name in Q.ALERTS.values()]
    # The last stretch live: the same Prometheus scrapes the exporter on the tree, our rules as deployed.
    exp_port, prom_port = free_port(), free_port()
    cfg = prometheus_config(rule_files(work, config.Timing()), exp_port, prom_port, scrape_interval="5s")
    with Q.backfilled(work, work / "factory", config.CONFIG, alerts, final_config=cfg, port=prom_port) as b:
        t1 = time.perf_counter()
        fired = {a.name: Q.firing(b.url, a, b.start, b.end) for a in alerts}
        info = {"simulate": sim, "analyze": sim_an - sim, **b.seconds, "queries": time.perf_counter() - t1}
        info |= {"blocks": b.blocks, "samples": b.samples, "start": b.start, "end": b.end}
        live, info["live"] = live_stretch(work, b.url, exp_port)
    info["total"] = time.perf_counter() - t0
    return labels, fired, analyzed, live, info


LIVE = ("held", "ce_unreachable")  # the red light's reasons from gauges of the present, the labels' kinds


def live_stretch(work: Path, url: str, port: int) -> tuple[set[tuple[str, str]], float]:
    """The exporter on the tree, scraped by ``url``: (entry, reason) of the red light once its inputs are
    recorded (the held share of every entry with a status, the CE-down times); and its seconds."""
    from dashboards.gen import names as N
    from gwms_obs import catalogue

    t0 = time.time()
    cmd = export_command(work / "factory", port, work / "checkpoint.json", interval=5, settle=0)
    metrics = f"http://127.0.0.1:{port}/metrics"
    with process([*cmd, "--lost-after-seconds", "1e9"], work / "exporter.log"):
        wait_for("the exporter's first scan", lambda: first_scan_done(http_get(metrics, timeout=30)), 900, 2)
        entries = f"count(count by (entry) ({catalogue.ENTRY_GLIDEINS.name}))"
        ready = (
            f"count({N.RR_HELD_RATIO}) >= {entries} and on () count({catalogue.ENTRY_CE_DOWN_SINCE.name}) > 0"
            f" and on () count({N.RR_SITE_PROBLEM}) > 0"
        )
        wait_for("the red light's inputs", lambda: prom_query(url, ready), 300, 1)
        seen = L.problems_since(url, t0)
    return {(e, r) for e, r in seen if r in LIVE}, time.time() - t0


def backfill_main(a: argparse.Namespace) -> int:
    from tests.support import queue_backfill as Q

    t0 = time.perf_counter()
    score = {k: [0, 0, 0] for k in (*Q.ALERTS, *LIVE)}
    an_score = {k: [0, 0, 0] for k in ANALYZED}
    rows, fps, delays, an_fps = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in a.seeds:
            labels, fired, analyzed, live, info = backfill_one(Path(tmp) / f"seed{seed}", seed, a.pilots)
            for kind in LIVE:
                want_l = {str(x["entry"]) for x in labels if x["kind"] == kind}
                got_l = {e for e, r in live if r == kind}
                fps += [f"seed{seed}: {kind} (live) at {e}" for e in tally(score[kind], want_l, got_l)]
            for kind, got_an in analyzed.items():
                want_an = {str(x["entry"]) for x in labels if x["kind"] == kind}
                an_fps += [f"seed{seed}: {kind} at {e}" for e in tally(an_score[kind], want_an, set(got_an))]
            cells = []
            for kind, alert in Q.ALERTS.items():
                want = {str(x["entry"]): x for x in labels if x["kind"] == kind}
                got = fired[alert]
                tally(score[kind], set(want), set(got))
                for e, t in sorted(got.items()):
                    if e not in want:
                        fps.append(f"seed{seed}: {alert} at {e} ({(info['end'] - t) / 3600:.1f} h before the end)")
                for e in want.keys() & got.keys():
                    params = want[e].get("params") or {}
                    if kind == "queue_slow" and isinstance(params, dict) and "since" in params:
                        delays.append(
                            f"seed{seed}: {e} {(got[e] - float(params['since'])) / 3600:.1f} h after its onset"
                        )
                cells.append(f"{alert}: {', '.join(sorted(got)) or '-'}")
            cells += [f"live {k}: {', '.join(sorted(e for e, r in live if r == k)) or '-'}" for k in LIVE]
            secs = ", ".join(f"{k} {info[k]:.0f} s" for k in ("simulate", "analyze", "report", "promtool openmetrics",
                                                               "promtool rules", "queries", "live"))  # fmt: skip
            days = (info["end"] - info["start"]) / 86400
            rows.append(f"| `seed{seed}` | {days:.1f} d, {info['samples']:,.0f} samples, {info['blocks']:.0f} blocks | "
                        f"{'; '.join(cells)} | {secs}; {info['total']:.0f} s |")  # fmt: skip
    load = os.getloadavg()
    argv = " ".join(sys.argv[1:])
    lines = [
        BEGIN,
        "## The factory operator's troubles over a backfilled week",
        "",
        f"`.venv/bin/python benchmarks/operator_detection.py {argv}`, {time.strftime('%Y-%m-%d', time.gmtime())},"
        f" {platform.node()}: {os.cpu_count()} cores, load {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15"
        f" min) at the end, {time.perf_counter() - t0:.0f} s in all.",
        "",
        f"GwmsEntryQueueSlow compares an entry's median time in queue over the last hour with its own median of"
        f" the last week, which a Prometheus started with the run does not have (the live section above). Trees:"
        f" `simulate(out, {a.pilots}, seed, end=now, span_hours={SPAN_HOURS:g}, entries=queue_backfill.cast("
        f"{SPAN_HOURS:g}, {SLOW_HOURS:g}), anomalies=True)`: the 7 default entries and the operator's three, the"
        f" long queue (weight 3, as busy as Nebraska: an hour's median needs 10 pilots) 8 times slower for its last"
        f" {SLOW_HOURS:g} h of submissions. Each backfilled as an operator would (tests/support/queue_backfill.py):"
        f" `gwms-obs report --format openmetrics --step {Q.STEP}`, `promtool tsdb create-blocks-from openmetrics"
        " --max-block-duration` into a real Prometheus's data dir, then the recording rules the alerts read"
        f" backfilled with `promtool tsdb create-blocks-from rules --eval-interval {Q.STEP}s` (one pass per level"
        " of rules reading rules, Prometheus restarted between passes to load them). The production rules"
        " (config.CONFIG: 1 h window, 7 d baseline, `for: 15m`, thresholds as deployed): each alert's expression"
        f" read with range queries every {Q.STEP} s over the whole history; an alert fires at an entry where its"
        " expression held for its `for:`.",
        "",
        "| tree | history | entries each alert fired at | run |",
        "|---|---|---|---|",
        *rows,
        "",
        "| kind | detector | precision | recall | TP | FP | FN |",
        "|---|---|---|---|---|---|---|",
    ]
    how = {**{k: f"{v}, over the history" for k, v in Q.ALERTS.items()},
           **{k: f"`gwms:site_problem` reason `{k}`, live at the end" for k in LIVE}}  # fmt: skip
    for kind in (*Q.ALERTS, *LIVE):
        lines.append(f"| {kind} | {how[kind]} | {scored(score[kind])} |")
    lines += [
        "",
        f"False positives: {'; '.join(fps) or 'none'}.",
        "First firing of GwmsEntryQueueSlow after the label's onset (the first slow submission): "
        f"{'; '.join(delays) or '-'}. {DELAY_NOTE}",
        "",
        "analyze's entry actions on the same trees (`gwms_obs.analysis.collect` then `entry_actions`, in process;"
        " queue_slow judges an entry against its own earlier pilots in the window, as the alert):",
        "",
        "| kind | precision | recall | TP | FP | FN |",
        "|---|---|---|---|---|---|",
    ]
    for kind in ANALYZED:
        lines.append(f"| {kind} | {scored(an_score[kind])} |")
    lines += [
        "",
        f"False positives: {'; '.join(an_fps) or 'none'}.",
        "",
        "held and ce_unreachable are not in a history: their alerts read gauges of the present (the glideins"
        " held now in schedd_status, the CE down since), which `report` does not replay. They are read on the same"
        " run, live: after the history's queries the same Prometheus (its config now the prometheus role's, our"
        " rules as deployed, scrape 5 s) scrapes `gwms-obs export` on the tree, and the red light's problems"
        " (`gwms:site_problem`, each alert's condition without its `for:`) are read once the held share of every"
        " entry and the CE-down times are recorded.",
        END,
    ]
    text = DETECTION.read_text() if DETECTION.exists() else ""
    section = "\n".join(lines)
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) :]
    elif "## Not measured" in text:
        i = text.index("## Not measured")
        text = text[:i] + section + "\n\n" + text[i:]
    else:
        text += "\n" + section + "\n"
    (DETECTION if a.out == RESULTS else a.out).write_text(text)
    print(section)
    return 0


def fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--pilots", type=int, help="pilots per tree (default 1300; 15000 with --backfill)")
    ap.add_argument("--backfill", action="store_true", help="the alerts over a backfilled week (detection.md)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    if a.backfill:
        a.pilots = a.pilots or 15000
        return backfill_main(a)
    a.pilots = a.pilots or 1300
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
                fps += [f"seed{seed}: {reason} at {e}" for e in tally(score[kind], want, got)]
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
        lines.append(f"| {kind} | `{reason}` | {scored(score[kind])} |")
    lines += ["", f"False positives: {', '.join(fps) or 'none'}.", ""]
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
