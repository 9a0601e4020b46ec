"""Property: whatever the daemon's life looked like, it ends with the one-shot report's numbers.

One small simulated factory (ground truth kept) is copied afresh for each
example, and a random schedule is played on the copy with a fake clock the
Ingest reads through ``clock=``:

* each pilot with a .out gets the scan from which its .out/.err are *old*
  (mtime more than ``settle_seconds`` behind the clock); before that scan its
  files are *young* (touched to the clock's now before every scan, and the .err
  cut before its last line: a file still being written, with no evidence it is
  whole), and written whole when they become old. 0: old from the start; the number of scans: young
  until the final phase;
* some pilots lose their files (.out and .err, or only the .err) before some
  scan, never later than the scan at which their .out became old. So a
  deleted file was never read by the daemon, and a pilot whose .out is gone
  must be counted from its completed_jobs line or, ``lost_after_seconds``
  after its end, from the event log: by the daemon exactly as by a one-shot
  report on the final tree;
* the clock advances by a random step before each scan;
* crash points: after a scan, the Ingest is thrown away and a new one built
  from the checkpoint (a kill -9 after the last checkpoint write); or the
  process dies inside a scan, at the k-th pilot accounted (the sink raises),
  and a new Ingest starts from the checkpoint written before that phase.

Then the clock moves past ``lost_after_seconds + settle_seconds``, every
remaining file is made old, and the daemon scans twice. The expectation is
sound because no file is deleted after the daemon could have read it: the
final tree is exactly what a pilot's best source was when the daemon counted
it, so ``Ingest(settle_seconds=0)`` on the final tree (the report) is the
oracle. Pilots whose .out is deleted after it was read (counted from the .out
by the daemon, from a fallback by a later report) are deliberately not
generated. The clock never advances beyond ``seen_retention_seconds`` (2 d),
so forgetting counted pilots is not exercised here.

Asserted: (a) every finished ground-truth pilot (kind != "in_queue") is
counted exactly once; (b) per (entry, category, resource) the daemon's
totals equal the report's within 0.5 % (a cell on one side only must hold
less than 0.5 % of its entry's total of that resource).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gwms_obs.accounting.ledger import Ledger
from gwms_obs.accounting.pilot import PilotAccount
from gwms_obs.catalogue import Resource
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import GLIDEIN_NAME, SimPilot, SimulationSummary, simulate
from tests.support.arriving import cut_errs_of

N_PILOTS = 60
SEED = 6  # lost pilots, pilots with a .out but no completed_jobs line, GPU pilots: see the fixture
SETTLE = 30.0
LOST_AFTER = 3600.0
TOLERANCE = 0.005  # 0.5 %
MAX_SCANS = 5
MAX_STEP = 4000  # seconds; MAX_SCANS * MAX_STEP + LOST_AFTER + SETTLE stays well under 2 days

Cell = tuple[str, str, str]  # (entry, category, resource)


def ledger_cells(led: Ledger) -> dict[Cell, float]:
    """Canonical unit-seconds per (entry, category, resource), summed over client, site and accuracy."""
    out: dict[Cell, float] = {}
    for res, table in ((Resource.CPU.value, led.cpu), (Resource.GPU.value, led.gpu)):
        for (entry, _client, _site, category, _accuracy), v in table.items():
            out[(entry, category, res)] = out.get((entry, category, res), 0.0) + v
    return out


def cell_mismatches(got: dict[Cell, float], want: dict[Cell, float], tolerance: float = TOLERANCE) -> list[str]:
    """The cells where ``got`` is not ``want`` within ``tolerance`` (relative), one line each.

    A cell present on one side only (or zero on the other) may hold less than
    ``tolerance`` of its entry's total of that resource.
    """
    entry_total: dict[tuple[str, str], float] = {}
    for side in (got, want):
        per: dict[tuple[str, str], float] = {}
        for (e, _cat, r), v in side.items():
            per[(e, r)] = per.get((e, r), 0.0) + v
        for er, v in per.items():
            entry_total[er] = max(entry_total.get(er, 0.0), v)
    bad = []
    for cell in sorted(set(got) | set(want)):
        g, w = got.get(cell, 0.0), want.get(cell, 0.0)
        tot = entry_total[(cell[0], cell[2])]
        if abs(g) > 1e-9 and abs(w) > 1e-9:
            if abs(g - w) > tolerance * max(abs(g), abs(w)):
                bad.append(f"{cell}: got {g:.1f}, want {w:.1f} ({100 * (g - w) / w:+.2f} %)")
        elif max(abs(g), abs(w)) >= tolerance * tot:
            bad.append(f"{cell}: got {g:.1f}, want {w:.1f} (on one side only; entry total {tot:.1f})")
    return bad


@dataclass(frozen=True)
class Tree:
    root: Path
    summary: SimulationSummary = field(repr=False)
    with_out: tuple[SimPilot, ...] = field(repr=False)  # the pilots whose .out/.err the simulator wrote
    finished: int = 0  # ground-truth pilots that ended before the snapshot

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # Hypothesis prints this, not the ground truth
        p.text(repr(self))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    root = tmp_path_factory.mktemp("factory")
    s = simulate(root, N_PILOTS, seed=SEED, ground_truth=True)
    assert s.ground_truth is not None
    truth = s.ground_truth
    with_out = tuple(p for p in truth if p.has_out)
    for p in with_out:
        assert out_path(root, p).is_file() and out_path(root, p).with_suffix(".err").is_file()
    # The schedule is only interesting if every fallback has work: the seed gives
    # pilots counted from the event log alone, .out pilots with and without a line.
    assert any(p.kind == "lost" and not p.has_out for p in truth)
    assert any(p.completed_line for p in with_out)
    assert any(not p.completed_line for p in with_out)
    assert any(p.gpus for p in with_out)
    assert all(p.kind != "in_queue" for p in with_out)
    return Tree(root, s, with_out, sum(p.kind != "in_queue" for p in truth))


def out_path(root: Path, p: SimPilot) -> Path:
    entry_dir = root / "client" / f"user_{p.username}" / f"glidein_{GLIDEIN_NAME}" / f"entry_{p.entry}"
    return entry_dir / f"job.{p.cluster}.{p.proc}.out"


@dataclass(frozen=True)
class Schedule:
    start: int  # the fake clock at the start, seconds after the simulation's snapshot
    steps: tuple[int, ...]  # clock advance before each scan; len = number of scans before the final phase
    old_from: tuple[int, ...]  # per .out pilot: first scan (len(steps) = the final phase) its files are old at
    deletions: tuple[tuple[str, int] | None, ...]  # per .out pilot: ("both" | "err", before which scan)
    crashes: tuple[int, ...]  # per scan: 0 none, -1 restart after it, k > 0 killed at the k-th pilot accounted

    def __repr__(self) -> str:
        deleted = {j: d for j, d in enumerate(self.deletions) if d is not None}
        return (
            f"Schedule(start={self.start}, steps={self.steps}, crashes={self.crashes}, "
            f"old_from={''.join(map(str, self.old_from))!r}, deletions={deleted})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))


@st.composite
def schedules(draw: st.DrawFn, n_out: int) -> Schedule:
    scans = draw(st.integers(1, MAX_SCANS))
    steps = tuple(draw(st.lists(st.integers(0, MAX_STEP), min_size=scans, max_size=scans)))
    old_from = tuple(draw(st.lists(st.integers(0, scans), min_size=n_out, max_size=n_out)))
    deletions: list[tuple[str, int] | None] = []
    for i in range(n_out):
        if draw(st.integers(0, 3)) == 0:  # about one pilot in four
            deletions.append((draw(st.sampled_from(("both", "err"))), draw(st.integers(0, old_from[i]))))
        else:
            deletions.append(None)
    crashes = tuple(draw(st.lists(st.sampled_from((0, 0, -1, 1, 3, 10, 30)), min_size=scans, max_size=scans)))
    return Schedule(draw(st.integers(0, 2 * int(LOST_AFTER))), steps, old_from, tuple(deletions), crashes)


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Killed(BaseException):
    """kill -9 in the middle of a scan (not an Exception: nothing may catch it)."""


PilotKey = tuple[str, int, int]
Counted = tuple[str, dict[str, float]]  # (accuracy, i.e. the source; seconds by "category/resource")


class Recorder:
    """The Ingest's accounts outlet: remembers how each pilot was counted, and kills the process when armed."""

    def __init__(self) -> None:
        self.counted: dict[PilotKey, Counted] = {}  # the last time, for a diagnosis only
        self.kill_at = 0
        self.n = 0

    def arm(self, kill_at: int) -> None:
        self.kill_at, self.n = kill_at, 0

    def __call__(self, acc: PilotAccount) -> None:
        if acc.key is not None:
            secs = {f"{c.value}/cpu": v for c, v in acc.partition.cpu.items()}
            secs.update({f"{c.value}/gpu": v for c, v in acc.partition.gpu.items()})
            self.counted[acc.key] = (acc.partition.accuracy.value, secs)
        self.n += 1
        if self.n == self.kill_at:
            raise Killed


