"""Which source wins (docs/accounting.md) and the fallback paths, with hand-computed values.

Precedence is checked on a small simulated factory with a controllable clock;
each fallback fix on one hand-made record, its expectation worked out from the
formats reference (shared/reference/glideinwms-formats.md §1.2, §1.4, §2.3).
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from gwms_obs.accounting.ledger import Ledger
from gwms_obs.accounting.partition import JobTotals, PilotUsage, partition_from_totals
from gwms_obs.accounting.pilot import EntryDefaults, from_completed_job, line_total_is_raw, stats_totals
from gwms_obs.catalogue import Accuracy, Category, Source
from gwms_obs.ingest.books import EntryEvidence
from gwms_obs.ingest.descript import resource_slots_gpus
from gwms_obs.model import CompletedJob, GlideinOut, SlotStat, StatsFormat
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from tests.support.arriving import cut_errs, finish


def line(**kw: object) -> CompletedJob:
    """The formats doc's verified v3.10.12 example: 8-core glidein, one 3600 s exit-0 job and
    one 1800 s signal-9 job: (Real) Total 5400 s, normalized goodZ 450 s, badSignal 225 s."""
    base: dict[str, object] = dict(
        terminated=1_782_000_900.0,
        client="fermilab_okd_gpfe01_frontend",
        username="fefermilab",
        cluster=10176593,
        proc=0,
        duration=8376,
        condor_started=True,
        condor_duration=8307,
        jobsnr=2,
        user_duration=5400,
        goodput=450,
        user_terminated=450,
        waste_validation=7,
        waste_idle=0,
        waste_nosuccess=0,
        waste_badput=0,
        half_normalized=False,
        entry="E",
    )
    base.update(kw)
    return CompletedJob(**base)  # type: ignore[arg-type]


EIGHT = EntryDefaults(site="S", cpus=8, cpus_fixed=True, memory_mb=16000)


# --- raw Total (v3.10.12+) -------------------------------------------------------------------------
def test_raw_total_the_line_alone_cannot_show_is_taken_from_the_entry() -> None:
    # user/@duration 5400 < condor_duration 8307: the old "> condor × 1.01" rule misses it.
    raw = line()
    assert line_total_is_raw(raw, 8) is None
    ev = EntryEvidence()
    ev.note(10176590, raw=True)  # an earlier pilot of the entry wrote (Real) lines
    assert ev.raw_total(raw.cluster)
    acc = from_completed_job(raw, EIGHT, raw_total=True)
    assert acc is not None
    # exited: 450 normalized × 8 = 3600 core-s; the rest of the raw 5400 (the signal kill,
    # 1800) is goodput by the signal rule: 5400 in all, not 5400 × 8.
    assert acc.partition.cpu[Category.GOODPUT] == pytest.approx(5400)
    assert Category.MISCONFIGURATION_BADPUT not in acc.partition.cpu
    wrong = from_completed_job(raw, EIGHT, raw_total=False)
    assert wrong is not None and wrong.partition.cpu[Category.GOODPUT] == pytest.approx(43200)


def test_a_normalized_line_shows_itself() -> None:
    # v3.10.11: Total normalized (675 = 5400/8); 8 × terminated 450 = 3600 > 675: not raw.
    assert line_total_is_raw(line(user_duration=675), 8) is False
    assert line_total_is_raw(line(user_duration=20000, condor_duration=8307, half_normalized=True), 8) is True
    # An entry whose GLIDEIN_CPUS is auto: N unknown, the line shows nothing.
    assert line_total_is_raw(line(user_duration=675), None) is None


def test_entry_evidence_follows_the_upgrade() -> None:
    ev = EntryEvidence()
    assert not ev.raw_total(5)  # nothing seen: normalized, as before v3.10.12
    ev.note(100, raw=False)
    ev.note(200, raw=True)
    assert not ev.raw_total(99) and not ev.raw_total(100)
    assert ev.raw_total(150) and ev.raw_total(300)


# --- GPUs, signal kills, claims, counts, end ------------------------------------------------------
def test_gpus_from_the_entry_on_every_path_without_job_ads() -> None:
    assert resource_slots_gpus("GPUs,2,type=main") == 2
    assert resource_slots_gpus("ioslot,1;GPUs,4,type=partitionable") == 4
    assert resource_slots_gpus("ioslot,1") is None and resource_slots_gpus(None) is None
    d = EntryDefaults(cpus=8, cpus_fixed=True, gpus=2)
    acc = from_completed_job(line(user_duration=675), d)
    assert acc is not None and acc.gpus == 2
    assert sum(acc.partition.gpu.values()) == pytest.approx(2 * 8376)
    # The GPU time splits like the CPU time of HTCondor's life: goodput 5400 / (8 × 8307).
    assert acc.partition.gpu[Category.GOODPUT] == pytest.approx(2 * 8307 * 5400 / (8 * 8307))


def test_signal_kills_one_rule_on_stats_and_line_paths() -> None:
    out = GlideinOut(path="x", stats_format=StatsFormat.REAL, normalization=8)
    out.stats = {
        "Total": SlotStat(1, 675),
        "goodZ": SlotStat(0, 450),
        "goodNZ": SlotStat(0, 0),
        "badSignal": SlotStat(1, 225),
        "badOther": SlotStat(0, 0),
    }
    t = stats_totals(out, 8)
    assert t is not None and t.goodput == 5400 and t.misconfiguration == 0  # signal kill: goodput
    # The line: 675 × 8 = 5400 in all, 450 × 8 = 3600 exited; the 1800 s signal kill is goodput too.
    acc = from_completed_job(line(user_duration=675), EIGHT)
    assert acc is not None and acc.partition.cpu[Category.GOODPUT] == pytest.approx(5400)
    assert Category.MISCONFIGURATION_BADPUT not in acc.partition.cpu


def test_claims_without_stats_totals_are_unknown() -> None:
    u = PilotUsage(start=0, end=1000, cpus=4, memory_mb=None, condor_started=True, condor_start=100, condor_end=900)
    p = partition_from_totals(u, JobTotals(), Accuracy.STATS, claims=3)  # all jobs preempted
    assert p.cpu == {Category.OVERHEAD: 4 * 200, Category.UNKNOWN: 4 * 800} and p.accuracy is Accuracy.NONE
    p = partition_from_totals(u, JobTotals(), Accuracy.STATS, claims=0)
    assert p.cpu == {Category.DECISION_PROBLEM: 4 * 1000}
    # The line path: no job time, HTCondor ran 8307 s, far beyond GLIDEIN_Max_Idle 1200 s.
    d = EntryDefaults(cpus=8, cpus_fixed=True, max_idle=1200)
    acc = from_completed_job(line(jobsnr=0, user_duration=0, goodput=0, user_terminated=0), d)
    assert acc is not None and set(acc.partition.cpu) == {Category.OVERHEAD, Category.UNKNOWN}
    short = line(jobsnr=0, user_duration=0, goodput=0, user_terminated=0, condor_duration=1300, duration=1400)
    acc = from_completed_job(short, d)
    assert acc is not None and set(acc.partition.cpu) == {Category.DECISION_PROBLEM}


def test_job_counts_from_the_real_line() -> None:
    out = GlideinOut(path="x", stats_format=StatsFormat.REAL, normalization=8)
    out.stats_real_total = SlotStat(24, 86400)
    out.stats = {
        "Total": SlotStat(3, 10800),
        "goodZ": SlotStat(2, 9000),
        "goodNZ": SlotStat(0, 0),
        "badSignal": SlotStat(0, 0),
        "badOther": SlotStat(1, 1800),
    }
    t = stats_totals(out, 8)
    assert t is not None
    # 24 real jobs, split 2:1 as the normalized counts.
    assert t.jobs == {Category.GOODPUT: 16, Category.MISCONFIGURATION_BADPUT: 8}


def test_line_path_end_is_the_event_logs_not_the_write_time() -> None:
    end = 1_782_000_000.0  # 900 s before the factory wrote the line
    acc = from_completed_job(line(user_duration=675), EIGHT, end=end)
    assert acc is not None and acc.end == end and acc.start == end - 8376
    acc = from_completed_job(line(user_duration=675), EIGHT)
    assert acc is not None and acc.end == 1_782_000_900.0


# --- precedence in the scan -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fallbacks")
    simulate(root, 120, seed=31)
    return root


def cells(led: Ledger) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = defaultdict(float)
    for k, v in led.cpu.items():
        out[(k[0], k[3])] += v
    return dict(out)


def pilots(led: Ledger) -> int:
    return sum(led.pilots.values())


def age(root: Path, when: float) -> None:
    for dirpath, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(dirpath, n), (when, when))


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_young_out_wins_over_its_line_and_event_log(tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "f"
    shutil.copytree(tree, root)
    clock = Clock(4_000_000_000.0)
    age(root, clock.t)  # every file just written
    whole = cut_errs(root, clock.t)  # and still arriving
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=30), clock=clock)
    first = ing.scan()
    # Nothing that has a .out was counted from a fallback (only pilots with no .out at all).
    assert first.by_source.get(Source.COMPLETED_JOBS, 0) == 0
    assert ing.held(Source.COMPLETED_JOBS) and ing.held(Source.CONDOR_EVENT_LOG)
    finish(whole, clock.t)
    clock.t += 31
    ing.scan()
    report = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0, final=True))
    report.scan()
    assert pilots(ing.ledger) == pilots(report.ledger)
    a, b = cells(ing.ledger), cells(report.ledger)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-9), k
    assert not ing.held(Source.COMPLETED_JOBS) and not ing.held(Source.CONDOR_EVENT_LOG)
    # One frontend, one label value: the completed_jobs name on every path.
    assert {k[1] for k in ing.ledger.pilots} <= {
        "CMSG-v1_0_cmspilot",
        "OSG_Flock_frontend",
        "fermilab_okd_gpfe01_frontend",
    }


def test_clock_skew_a_future_mtime_settles_by_our_clock(tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "f"
    shutil.copytree(tree, root)
    clock = Clock(4_000_000_000.0)
    age(root, clock.t + 7200)  # the file server's clock is two hours ahead
    cut_errs(root, clock.t + 7200)  # and the files are still arriving: no evidence they are whole
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=30), clock=clock)
    ing.scan()
    assert ing.health.records[Source.GLIDEIN_OUT] == 0
    clock.t += 10
    ing.scan()
    assert ing.health.records[Source.GLIDEIN_OUT] == 0  # unchanged for 10 s only
    clock.t += 25
    ing.scan()  # unchanged for 35 s by our clock: settled
    assert ing.health.records[Source.GLIDEIN_OUT] > 0 and not ing.held(Source.COMPLETED_JOBS)


def test_out_deleted_before_it_was_read_falls_back_once(tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "f"
    shutil.copytree(tree, root)
    clock = Clock(4_000_000_000.0)
    age(root, clock.t)
    whole = cut_errs(root, clock.t)
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=30), clock=clock)
    ing.scan()
    waiting_lines = set(ing.held(Source.COMPLETED_JOBS))
    assert waiting_lines
    gone = sorted(waiting_lines)[:5]
    for k in gone:
        entry, cp = k.rsplit("/", 1)
        for out in root.glob(f"client/*/*/entry_{entry}/job.{cp}.out"):
            out.unlink()
            out.with_suffix(".err").unlink(missing_ok=True)
    finish(whole, clock.t)
    clock.t += 31
    res = ing.scan()
    assert res.by_source[Source.COMPLETED_JOBS] == len(gone)
    n = pilots(ing.ledger)
    # The .out "appears" again after its line was counted: never counted twice.
    clock.t += 31
    assert ing.scan().pilots == 0 and pilots(ing.ledger) == n
    report = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0, final=True))
    report.scan()
    assert pilots(report.ledger) == n


def test_lag_is_the_age_of_the_oldest_unaccounted_input(tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "f"
    shutil.copytree(tree, root)
    clock = Clock(4_000_000_000.0)
    age(root, clock.t - 20)
    cut_errs(root, clock.t - 20)
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=30), clock=clock)
    ing.scan()
    assert ing.health.lag(clock.t)[Source.GLIDEIN_OUT] == pytest.approx(20)
    clock.t += 15
    ing.scan()
    assert ing.health.lag(clock.t) == dict.fromkeys(ing.health.lag(clock.t), 0.0)
    clock.t += 3600  # an idle factory: no lag however long nothing happens
    ing.scan()
    assert max(ing.health.lag(clock.t).values()) == 0.0


def test_config_sets_the_line_format_and_frontend_names(tmp_path: Path) -> None:
    from gwms_obs.config import ConfigError, from_dict

    cfg = from_dict({"completed_total": "raw", "clients": {"fefermilab": "fermilab_okd_gpfe01_frontend"}})
    ic = cfg.ingest
    assert ic.completed_total == "raw" and ic.client_map == {"fefermilab": "fermilab_okd_gpfe01_frontend"}
    for bad in ({"completed_total": "sometimes"}, {"clients": {"u": 3}}, {"clients": "u"}):
        with pytest.raises(ConfigError):
            from_dict(bad)
    ing = Ingest(IngestConfig(factory_dir=str(tmp_path), client_map=ic.client_map))
    assert ing.client_of("fefermilab") == "fermilab_okd_gpfe01_frontend" and ing.client_of("x") is None


def test_a_non_ascii_byte_in_a_line_does_not_stop_the_scan(tmp_path: Path) -> None:
    root = tmp_path / "f"
    server = root / "server" / "entry_E"
    server.mkdir(parents=True)
    good = completed_line_bytes(10176593, b"fefermilab")
    odd = completed_line_bytes(10176594, b"fe\xe9\xffuser")
    (server / "completed_jobs_20260601.log").write_bytes(good + odd)
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0, final=True))
    res = ing.scan()  # raised UnicodeDecodeError before: every later source skipped
    assert res.by_source[Source.COMPLETED_JOBS] == 2
    assert ing.health.last_scan_end is not None


def completed_line_bytes(cluster: int, username: bytes) -> bytes:
    from gwms_obs.simulate.formats import completed_line

    text = completed_line(1_782_000_900, "fermilab_okd_gpfe01_frontend", "USER", f"b'{cluster}.000'",
                          (8376, 1, 8307, 2, 675, 450, 450, 7, 0, 0, 0))  # fmt: skip
    return text.encode().replace(b'username="USER"', b'username="' + username + b'"')
