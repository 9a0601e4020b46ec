"""Detection measured on simulated factories with labelled anomalies: precision and recall per kind.

Three parts (docs/simulator.md for the labels, docs/analysis.md for analyze,
dashboards/gen/health.py for the rules):

* **analyze** (in process, no servers): ``simulate(..., anomalies=True)`` for
  several seeds and one ``fleet(n, anomalies=True)``; ``gwms_obs.analysis``
  run on each tree and scored against ``anomalies.json`` — entry level (an
  action naming the labelled script at the labelled entry) and pilot level
  (the pilots flagged, against the labelled pilots).
* **isolation forest vs the robust statistic**: the same per-pilot feature
  vectors (each validation script's duration), scikit-learn's IsolationForest
  (fixed random_state) at the label rate and at the default contamination,
  against the robust z of each pilot's span against the fleet.
* **the rules** (live): a simulated fleet with anomalies, the newer half of
  every entry's pilots held back, exported and scraped by a real Prometheus
  with our rules in seconds (config.Timing); the held pilots released after a
  baseline, and ``gwms:site_problem`` read (tests/support/detection.py).

    .venv/bin/python benchmarks/detection.py [--seeds 1 2 3 4 5] [--skip-live]

Writes benchmarks/results/detection.md. The forest needs scikit-learn in the
venv (not a dependency); the live part needs Debian's prometheus.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gwms_obs.analysis.actions import ACTION_MIN_EXCESS_SECONDS, ACTION_RATIO, ACTION_Z, is_candidate
from gwms_obs.analysis.collect import collect
from gwms_obs.analysis.distributions import Key
from gwms_obs.analysis.result import Analysis, analyze
from gwms_obs.analysis.stats import robust_z
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import fleet

RESULTS = Path(__file__).resolve().parent / "results" / "detection.md"
SLOW = "slow_script"


@dataclass
class Score:
    """Counts over runs; precision and recall from them (NaN when undefined)."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    false_positives: list[str] = field(default_factory=list)

    def add(self, predicted: Iterable[Any], actual: Iterable[Any], where: str = "") -> None:
        p, a = set(predicted), set(actual)
        self.tp += len(p & a)
        self.fp += len(p - a)
        self.fn += len(a - p)
        self.false_positives += [f"{where}{x}" for x in sorted(map(str, p - a))]

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else math.nan

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else math.nan

    def cells(self) -> str:
        return f"{fmt(self.precision)} | {fmt(self.recall)} | {self.tp} | {self.fp} | {self.fn}"


def fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


@dataclass
class Tree:
    """One simulated factory, analysed, with its labels."""

    name: str
    an: Analysis
    labels: list[dict[str, Any]]
    seconds: float

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [a for a in self.labels if a["kind"] == kind]


def make_tree(work: Path, name: str, pilots: int, seed: int, entries: int | None) -> Tree:
    out = work / name
    t0 = time.perf_counter()
    if entries:
        simulate(out, pilots, seed=seed, entries=fleet(entries, anomalies=True), anomalies=True)
    else:
        simulate(out, pilots, seed=seed, anomalies=True)
    # lost_after_seconds: every pilot of the finished tree is counted from its files, as the live stack does.
    data, _, _ = collect(str(out), lost_after_seconds=1e9)
    an = analyze(data)
    labels = json.loads((out / "anomalies.json").read_text())["anomalies"]
    return Tree(name, an, labels, time.perf_counter() - t0)


# --- analyze, scored -------------------------------------------------------------------------


def pilot_id(sample_pilot: str) -> tuple[str, str]:
    """'entry/cluster.proc' -> (entry, 'cluster.proc'), as the labels name pilots."""
    entry, _, cp = sample_pilot.rpartition("/")
    return entry, cp


def traced(tree: Tree) -> set[tuple[str, str]]:
    return {pilot_id(s.pilot) for s in tree.an.data.samples}


def labelled_slow_pilots(tree: Tree) -> set[tuple[str, str]]:
    return {(a["entry"], p) for a in tree.of(SLOW) for p in a["pilots"]}


