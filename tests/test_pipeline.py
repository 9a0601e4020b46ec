"""The incremental scan on a simulated factory: every pilot once, exact totals,
checkpoint/restart, rotation, hostile files."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from gwms_obs.accounting.ledger import Ledger
from gwms_obs.catalogue import Category, Outcome
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import SimulationSummary, simulate
from gwms_obs.sources.condor_sections import encode
from tests.support.simulated import simulated_factory, truth

N = 500


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationSummary]:
    return simulated_factory(tmp_path_factory, N, seed=11)


def scan(root: Path, checkpoint: Path | None = None, **kw: float) -> Ingest:
    ing = Ingest(
        IngestConfig(
            factory_dir=str(root), checkpoint=str(checkpoint) if checkpoint else None, settle_seconds=0.0, **kw
        )
    )
    ing.scan()
    return ing


def by(led: Ledger, idx: int, table: str = "cpu") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in getattr(led, table).items():
        out[k[idx]] = out.get(k[idx], 0.0) + v
    return out


def test_every_finished_pilot_counted_once(factory: tuple[Path, SimulationSummary]) -> None:
    root, s = factory
    ing = scan(root)
    finished = [p for p in truth(s) if p.kind != "in_queue"]
    assert sum(ing.ledger.pilots.values()) == len(finished)
    outcomes = by(ing.ledger, 3, "pilots")
    assert outcomes[Outcome.LOST] == sum(p.kind == "lost" for p in finished)
    assert outcomes[Outcome.VALIDATION_FAILED] == sum(p.kind == "validation_failed" for p in finished)
    assert outcomes[Outcome.NO_MATCH] == sum(p.kind == "no_match" for p in finished)
    assert ing.errors.total() == 0, ing.errors.counts


def test_core_seconds_sum_to_cores_times_lifetime(factory: tuple[Path, SimulationSummary]) -> None:
    root, s = factory
    ing = scan(root)
    expected = 0.0
    undetected = 0
    for p in truth(s):
        if p.has_out:
            assert p.startup is not None and p.glidein_end is not None
            out = root / "client" / f"user_{p.username}" / "glidein_gfactory_instance" / f"entry_{p.entry}"
            if b"Setting GLIDEIN_CPUS=" not in (out / f"job.{p.cluster}.{p.proc}.out").read_bytes():
                # Failed before detecting its cores: only the entry's estimate is known.
                d = ing.defaults[p.entry]
                cpus = d.cpus or 1
                undetected += 1
            else:
                cpus = p.cpus
            expected += cpus * (p.glidein_end - p.startup)
    got = sum(v for k, v in ing.ledger.cpu.items() if k[4] != "condor_event_log")
    assert got == pytest.approx(expected, rel=1e-9)
    assert undetected > 0  # the simulator does produce such pilots


def test_misbehaving_entries_show_their_category(factory: tuple[Path, SimulationSummary]) -> None:
    root, _ = factory
    led = scan(root).ledger

    def share(entry_part: str, cat: Category) -> float:
        rows = {k: v for k, v in led.cpu.items() if entry_part in k[0]}
        total = sum(rows.values())
        return sum(v for k, v in rows.items() if k[3] == cat.value) / total

    # Failed pilots live ~20 min against hours for good ones, so the time share is smaller than the pilot share.
    assert share("FAIL_VALIDATION", Category.VALIDATION_FAILED) > 0.05
    assert share("FAIL_VALIDATION", Category.VALIDATION_FAILED) > 20 * share("Nebraska", Category.VALIDATION_FAILED)
    assert share("NOMATCH", Category.DECISION_PROBLEM) > 0.3
    assert share("PREEMPT", Category.PREEMPTION_BADPUT) > 0.05
    assert share("BLACKHOLE", Category.MISCONFIGURATION_BADPUT) > 0.01
    assert share("Nebraska", Category.MISCONFIGURATION_BADPUT) < 0.001
    assert share("Nebraska", Category.GOODPUT) > 0.5
    assert share("PREEMPT", Category.PREEMPTION_BADPUT) > 10 * share("Nebraska", Category.PREEMPTION_BADPUT)
    gpu_entries = {k[0] for k in led.gpu}
    assert gpu_entries and all("GPU" in e for e in gpu_entries)


def test_restart_neither_recounts_nor_loses(factory: tuple[Path, SimulationSummary], tmp_path: Path) -> None:
    root, _ = factory
    ref = scan(root).ledger.to_json()
    ck = tmp_path / "state" / "checkpoint.json"
    scan(root, ck)
    again = scan(root, ck)  # a restart: new process, same checkpoint, nothing new
    assert again.ledger.to_json() == ref


def test_crash_mid_scan_then_restart_equals_clean_run(factory: tuple[Path, SimulationSummary], tmp_path: Path) -> None:
    root, _ = factory
    ref = scan(root).ledger.to_json()
    ck = tmp_path / "checkpoint.json"
    seen = 0

    def dies(_: object) -> None:
        nonlocal seen
        seen += 1
        if seen == 150:
            raise KeyboardInterrupt  # the process is killed mid-scan

    ing = Ingest(
        IngestConfig(factory_dir=str(root), checkpoint=str(ck), settle_seconds=0.0), outlets=Outlets(accounts=dies)
    )
    with pytest.raises(KeyboardInterrupt):
        ing.scan()
    assert scan(root, ck).ledger.to_json() == ref


def test_new_files_after_a_scan_are_counted_once(tmp_path: Path) -> None:
    root = tmp_path / "f"
    simulate(root, 60, seed=5)
    ck = tmp_path / "ck.json"
    first = scan(root, ck)
    n0 = sum(first.ledger.pilots.values())
    # A second factory's worth of files appears (new clusters): moved in, as HTCondor-G would.
    other = tmp_path / "g"
    simulate(other, 60, seed=6, start=1_760_000_000.0)  # later clusters, still in the past
    moved = 0
    for src in other.glob("client/user_*/glidein_*/entry_*/job.*"):
        dst = root / src.relative_to(other)
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            moved += src.suffix == ".out"
    second = scan(root, ck)
    assert sum(second.ledger.pilots.values()) == n0 + moved
    assert sum(scan(root, ck).ledger.pilots.values()) == n0 + moved


def test_completed_jobs_rotation_and_deletion(tmp_path: Path) -> None:
    root = tmp_path / "f"
    simulate(root, 80, seed=8)
    # Only completed_jobs lines are left (the .out were cleaned up): they become the source.
    for p in root.glob("client/user_*/glidein_*/entry_*/job.*"):
        p.unlink()
    ck = tmp_path / "ck.json"
    ing = scan(root, ck, lost_after_seconds=1e12)
    n_lines = sum(len(p.read_bytes().splitlines()) for p in root.glob("server/entry_*/completed_jobs_*.log"))
    assert ing.health.records["completed_jobs"] == n_lines
    counted = sum(ing.ledger.pilots.values())
    assert 0 < counted <= n_lines
    # Rotation: a log replaced by a new file (new inode) with one old and one new line.
    log = sorted(root.glob("server/entry_*/completed_jobs_*.log"))[0]
    old_lines = log.read_bytes().splitlines(keepends=True)
    new_line = old_lines[0].replace(b'id="', b'id="9').replace(b"id=\"9b'", b"id=\"b'9")
    log.unlink()
    log.write_bytes(old_lines[0] + new_line)
    again = scan(root, ck, lost_after_seconds=1e12)
    assert sum(again.ledger.pilots.values()) == counted + 1  # the old line is known, the new one counted
    # Deletion: the cursor is forgotten, nothing breaks.
    log.unlink()
    assert sum(scan(root, ck, lost_after_seconds=1e12).ledger.pilots.values()) == counted + 1


def test_hostile_files_do_not_stop_the_scan(tmp_path: Path) -> None:
    root = tmp_path / "f"
    simulate(root, 60, seed=9)
    good = scan(root)
    n_good = sum(good.ledger.pilots.values())
    edir = next(root.glob("client/user_*/glidein_*/entry_*"))
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;">'
        b'<!ENTITY c "&b;&b;&b;&b;&b;&b;">]><OSGTestResult><r>&c;</r></OSGTestResult>'
    )
    hostile = {
        "job.990001.0": (b"\xff\xfe garbage \x00\x01" * 1000, b""),
        "job.990002.0": (b"Starting glidein_startup.sh at x (1700000000)\n" + b"A" * (50 << 20) + b"\n", b""),
        "job.990003.0": (
            b"Starting glidein_startup.sh at x (1700000000)\n"
            b"=== Glidein ending x (1700000100) with code 1 after 100 ===\n"
            b"=== XML description of glidein activity ===\n"
            + bomb
            + b"\n=== End XML description of glidein activity ===\n",
            b"",
        ),
        "job.990004.0": (
            b"Starting glidein_startup.sh at x (1700000000)\n=== Condor starting x (1700000010) ===\n"
            b"=== Condor ended x (1700000090) after 80 ===\n"
            b"=== Glidein ending x (1700000100) with code 0 after 100 ===\n",
            encode("StartdHistoryLog", b"x")[:-40] + b"!!!!\n====\n" + encode("MasterLog", b"ok"),
        ),
        "job.990005.0": (gzip.compress(b"binary") * 100, os.urandom(5000)),
    }
    for stem, (out, err) in hostile.items():
        (edir / f"{stem}.out").write_bytes(out)
        (edir / f"{stem}.err").write_bytes(err)
    ing = scan(root)
    reasons = {r for (_, r) in ing.errors.counts}
    assert ing.errors.total() > 0
    assert "xml_forbidden" in reasons
    assert {"bad_base64", "bad_gzip"} & reasons
    # Every good pilot is still counted; the readable hostile ones too, the rest skipped.
    assert sum(ing.ledger.pilots.values()) >= n_good