def set_mtime(path: Path, t: float) -> None:
    if path.exists():
        os.utime(path, (t, t))


@dataclass
class Outcome:
    daemon: Ingest  # after the final scans
    report: Ingest  # one-shot on the final tree
    daemon_counted: dict[PilotKey, Counted]  # as the daemon last counted each pilot
    report_counted: dict[PilotKey, Counted]


def play(t: Tree, plan: Schedule, work: Path) -> Outcome:
    """Run the schedule on a fresh copy of the tree."""
    root = work / "factory"
    shutil.copytree(t.root, root, symlinks=True)
    clock = FakeClock(t.summary.snapshot + plan.start)
    # Logs, descripts, status: settled long ago. Pilot files: as the schedule says, below.
    for dirpath, _, names in os.walk(root):
        for name in names:
            set_mtime(Path(dirpath, name), clock.t - 2 * 3600)
    cfg = IngestConfig(
        factory_dir=str(root),
        checkpoint=str(work / "state" / "checkpoint.json"),
        settle_seconds=SETTLE,
        lost_after_seconds=LOST_AFTER,
    )
    rec = Recorder()
    ing = Ingest(cfg, clock=clock, outlets=Outlets(accounts=rec))
    scans = len(plan.steps)
    aged = [False] * len(t.with_out)
    # A pilot young at the first scan is still arriving: its .err lacks its last line, so
    # no evidence says its files are whole (ingest/glidein_files.py), until it is old.
    whole = {j: out_path(root, p).with_suffix(".err").read_bytes() for j, p in enumerate(t.with_out)}
    for j, p in enumerate(t.with_out):
        if plan.old_from[j] > 0:
            cut_errs_of([out_path(root, p).with_suffix(".err")])
    for i in range(scans + 1):
        clock.t += plan.steps[i] if i < scans else LOST_AFTER + SETTLE + 1
        for j, p in enumerate(t.with_out):
            out = out_path(root, p)
            err = out.with_suffix(".err")
            d = plan.deletions[j]
            if d is not None and d[1] == i:
                err.unlink(missing_ok=True)
                if d[0] == "both":
                    out.unlink(missing_ok=True)
            if i < plan.old_from[j]:
                set_mtime(out, clock.t)  # still being written
                set_mtime(err, clock.t)
            elif not aged[j]:
                if err.exists():
                    err.write_bytes(whole[j])  # arrived whole
                set_mtime(out, clock.t - SETTLE - 1)
                set_mtime(err, clock.t - SETTLE - 1)
                aged[j] = True
        if i == scans:
            ing.scan()
            ing.scan()
            break
        crash = plan.crashes[i]
        if crash > 0:
            rec.arm(crash)
            try:
                ing.scan()
            except Killed:
                ing = Ingest(cfg, clock=clock, outlets=Outlets(accounts=rec))  # restarted from the checkpoint on disk
            rec.arm(0)
        else:
            ing.scan()
            if crash < 0:
                ing = Ingest(cfg, clock=clock, outlets=Outlets(accounts=rec))
    rep = Recorder()
    report = Ingest(
        IngestConfig(factory_dir=str(root), settle_seconds=0.0, lost_after_seconds=LOST_AFTER),
        clock=clock,
        outlets=Outlets(accounts=rep),
    )
    report.scan()
    return Outcome(ing, report, rec.counted, rep.counted)