def score_actions(tree: Tree, sc: Score) -> None:
    """Entry level: an action naming the labelled script at the labelled entry is a hit, any other a false one."""
    actual = {(a["entry"], a["params"]["script"]) for a in tree.of(SLOW)}
    sc.add(((a.entry, a.name) for a in tree.an.actions), actual, f"{tree.name}: ")


def validation_flag(kind: str, phase: str, name: str) -> bool:
    return is_candidate(Key("", kind, phase, name))


def flagged_within_entry(tree: Tree) -> set[tuple[str, str]]:
    """analyze's per-pilot flags (a span against its entry's own), on a validation script or phase."""
    by_key = {(s.pilot, s.name): s.phase for s in tree.an.data.samples}
    return {
        pilot_id(f.pilot) for f in tree.an.flags if validation_flag(f.kind, by_key.get((f.pilot, f.name), ""), f.name)
    }


def flagged_against_fleet(tree: Tree) -> set[tuple[str, str]]:
    """The robust statistic at pilot level: a pilot's validation span against the fleet of entries
    (the fleet median and scale analyze uses for actions), with the action thresholds
    (z >= ACTION_Z, >= ACTION_RATIO x the fleet median, >= ACTION_MIN_EXCESS_SECONDS above it)."""
    out = set()
    for s in tree.an.data.samples:
        f = tree.an.fleet.get((s.kind, s.phase, s.name))
        if f is None or not validation_flag(s.kind, s.phase, s.name) or f.entries < 3:
            continue
        if (
            robust_z(s.duration, f.median, f.scale) >= ACTION_Z
            and s.duration >= ACTION_RATIO * f.median
            and s.duration - f.median >= ACTION_MIN_EXCESS_SECONDS
        ):
            out.add(pilot_id(s.pilot))
    return out


def flagged_by_action(tree: Tree) -> set[tuple[str, str]]:
    """Both levels together: the pilots of an action's entry whose span of the action's script is
    at least ACTION_RATIO x the fleet median (the entry is judged first, then its pilots)."""
    acts = {(a.entry, a.name): a.fleet_median for a in tree.an.actions}
    out = set()
    for s in tree.an.data.samples:
        m = acts.get((s.entry, s.name))
        if m is not None and s.duration >= ACTION_RATIO * m:
            out.add(pilot_id(s.pilot))
    return out


# --- the isolation forest on the same vectors -----------------------------------------------


