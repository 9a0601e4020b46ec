"""``report --compare-glideinwms``: per entry, GlideinWMS's own numbers for the window beside ours.

GlideinWMS's numbers are its completed_jobs lines' (``server/entry_*/completed_jobs_*.log``,
one per glidein, written by ``MonitoringConfig.logCompleted``): the glidein's wall
seconds, its jobs' seconds, goodput (jobs that exited 0), terminated (jobs that exited
at all) and the four per-mille wastes, turned back into seconds on the base
GlideinWMS computed each from (``glideFactoryMonitoring``): validation and badput per
mille of the glidein's duration, idle of HTCondor's duration, nosuccess of the jobs'.
A line belongs to the window when it was written in it (``terminated``), as on
GlideinWMS's pages; our pilots belong to it when they ended in it.

Given the factory's monitor dir with its RRDs, GlideinWMS's Log_Completed.rrd sums
(glideins, jobs' goodput and terminated seconds, per client, summed per entry) are
shown too: the numbers its factoryCompletedStats page draws, for every glidein of the
entry, from the rows wholly inside the window (older rows are hourly or 12-hour
consolidations, so the window's edges fall on row boundaries).

Ours are the report's canonical CPU seconds by category, summed into GlideinWMS's
vocabulary (``VOCABULARY``). Where the two differ, each difference is given with the
reasons docs/accounting.md documents for that quantity ("GlideinWMS's vocabulary"):
a reason is an id of ``REASONS``, which tests/test_compare_glideinwms.py holds to
that table.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..accounting.pilot import PilotAccount
from ..catalogue import Category, Source
from ..model import CompletedJob
from ..parse_errors import ParseErrors
from ..sources import completed_jobs, layout, rrd

QUANTITIES = ("pilots", "validation", "idle", "nosuccess", "badput", "goodput", "terminated")
# GlideinWMS's word -> our categories whose canonical CPU seconds stand for it.
VOCABULARY: dict[str, tuple[Category, ...]] = {
    "validation": (Category.VALIDATION_FAILED,),
    "idle": (Category.DECISION_PROBLEM, Category.OVERHEAD),
    "nosuccess": (Category.PREEMPTION_BADPUT, Category.MISCONFIGURATION_BADPUT),
    "badput": tuple(c for c in Category if c is not Category.GOODPUT),
    "goodput": (Category.GOODPUT,),
    "terminated": (Category.GOODPUT,),
}
# Why a quantity differs (docs/accounting.md, "GlideinWMS's vocabulary", one row each).
REASONS: dict[str, str] = {
    "units": "GlideinWMS counts a glidein's wall seconds once and its jobs' seconds summed; "
    "we count canonical CPU units (cores bounded by memory); each measures the glidein's life itself",
    "window": "a completed_jobs line is in the window when written; a pilot of ours when it ended",
    "unlogged": "pilots with no completed_jobs line (or duration 0 or -1), counted by us from "
    "their .out or the event log",
    "pre_condor_overhead": "a pilot that started HTCondor: GlideinWMS's validation is its time before "
    "HTCondor; ours is overhead (validation_failed is only pilots that never started it)",
    "idle_scope": "GlideinWMS's idle is HTCondor's time without jobs; our overhead adds the time "
    "before and after HTCondor and idle units memory cannot back go to the running jobs",
    "nonzero_exit": "a job that exited non-zero is nosuccess to GlideinWMS and goodput to us "
    "(the pilot delivered the resource)",
    "late_signal": "a job killed by a signal after early_failure_seconds is goodput to us; "
    "GlideinWMS counts it neither goodput nor terminated",
    "unknown_time": "our unknown: time nobody can place (no .out, no job information); GlideinWMS guesses it",
    "raw_total": "GlideinWMS >= 3.10.12 writes the jobs' raw total beside normalized goodput: "
    "its nosuccess and badput are off by the normalization",
}
WHY: dict[str, tuple[str, ...]] = {
    "pilots": ("window", "unlogged"),
    "validation": ("units", "pre_condor_overhead"),
    "idle": ("units", "idle_scope"),
    "nosuccess": ("units", "nonzero_exit", "late_signal", "raw_total"),
    "badput": ("units", "nonzero_exit", "late_signal", "unknown_time", "raw_total"),
    "goodput": ("units", "nonzero_exit", "late_signal"),
    "terminated": ("units", "late_signal"),
}
# Log_Completed.rrd's data sources (condorLogSummary's per-cycle sums) -> our quantity.
RRD_COMPLETED = {"Glideins": "pilots", "JobsGoodput": "goodput", "JobsTerminated": "terminated"}
TOLERANCE = 0.01  # relative: below it the two agree


Key = tuple[str, int, int]  # entry, cluster, proc: a glidein in both


@dataclass
class Comparison:
    """The window's pilots, GlideinWMS's and ours, joined on (entry, cluster, proc).

    Joined, both sides count the same glideins, and the reasons a quantity differs are
    the ones that apply to at least one of them (a multi-core pilot: ``units``; a job
    exited non-zero: ``nonzero_exit``...). A glidein on one side only is a ``pilots``
    difference, by ``window`` (GlideinWMS's line only) or ``unlogged`` (ours only).
    """

    since: float | None = None
    until: float | None = None
    theirs: dict[Key, dict[str, float]] = field(default_factory=dict)
    ours: dict[Key, PilotAccount] = field(default_factory=dict)
    flags: dict[Key, CompletedJob] = field(default_factory=dict)
    ours_unkeyed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # GlideinWMS's Log_Completed RRDs, per entry: its pages' own sums (all the entry's glideins)
    rrd_sums: dict[str, dict[str, float]] = field(default_factory=dict)

    def _in(self, t: float) -> bool:
        return (self.since is None or t >= self.since) and (self.until is None or t < self.until)

    def add(self, a: PilotAccount) -> None:
        """One of our pilots (the scan's account sink)."""
        if not self._in(a.end):
            return
        if a.key is None:
            self.ours_unkeyed[a.entry] += 1  # counted from no job id: on our side only
        else:
            self.ours[a.key] = a

    def add_line(self, j: CompletedJob, entry: str) -> None:
        """One completed_jobs line, its quantities in seconds as GlideinWMS computed them."""
        if not self._in(j.terminated) or j.duration <= 0:
            return  # duration 0 (no .out) and -1 (unreadable dates): GlideinWMS has no number
        key = (j.entry or entry, j.cluster, j.proc)
        self.flags[key] = j
        self.theirs[key] = {
            "validation": j.waste_validation * j.duration / 1000,
            "idle": j.waste_idle * max(j.condor_duration, 0) / 1000,
            "nosuccess": j.waste_nosuccess * max(j.user_duration, 0) / 1000,
            "badput": j.waste_badput * j.duration / 1000,
            "goodput": float(max(j.goodput, 0)),
            "terminated": float(max(j.user_terminated, 0)),
        }

    def add_factory(self, factory_dir: str, errors: ParseErrors) -> None:
        """Every completed_jobs line of the factory's entries."""
        for entry, path in layout.completed_logs(factory_dir, errors):
            try:
                with open(path, "rb") as f:
                    buf = f.read()
            except OSError as e:
                errors.record(Source.COMPLETED_JOBS, "unreadable", path, None, str(e))
                continue
            recs, _ = completed_jobs.scan_buffer(buf, path, 0, errors, entry)
            for r in recs:
                rec = completed_jobs.to_record(r, entry)
                if isinstance(rec, CompletedJob):
                    self.add_line(rec, entry)

    def add_rrd_tree(self, monitor: Path, errors: ParseErrors) -> None:
        """The window's sums in each entry's per-client Log_Completed.rrd (its ``total/`` is
        their sum): rows wholly inside the window, at the finest archive that has them."""
        for path in sorted(monitor.glob("entry_*/frontend_*/Log_Completed.rrd")):
            entry = path.parent.parent.name.removeprefix("entry_")
            try:
                parsed = rrd.parse(rrd.dump(str(path)), str(path), errors)
            except (OSError, subprocess.SubprocessError) as e:
                errors.record(rrd.SOURCE, "unreadable", str(path), detail=str(e)[:200])
                continue
            if parsed is None:
                continue
            sums = self.rrd_sums.setdefault(entry, defaultdict(float))
            for i, (ds, _) in enumerate(parsed.ds):
                if (q := RRD_COMPLETED.get(ds)) is not None:
                    sums[q] += rrd.total(parsed, i, self.since, self.until)

    @staticmethod
    def _ours(a: PilotAccount) -> dict[str, float]:
        return {w: sum(a.partition.cpu.get(c, 0.0) for c in cats) for w, cats in VOCABULARY.items()}

    def _applies(self, key: Key) -> set[str]:
        """The documented reasons that hold for one glidein in both."""
        a, j, g = self.ours[key], self.flags[key], self.theirs[key]
        mine = self._ours(a)
        out = set()
        if a.cpus != 1 or (a.memory_mb is not None and a.memory_mb < 2048 * a.cpus) or j.jobsnr > 1:
            out.add("units")  # cores and memory weigh ours; summed job seconds weigh theirs
        if a.lifetime and abs(a.lifetime - j.duration) > 0.01 * j.duration:
            out.add("units")  # the glidein's life as each measured it
        if j.condor_started and g["validation"] > 0:
            out.add("pre_condor_overhead")
        if j.condor_started:
            out.add("idle_scope")
        if g["terminated"] > g["goodput"]:
            out.add("nonzero_exit")
        if mine["goodput"] > g["terminated"] * max(a.cpus, 1) * 1.01 + 1:
            out.add("late_signal")
        if a.partition.cpu.get(Category.UNKNOWN, 0.0) > 0:
            out.add("unknown_time")
        if j.half_normalized:
            out.add("raw_total")
        return out

    def rows(self) -> list[dict[str, Any]]:
        """Per entry and quantity: GlideinWMS's, ours (over the glideins in both), and the documented
        reasons that apply where they differ; ``unexplained`` if none does."""
        entries = sorted({k[0] for k in self.theirs} | {k[0] for k in self.ours} | set(self.ours_unkeyed))
        out = []
        for entry in entries:
            both = [k for k in self.theirs if k[0] == entry and k in self.ours]
            only_theirs = sum(1 for k in self.theirs if k[0] == entry and k not in self.ours)
            only_ours = sum(1 for k in self.ours if k[0] == entry and k not in self.theirs) + self.ours_unkeyed[entry]
            why = [r for r, n in (("window", only_theirs), ("unlogged", only_ours)) if n]
            out.append(self._row(entry, "pilots", len(both) + only_theirs, len(both) + only_ours, why))
            out[-1]["glideinwms_rrd"] = self.rrd_sums.get(entry, {}).get("pilots")
            applies: set[str] = set().union(*(self._applies(k) for k in both)) if both else set()
            for q in QUANTITIES[1:]:
                g = sum(self.theirs[k][q] for k in both)
                o = sum(self._ours(self.ours[k])[q] for k in both)
                out.append(self._row(entry, q, g, o, [r for r in WHY[q] if r in applies] or ["unexplained"]))
                out[-1]["glideinwms_rrd"] = self.rrd_sums.get(entry, {}).get(q)
        return out

    @staticmethod
    def _row(entry: str, q: str, g: float, o: float, why: list[str]) -> dict[str, Any]:
        differs = abs(g - o) > TOLERANCE * max(abs(g), abs(o), 1.0)
        return {"entry": entry, "quantity": q, "glideinwms": g, "gwms_obs": o, "reasons": why if differs else []}

    def to_json(self) -> str:
        return json.dumps({"rows": self.rows(), "reasons": REASONS}, indent=1)

    def to_table(self) -> str:
        head = f"{'entry':<32} {'quantity':<11} {'GlideinWMS':>14} {'its RRD':>14} {'gwms-obs':>14}  why they differ"
        lines = [head, "-" * len(head)]
        for r in self.rows():
            unit = "" if r["quantity"] == "pilots" else " s"
            in_rrd = "" if r["glideinwms_rrd"] is None else f"{r['glideinwms_rrd']:>12,.0f}{unit:2}"
            lines.append(
                f"{r['entry'][:32]:<32} {r['quantity']:<11} {r['glideinwms']:>12,.0f}{unit:2} {in_rrd:>14} "
                f"{r['gwms_obs']:>12,.0f}{unit:2}  {', '.join(r['reasons'])}"
            )
        lines += [
            "",
            "GlideinWMS: its completed_jobs lines (the glideins both count); its RRD: Log_Completed.rrd's sums "
            "(every glidein of the entry, rows wholly in the window); gwms-obs: canonical CPU seconds. Reasons:",
        ]
        lines += [f"  {k}: {v}" for k, v in REASONS.items()]
        return "\n".join(lines) + os.linesep