def diagnosis(t: Tree, plan: Schedule, o: Outcome, limit: int = 12) -> list[str]:
    """Pilots the daemon counted otherwise than the report (another source, or other seconds from the
    same source), with what the schedule did to them."""
    idx = {(p.entry, p.cluster, p.proc): j for j, p in enumerate(t.with_out)}
    none: Counted = ("not counted", {})
    lines = []
    for k in sorted(set(o.daemon_counted) | set(o.report_counted)):
        (a, sa), (b, sb) = o.daemon_counted.get(k, none), o.report_counted.get(k, none)
        j = idx.get(k)
        how = "no .out" if j is None else f"old from scan {plan.old_from[j]}, deleted {plan.deletions[j]}"
        if a != b:
            lines.append(f"{k[0]}/{k[1]}.{k[2]}: daemon {a}, report {b} ({how})")
        elif any(abs(sa.get(c, 0.0) - sb.get(c, 0.0)) > 0.5 for c in set(sa) | set(sb)):
            diff = {c: (round(sa.get(c, 0.0)), round(sb.get(c, 0.0))) for c in sorted(set(sa) | set(sb))}
            lines.append(f"{k[0]}/{k[1]}.{k[2]}: both {a}, seconds (daemon, report) {diff} ({how})")
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    # No shrinking: a schedule has ~50 pilots and shrinking one takes minutes; a
    # failure says instead which pilots the daemon took from which source.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(data=st.data())
def test_daemon_under_any_schedule_ends_with_the_reports_numbers(
    tree: Tree, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    plan = data.draw(schedules(len(tree.with_out)), label="schedule")
    o = play(tree, plan, tmp_path_factory.mktemp("example"))
    why = "\npilots counted otherwise than by the report:\n" + "\n".join(diagnosis(tree, plan, o))
    assert sum(o.report.ledger.pilots.values()) == tree.finished  # the oracle itself counts every pilot
    assert sum(o.daemon.ledger.pilots.values()) == tree.finished, "a pilot counted twice or never" + why
    bad = cell_mismatches(ledger_cells(o.daemon.ledger), ledger_cells(o.report.ledger))
    assert not bad, "daemon vs report, per (entry, category, resource):\n" + "\n".join(bad) + why