def feature_matrix(tree: Tree) -> tuple[list[tuple[str, str]], list[str], list[list[float]]]:
    """One row per traced pilot: the duration of each validation script and of init/pre_setup.
    A name the pilot did not run (it stopped at a failed script) is imputed with that name's median
    over all pilots, so that stopping early is not an anomaly in itself."""
    per: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for s in tree.an.data.samples:
        if validation_flag(s.kind, s.phase, s.name):
            per[pilot_id(s.pilot)][s.name] = s.duration
    names = sorted({n for row in per.values() for n in row})
    meds = {}
    for n in names:
        v = sorted(row[n] for row in per.values() if n in row)
        meds[n] = v[len(v) // 2]
    pilots = sorted(per)
    return pilots, names, [[per[p].get(n, meds[n]) for n in names] for p in pilots]


def forest_flags(tree: Tree, contamination: float | str, seed: int = 0) -> set[tuple[str, str]]:
    from sklearn.ensemble import IsolationForest  # optional: pip install scikit-learn

    pilots, _, x = feature_matrix(tree)
    model = IsolationForest(n_estimators=200, contamination=contamination, random_state=seed)
    pred = model.fit_predict(x)
    return {p for p, y in zip(pilots, pred, strict=True) if y == -1}


def entry_matrix(tree: Tree) -> tuple[list[str], list[list[float]]]:
    """One row per entry: the median of each validation script (entries with >= 5 spans of each)."""
    meds: dict[str, dict[str, float]] = defaultdict(dict)
    for k, d in tree.an.dists.items():
        if is_candidate(k) and d.count >= 5:
            meds[k.entry][k.name] = d.p50
    names = sorted({n for row in meds.values() for n in row})
    fill = {n: sorted(r[n] for r in meds.values() if n in r)[sum(n in r for r in meds.values()) // 2] for n in names}
    entries = sorted(meds)
    return entries, [[meds[e].get(n, fill[n]) for n in names] for e in entries]


def forest_entries(tree: Tree, contamination: float | str, seed: int = 0) -> set[str]:
    from sklearn.ensemble import IsolationForest

    entries, x = entry_matrix(tree)
    pred = IsolationForest(n_estimators=200, contamination=contamination, random_state=seed).fit_predict(x)
    return {e for e, y in zip(entries, pred, strict=True) if y == -1}


def have_sklearn() -> str | None:
    try:
        import sklearn
    except ImportError:
        return None
    return str(sklearn.__version__)


# --- the report ------------------------------------------------------------------------------


def offline(work: Path, seeds: Sequence[int], pilots: int, fleet_entries: int, fleet_pilots: int) -> list[str]:
    trees = [make_tree(work, f"seed{s}", pilots, s, None) for s in seeds]
    if fleet_entries:
        trees.append(make_tree(work, f"fleet{fleet_entries}", fleet_entries * fleet_pilots, seeds[0], fleet_entries))
    for t in trees:
        print(f"{t.name}: {len(traced(t))} traced pilots, {len(t.an.actions)} actions, {t.seconds:.1f} s", flush=True)
    entry, within, against, gated = Score(), Score(), Score(), Score()
    vis = Score()  # against the fleet, but recall over every labelled pilot (traced or not)
    n_labelled = n_traced_labelled = 0
    for t in trees:
        score_actions(t, entry)
        lab, seen = labelled_slow_pilots(t), traced(t)
        n_labelled += len(lab)
        n_traced_labelled += len(lab & seen)
        visible = lab & seen  # analyze sees a pilot only through its spans
        w, f = flagged_within_entry(t), flagged_against_fleet(t)
        within.add(w, visible, f"{t.name}: ")
        against.add(f, visible, f"{t.name}: ")
        vis.add(f, lab, f"{t.name}: ")
        gated.add(flagged_by_action(t), visible, f"{t.name}: ")
    lines = [
        "## analyze (in process)",
        "",
        f"Trees: `simulate(out, {pilots}, seed, anomalies=True)` for seeds {', '.join(map(str, seeds))} "
        f"(the 7 default entries + the 3 anomaly entries)"
        + (
            f", and `simulate(out, {fleet_entries * fleet_pilots}, {seeds[0]}, entries=fleet({fleet_entries}, "
            f"anomalies=True), anomalies=True)` ({fleet_pilots} pilots per entry)"
            if fleet_entries
            else ""
        )
        + ". Each tree read by `gwms_obs.analysis.collect` (the tree's .err spools, as `gwms-obs analyze "
        "--factory-dir` reads it) and analysed (`analysis.result.analyze`). Only traced pilots "
        "(those whose .err carries a span spool) have spans, so pilot-level recall is over the labelled "
        "pilots that are traced; the line below the table gives it over all labelled pilots.",
        "",
        "| tree | traced pilots | labelled slow-script pilots (traced) | actions | analysed in |",
        "|---|---|---|---|---|",
    ]
    for t in trees:
        lab = labelled_slow_pilots(t)
        acts = "; ".join(f"{a.entry}: {a.name} ({a.ratio:.1f}×, z {a.z:.0f})" for a in t.an.actions) or "none"
        lines.append(
            f"| `{t.name}` | {len(traced(t))} | {len(lab)} ({len(lab & traced(t))}) | {acts} | {t.seconds:.1f} s |"
        )
    lines += [
        "",
        "| kind | level | detector | precision | recall | TP | FP | FN |",
        "|---|---|---|---|---|---|---|---|",
        f"| slow_script | entry | analyze's actions (script and entry must match) | {entry.cells()} |",
        f"| slow_script | pilot | analyze's per-pilot flags (span vs its entry's own; validation names) "
        f"| {within.cells()} |",
        f"| slow_script | pilot | robust z of the pilot's span vs the fleet (action thresholds) | {against.cells()} |",
        f"| slow_script | pilot | an action's pilots: its script's span >= {ACTION_RATIO:g}x the fleet median "
        f"| {gated.cells()} |",
        "",
        f"Over all {n_labelled} labelled pilots (of which {n_traced_labelled} traced), the fleet robust z's "
        f"recall is {fmt(vis.recall)}: an untraced pilot has no spans to judge.",
        "",
    ]
    if entry.false_positives:
        lines += ["False-positive actions: " + "; ".join(entry.false_positives) + ".", ""]
    lines += entry_actions_section(trees)
    if against.false_positives:
        fps = against.false_positives
        lines += [f"False-positive pilots (fleet robust z): {len(fps)}: " + ", ".join(fps[:20]) + ".", ""]
    lines += forest_section(trees, against)
    return lines


QUEUE_NOTE = (
    "analyze's queue_slow judges an entry against its own earlier glideins in the window, as the alert"
    " (analysis/entry_actions.py own_queue): the median of its latest 10 or more against the median of those"
    " before them, 4x and at least an hour. The labelled entry has about 30 glideins with a queue time in a"
    " 600-pilot tree, about one an hour where the alert needs 10 in its hour: a miss is a stretch of 10 whose"
    " median stays under 4x (or under an hour) while half its earlier glideins are already slow ones. On busy"
    " entries over a backfilled week see the section below."
)


def entry_actions_section(trees: Sequence[Tree]) -> list[str]:
    """analyze's actions for entries whose glideins do not run, against the operator's labels."""
    kinds = [k for k in ("held", "submit_failing", "queue_slow") if any(t.of(k) for t in trees)]
    if not kinds:
        return []
    scores = {k: Score() for k in kinds}
    for t in trees:
        for k in kinds:
            got = {a.entry for a in t.an.entry_actions if a.reason == k}
            scores[k].add(got, {a["entry"] for a in t.of(k)}, f"{t.name}: ")
    lines = [
        "Entries whose glideins do not run (analysis/entry_actions.py, the same trees; entry level, the "
        "action's reason must be the label's kind):",
        "",
        "| kind | precision | recall | TP | FP | FN |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {k} | {scores[k].cells()} |" for k in kinds]
    fps = [f"{k}: {', '.join(scores[k].false_positives)}" for k in kinds if scores[k].false_positives]
    lines += ["", f"False positives: {'; '.join(fps) or 'none'}.", ""]
    if "queue_slow" in kinds:
        lines += [QUEUE_NOTE, ""]
    return lines


def forest_section(trees: Sequence[Tree], robust: Score) -> list[str]:
    version = have_sklearn()
    if version is None:
        return ["## Isolation forest", "", "Not measured: scikit-learn is not installed in this venv.", ""]
    rows: list[tuple[str, Score]] = []
    at_rate, at_auto = Score(), Score()
    e_rate, e_auto, e_robust = Score(), Score(), Score()
    for t in trees:
        visible = labelled_slow_pilots(t) & traced(t)
        pilots, _, _ = feature_matrix(t)
        rate = max(len(visible) / len(pilots), 1e-3)
        at_rate.add(forest_flags(t, min(rate, 0.5)), visible, f"{t.name}: ")
        at_auto.add(forest_flags(t, "auto"), visible, f"{t.name}: ")
        entries, _ = entry_matrix(t)
        slow = {a["entry"] for a in t.of(SLOW)}
        erate = max(len(slow) / len(entries), 1e-3)
        e_rate.add(forest_entries(t, min(erate, 0.5)), slow, f"{t.name}: ")
        e_auto.add(forest_entries(t, "auto"), slow, f"{t.name}: ")
        e_robust.add({a.entry for a in t.an.actions}, slow, f"{t.name}: ")
    rows = [
        ("robust z vs the fleet (as above)", robust),
        ("IsolationForest, contamination = the tree's label rate", at_rate),
        ("IsolationForest, contamination = 'auto' (default)", at_auto),
    ]
    erows = [
        ("analyze's actions (entry only)", e_robust),
        ("IsolationForest, contamination = the tree's label rate", e_rate),
        ("IsolationForest, contamination = 'auto'", e_auto),
    ]
    f_best = max(at_rate, at_auto, key=f1)
    e_best = max(e_rate, e_auto, key=f1)
    verdict = (
        "the isolation forest wins"
        if f1(f_best) > f1(robust) or f1(e_best) > f1(e_robust)
        else "the robust statistic wins (or ties)"
    )
    lines = [
        "## Isolation forest vs the robust statistic",
        "",
        f"scikit-learn {version}, `IsolationForest(n_estimators=200, random_state=0)`, fitted per tree on "
        "the same trees. Pilot level: one row per traced pilot, the duration of each validation script and "
        "of `init`/`pre_setup` (a script a pilot did not run, because an earlier one failed, takes that "
        "script's median over the tree's pilots). Entry level: one row per entry, the median of each "
        "validation name with at least 5 spans (missing: the median of the entries'). Label rate = the "
        "labelled traced pilots (entries) over all rows of the tree.",
        "",
        "| level | detector | precision | recall | TP | FP | FN | F1 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| pilot | {n} | {s.cells()} | {fmt(f1(s))} |" for n, s in rows]
    lines += [f"| entry | {n} | {s.cells()} | {fmt(f1(s))} |" for n, s in erows]
    lines += ["", f"**Verdict: {verdict}** on these labels (F1 compared at each level).", ""]
    return lines


def f1(s: Score) -> float:
    p, r = s.precision, s.recall
    return 0.0 if math.isnan(p) or math.isnan(r) or p + r == 0 else 2 * p * r / (p + r)


# --- the rules, live -------------------------------------------------------------------------


def score_live(run: Any, kinds: Sequence[str]) -> dict[str, Score]:
    from tests.support.detection import KIND_REASONS

    out = {}
    for kind in kinds:
        reason = KIND_REASONS[kind]
        sc = out[kind] = Score()
        sc.add({e for e, r in run.after if r == reason}, {a["entry"] for a in run.labels if a["kind"] == kind})
    return out


def live_section(work: Path, entries: int, pilots: int, drift_pilots: int) -> list[str]:
    from dataclasses import replace

    from gwms_obs.simulate.scenario import fleet as fleet_specs
    from tests.support import detection as L

    have = L.reasons()
    kinds = [k for k in ("black_hole", "resource_hog") if L.KIND_REASONS[k] in have]
    missing = [k for k in ("black_hole", "resource_hog") if k not in kinds]
    a = L.run(work / "fleet", "fleet", fleet_specs(entries, anomalies=True), entries * pilots, 3, L.FAST)
    sa = score_live(a, kinds)
    lines = [
        "## The rules (live)",
        "",
        f"`simulate(out, {entries * pilots}, 3, entries=fleet({entries}, anomalies=True), anomalies=True)` "
        f"({pilots} pilots per entry), the newer half of every entry's pilots held back, the exporter "
        f"(`--interval {L.SCRAPE}`) and Prometheus 2 (Debian; scrape {L.SCRAPE} s, rules every 1 s, the "
        "recording rules rendered with `alert_scenario.FAST`: `window=20s`); after a baseline of 3 scrapes, "
        "the held pilots released, and `max_over_time(gwms:site_problem[...])` read over the time since "
        f"(tests/support/detection.py). {a.seconds:.0f} s.",
        "",
        "| kind | reason | precision | recall | TP | FP | FN |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {k} | `{L.KIND_REASONS[k]}` | {sa[k].cells()} |" for k in kinds]
    lines += [""]
    if missing:
        lines += [
            f"Not measured: {', '.join(missing)} — health.py has no `{', '.join(L.KIND_REASONS[k] for k in missing)}` "
            "reason yet.",
            "",
        ]
    labelled = {x["entry"]: x["kind"] for x in a.labels}
    other = sorted((e, r) for e, r in a.after if r not in {L.KIND_REASONS[k] for k in kinds} or e not in labelled)
    by_reason: dict[str, list[str]] = defaultdict(list)
    for e, r in other:
        by_reason[r].append(f"{e}" + (f" ({labelled[e]})" if e in labelled else ""))
    lines += [
        f"Before the release (baseline only): {len(a.before)} problems. After it, the other problems "
        "(reason: entries; a labelled entry's kind in parentheses):",
        "",
    ]
    lines += [f"* `{r}` ({len(v)}): {', '.join(v)}" for r, v in sorted(by_reason.items())] or ["* none"]
    lines += [""]
    if sa.get("black_hole") and sa["black_hole"].false_positives:
        lines += ["False positives (black_hole): " + ", ".join(sa["black_hole"].false_positives), ""]
    if drift_pilots:
        cast = L.drift_cast()
        batches = {e.name: 6 for e in cast if e.drift or e.validation_failure > 0.1}
        timing = replace(L.FAST, trend_range="30s", trend_horizon_seconds=30)
        d = L.run(
            work / "drift",
            "drift",
            cast,
            drift_pilots * len(cast),
            4,
            timing,
            keep=0.1,
            batches=batches,
            batch_gap=8.0,
            settle=25.0,
        )
        sd = score_live(d, ["drift"])["drift"]
        steady = sorted({e for e, r in d.after if r == "validation_worsening" and "STEADY" in e})
        others = sorted((e, r) for e, r in d.after if r != "validation_worsening")
        lines += [
            "### Drift",
            "",
            f"predict_linear needs a history: a cast of {len(cast)} entries (tests/support/detection.py "
            "`drift_cast`: 3 drifting entries, 2 % → 62 % validation failures over the 48 h span; 3 steady "
            f"controls at a constant 30 %; Nebraska), {drift_pilots} pilots each; the first 10 % of every "
            "entry's pilots kept as the baseline, the rest released in submit order, the drifting and steady "
            "entries in 6 batches 8 s apart (the 48 h span replayed in ~48 s). Rules with `window=20s`, "
            f"`trend_range=30s`, `trend_horizon_seconds=30`. {d.seconds:.0f} s.",
            "",
            "| kind | reason | precision | recall | TP | FP | FN |",
            "|---|---|---|---|---|---|---|",
            f"| drift | `validation_worsening` | {sd.cells()} |",
            "",
            f"Steady 30 % controls flagged `validation_worsening`: {', '.join(steady) or 'none'}. "
            "Other problems: " + (", ".join(f"{e} `{r}`" for e, r in others) or "none") + ".",
            "",
        ]
    return lines


# The factory operator's troubles (issue 33): each label kind is the red light's reason of that name.
OPERATOR_KINDS = ("held", "ce_unreachable", "queue_slow", "submit_failing")


def operator_cast(copies: int) -> tuple[Any, ...]:
    """The 7 default entries (the negatives) and ``copies`` of each of the operator's troubled
    entries (scenario.OPERATOR_ENTRIES), each copy its own entry, site and CE."""
    from dataclasses import replace

    from gwms_obs.simulate.factory import DEFAULT_ENTRIES
    from gwms_obs.simulate.scenario import OPERATOR_ENTRIES

    out = list(DEFAULT_ENTRIES)
    for i in range(copies):
        for e in OPERATOR_ENTRIES:
            host = e.gatekeeper.split(".", 1)
            out.append(replace(e, name=f"{e.name}_{i}", site=f"{e.site}{i}", gatekeeper=f"{host[0]}{i}.{host[1]}"))
    return tuple(out)


_RECORD = re.compile(rb"(?m)^\[\d{4}-\d\d-\d\d ")  # a factory log record's first line


def hold_back_logs(factory: Path) -> dict[Path, bytes]:
    """Cut the newer half of the records of every entry's factory log (its info and err logs) off,
    at a record's first line; returns what was cut, to append at the release."""
    tails = {}
    for f in sorted(factory.glob("server/entry_*/*.info.log")) + sorted(factory.glob("server/entry_*/*.err.log")):
        data = f.read_bytes()
        starts = [m.start() for m in _RECORD.finditer(data)]
        if len(starts) < 2:
            continue
        cut = starts[len(starts) // 2]
        tails[f] = data[cut:]
        f.write_bytes(data[:cut])
    return tails


def operator_run(work: Path, cast: Sequence[Any], pilots: int, seed: int, settle: float = 30.0) -> Any:
    """tests/support/detection.py's run, for troubles the factory's own logs and the CE state show: the
    tree ends now (the CE outage is current, as a running factory's), and the newer half of the factory
    logs' records is held back with the pilots and appended at the release."""
    from tests.support import detection as L

    t_start = time.perf_counter()
    work.mkdir(parents=True)
    factory, held = work / "factory", work / "held"
    simulate(factory, pilots, seed=seed, end=time.time(), entries=cast, anomalies=True)
    labels = json.loads((factory / "anomalies.json").read_text())["anomalies"]
    plan = L.hold_back(factory, held, 0.5, None)
    tails = hold_back_logs(factory)
    with L.stack(work, factory, L.FAST) as url:
        before = L.problems_since(url, time.time() - 60)
        t0 = time.time()
        for outs in plan:
            L.release(held, factory, outs)
        for f, tail in tails.items():
            with open(f, "ab") as out:
                out.write(tail)
        time.sleep(settle)  # a scan, a scrape, the window
        after = L.problems_since(url, t0)
    return L.LiveRun("operator", len(cast), pilots, labels, before, after, time.perf_counter() - t_start)


def operator_section(work: Path, copies: int, pilots: int) -> list[str]:
    from tests.support import detection as L

    have = L.reasons()
    kinds = [k for k in OPERATOR_KINDS if k in have]
    cast = operator_cast(copies)
    r = operator_run(work / "operator", cast, pilots * len(cast), 5)
    scores = {}
    for k in kinds:
        sc = scores[k] = Score()
        sc.add({e for e, why in r.after if why == k}, {a["entry"] for a in r.labels if a["kind"] == k})
    labelled: dict[str, list[str]] = defaultdict(list)
    for a in r.labels:
        labelled[a["entry"]].append(a["kind"])
    lines = [
        "## The factory operator's troubles (live)",
        "",
        f"`simulate(out, {pilots * len(cast)}, 5, end=now, entries=operator_cast({copies}), "
        f"anomalies=True)`: the 7 default entries and {copies} copies of each of scenario.OPERATOR_ENTRIES (a CE "
        "refusing the factory's token, 9 glideins in 10 held, auth_failed, and condor_submit failing a third "
        "of the time; a CE down for an hour from 45 minutes before the snapshot; a queue 8 times as long from "
        f"half the span), {pilots} pilots per entry on average. Live as above (tests/support/detection.py's "
        "stack, rules with `alert_scenario.FAST`), with the tree ending now (the outage is current) and the "
        "newer half of the records of every entry's factory log held back with the newer half of its pilots, "
        "all released after the baseline; `max_over_time(gwms:site_problem[...])` since "
        f"(`operator_run`). {r.seconds:.0f} s.",
        "",
        "| kind | reason | precision | recall | TP | FP | FN |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {k} | `{k}` | {scores[k].cells()} |" for k in kinds]
    missing = [k for k in OPERATOR_KINDS if k not in kinds]
    if missing:
        lines += ["", f"Not measured: health.py has no {', '.join(missing)} reason."]
    fps = [f"{k}: {', '.join(scores[k].false_positives)}" for k in kinds if scores[k].false_positives]
    missed = {k: {a["entry"] for a in r.labels if a["kind"] == k} - {e for e, w in r.after if w == k} for k in kinds}
    fns = [f"{k}: {', '.join(sorted(v))}" for k, v in missed.items() if v]
    other = sorted(
        f"{e} `{why}`" + (f" ({', '.join(labelled[e])})" if e in labelled else "")
        for e, why in r.after
        if why not in kinds
    )
    if "queue_slow" in kinds:
        lines += [
            "",
            "queue_slow compares the last window's median time in queue with the entry's own median of the "
            "last week (`gwms:entry_queue_seconds:p50_1h_week_median`): a Prometheus started with the run has "
            "no week, and the kept half of the pilots, counted from their .out files by the first scan, have "
            "no queue time (the event log is read after them), so the baseline is the slow window itself and "
            "the ratio is about 1. Its recall here says that, not how the rule fares in a running factory; "
            "the promtool tests (dashboards/gen/operator_tests.py) give it a week of history, and so does the"
            " backfilled week below (benchmarks/operator_detection.py --backfill).",
        ]
    lines += [
        "",
        f"Before the release: {len(r.before)} problems ("
        + (", ".join(sorted(f"{e} `{w}`" for e, w in r.before)) or "none")
        + ").",
        f"False positives: {'; '.join(fps) or 'none'}. Missed: {'; '.join(fns) or 'none'}.",
        f"Other reasons after the release (a labelled entry's kinds in parentheses): {', '.join(other) or 'none'}.",
        "",
    ]
    return lines


NOT_MEASURED = [
    "## Not measured, and why",
    "",
    "* **slow_script by the rules** (`phase_slow`): it reads the collector's span metrics "
    "(`traces_span_metrics_duration`), and this stack runs no collector; the promtool tests cover it.",
    "* **analyze on black_hole, resource_hog, drift**: analyze reads span durations only; none of these "
    "kinds changes a duration (a black hole's jobs die, a hog's ads overuse, a drift's pilots fail), so it "
    "has no detector for them by design — the rules do.",
    "* **Leaking pilots**: not simulated (nothing the factory gets back shows them, docs/simulator.md).",
    "* **The rules' windows** are seconds here (`alert_scenario.FAST`), hours in production; thresholds "
    "are unchanged, so what a window must hold (>= 20 failed jobs, >= 10 overusing jobs, >= 10 validation "
    "failures) is met by releasing a day's pilots at once: volume per window, not rate, decides recall.",
    "",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--pilots", type=int, default=600, help="pilots per seed's tree")
    ap.add_argument("--fleet-entries", type=int, default=30, help="entries of the fleet tree (0: none)")
    ap.add_argument("--fleet-pilots", type=int, default=25, help="pilots per entry of the fleet tree")
    ap.add_argument("--skip-live", action="store_true", help="no Prometheus part")
    ap.add_argument("--skip-offline", action="store_true", help="only the Prometheus part")
    ap.add_argument("--live-entries", type=int, default=70, help="entries of the live fleet (0: no fleet run)")
    ap.add_argument("--live-pilots", type=int, default=12, help="pilots per entry in the live fleet")
    ap.add_argument("--drift-pilots", type=int, default=300, help="pilots per entry of the drift run (0: none)")
    ap.add_argument("--operator-copies", type=int, default=2, help="copies of each operator trouble (0: none)")
    ap.add_argument("--operator-pilots", type=int, default=100, help="pilots per entry of the operator run")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        body = [] if a.skip_offline else offline(Path(tmp), a.seeds, a.pilots, a.fleet_entries, a.fleet_pilots)
    if not a.skip_live:
        with tempfile.TemporaryDirectory() as tmp:
            body += live_section(Path(tmp), a.live_entries, a.live_pilots, a.drift_pilots) if a.live_entries else []
        if a.operator_copies:
            with tempfile.TemporaryDirectory() as tmp:
                body += operator_section(Path(tmp), a.operator_copies, a.operator_pilots)
    body += NOT_MEASURED
    load = os.getloadavg()
    argv = " ".join(sys.argv[1:])
    head = [
        "# Detection on labelled anomalies",
        "",
        f"`.venv/bin/python benchmarks/detection.py{' ' + argv if argv else ''}` (or `make bench-detection`), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {platform.node()}: {os.cpu_count()} cores, "
        f"load {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at the end, "
        f"{time.perf_counter() - t0:.0f} s in all. Labels: `anomalies.json` (docs/simulator.md).",
        "",
    ]
    text = "\n".join(head + body)
    # benchmarks/operator_detection.py --backfill's section: kept, before "Not measured", when rewriting
    from operator_detection import BEGIN, END

    old = a.out.read_text() if a.out.exists() else ""
    if BEGIN in old and END in old and "## Not measured" in text:
        kept = old[old.index(BEGIN) : old.index(END) + len(END)]
        i = text.index("## Not measured")
        text = text[:i] + kept + "\n\n" + text[i:]
    a.out.write_text(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
