"""The simulator's labelled anomalies (issue 12): off by default, visible in the files when on.

A tree without anomalies is the tree the simulator wrote before they existed
(pinned hashes); with them, each anomaly shows in the files the exporter reads
(slow script durations in the .err's long XML, validation failures over time,
job ads above their request) and ``anomalies.json`` names exactly what is
labelled.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import SimulationSummary, simulate
from gwms_obs.simulate.plan import SimPilot, script_times
from gwms_obs.simulate.scenario import ANOMALY_ENTRIES, DEFAULT_ENTRIES, OPERATOR_ENTRIES, EntrySpec, fleet
from gwms_obs.sources.condor_sections import decode, iter_sections
from gwms_obs.sources.glidein_err import parse_err

SLOW = next(e for e in ANOMALY_ENTRIES if e.slow_script)
DRIFT = next(e for e in ANOMALY_ENTRIES if e.drift)
HOG = next(e for e in ANOMALY_ENTRIES if e.hog)

# What simulate(150 pilots, seed 3) and simulate(400, seed 11) wrote before anomalies existed:
# every file but the .err byte for byte, and the .err with its StartdHistoryLog ads stripped of
# the resource-usage attributes added since (and their banners' offsets, which those shift).
# Re-pinned once, for the held glideins' 012 events alone (2a5e8bf: a hold reason and codes as
# HTCondor writes them instead of a 029's text with Code 0 Subcode 0); the .err hashes did not move.
_PINNED = {
    (150, 3): (
        "755fcd4b37d5473cd3949338471383dc2c998194c0324fcd198f9f522489c46d",
        "1181d4e5e52b97b1d6bf3ca6948b9110f14282329906de5fe382e9228b9d44fe",
    ),
    (400, 11): (
        "30b4dc74c808aa13cbc266cded36f6808f727ba12c74b373b9b6f77abe120722",
        "3e31e0708aa64b7b1e2783de175ecfb8bf67877a001d380f3a491c11016f6b52",
    ),
}
_USAGE_LINE = re.compile(rb"^(MemoryUsage|ResidentSetSize|RemoteUserCpu|RemoteSysCpu) = .*\n", re.M)
_OFFSET = re.compile(rb"^\*\*\* Offset = \d+ ", re.M)


def _canonical_err(data: bytes) -> bytes:
    """The .err with each StartdHistoryLog replaced by its decoded ads, usage lines and offsets dropped."""
    for sec in iter_sections(data):
        if sec.name == "StartdHistoryLog" and sec.payload is not None:
            ads = _OFFSET.sub(b"*** Offset = _ ", _USAGE_LINE.sub(b"", decode(sec.payload, 1 << 30)))
            data = data.replace(sec.payload, ads)
    return data


# The entry processes' own logs, written since (simulate/write/factory_log.py; tests/test_factory_log.py
# holds them to the plan), and the VO frontends' monitor dirs (simulate/write/frontend_status.py;
# tests/test_frontend_status_writer.py holds them to GlideinWMS's writer): files added beside the
# pinned tree, which stays what it was.
_FACTORY_LOG = re.compile(r".+\.(?:info|err)\.log")
_FRONTEND_DIR = "frontend"


def _hashes(root: Path) -> tuple[str, str]:
    """(hash of every file but the .err, hash of the canonical .err files), paths included."""
    other, err = hashlib.sha256(), hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not _FACTORY_LOG.fullmatch(p.name) and p.relative_to(root).parts[0] != _FRONTEND_DIR:
            h, data = (err, _canonical_err(p.read_bytes())) if p.suffix == ".err" else (other, p.read_bytes())
            h.update(str(p.relative_to(root)).encode())
            h.update(data)
    return other.hexdigest(), err.hexdigest()


@pytest.mark.parametrize(("pilots", "seed"), sorted(_PINNED))
def test_default_tree_is_what_it_was(tmp_path: Path, pilots: int, seed: int) -> None:
    s = simulate(tmp_path, pilots, seed=seed)
    assert _hashes(tmp_path) == _PINNED[pilots, seed]
    assert not (tmp_path / "anomalies.json").exists() and s.pilots == pilots


def test_entry_spec_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="not a validation script"):
        EntrySpec("e", "s", "g", ("osg",), slow_script="main/nope.sh")
    with pytest.raises(ValueError, match="shares"):
        EntrySpec("e", "s", "g", ("osg",), hog=1.5)
    with pytest.raises(ValueError, match="shares"):
        EntrySpec("e", "s", "g", ("osg",), validation_failure=0.5, drift=0.6)
    assert not any(e.slow_script or e.drift or e.hog for e in DEFAULT_ENTRIES)
    assert all(e.anomalous for e in ANOMALY_ENTRIES)


def test_fleet_with_anomalies() -> None:
    assert fleet(20) == fleet(20, anomalies=False)
    f = fleet(30, anomalies=True)
    assert len(f) == 30 and len({e.name for e in f}) == 30
    assert sum(bool(e.slow_script) for e in f) == sum(bool(e.hog) for e in f) == sum(bool(e.drift) for e in f) == 3
    assert not any(e.slow_script or e.hog or e.drift for e in fleet(30))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationSummary]:
    out = tmp_path_factory.mktemp("anomalies")
    return out, simulate(out, 1200, seed=5, anomalies=True, ground_truth=True, span_hours=168)


def _pilots(s: SimulationSummary) -> list[SimPilot]:
    assert s.ground_truth is not None
    return s.ground_truth


def _err_path(root: Path, p: SimPilot) -> Path:
    return (
        root / "client" / f"user_{p.username}" / "glidein_gfactory_instance" / f"entry_{p.entry}"
        / f"job.{p.cluster}.{p.proc}.err"
    )  # fmt: skip


def test_slow_script_is_slow_in_the_files(tree: tuple[Path, SimulationSummary]) -> None:
    """The slow script's duration, read back from the .err's long XML, is ~factor x the fleet's; the others are not."""
    root, s = tree
    durations: dict[tuple[bool, str], list[float]] = defaultdict(list)
    for p in _pilots(s):
        if not p.has_out or p.entry not in (SLOW.name, "CMSHTPC_T2_US_Nebraska_red", "OSG_US_GPU_ce"):
            continue
        err = parse_err(_err_path(root, p).read_bytes(), "x.err", ParseErrors())
        for sc in err.scripts:
            if sc.start is not None and sc.end is not None and sc.name.startswith("main/"):
                durations[p.entry == SLOW.name, sc.name].append(sc.end - sc.start)
    slow = statistics.mean(durations[True, SLOW.slow_script])
    usual = statistics.mean(durations[False, SLOW.slow_script])
    assert 0.75 * SLOW.slow_script_factor <= slow / usual <= 1.25 * SLOW.slow_script_factor
    other = "main/validate_node.sh"
    assert 0.75 <= statistics.mean(durations[True, other]) / statistics.mean(durations[False, other]) <= 1.25
    at_entry = [p for p in _pilots(s) if p.entry == SLOW.name and p.validation_end is not None]
    assert at_entry and all(p.slow_script == SLOW.slow_script for p in at_entry)
    assert not any(p.slow_script for p in _pilots(s) if p.entry != SLOW.name)


def test_drifting_entry_gets_worse(tree: tuple[Path, SimulationSummary]) -> None:
    """The drifting entry's later pilots fail validation more often than its earlier ones; a steady one's do not."""
    _, s = tree

    def halves(entry: str) -> tuple[float, float]:
        ps = sorted((p for p in _pilots(s) if p.entry == entry and p.has_out), key=lambda p: p.submitted)
        h = len(ps) // 2
        early, late = (sum(p.kind == "validation_failed" for p in part) / len(part) for part in (ps[:h], ps[h:]))
        return early, late

    early, late = halves(DRIFT.name)
    assert late - early >= DRIFT.drift / 4 and late > 1.5 * early
    early, late = halves("OSG_US_FAIL_VALIDATION_ce1")
    assert abs(late - early) < 0.2


def _ads(err: bytes) -> list[dict[str, str]]:
    """The StartdHistoryLog ads of a .err, attribute -> raw value."""
    ads: list[dict[str, str]] = []
    for sec in iter_sections(err):
        if sec.name == "StartdHistoryLog" and sec.payload is not None:
            for chunk in re.split(r"^\*\*\* Offset = .*\n", decode(sec.payload, 1 << 30).decode(), flags=re.M):
                if chunk.strip():
                    ads.append(dict(line.split(" = ", 1) for line in chunk.splitlines()))
    return ads


def _overuse(ad: dict[str, str]) -> tuple[bool, bool]:
    """(memory above RequestMemory, CPU above 1.5 x wall x RequestCpus) as a detector reads the ad."""
    mem = int(ad["MemoryUsage"]) > int(ad["RequestMemory"])
    cpu = float(ad["RemoteUserCpu"]) + float(ad["RemoteSysCpu"])
    return mem, cpu > 1.5 * float(ad["RemoteWallClockTime"]) * int(ad["RequestCpus"])


def test_hog_jobs_exceed_their_request_and_the_rest_do_not(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    labels = json.loads((root / "anomalies.json").read_text())
    hog = next(a for a in labels["anomalies"] if a["kind"] == "resource_hog")
    labelled = {(j["pilot"], j["global_job_id"]): j for j in hog["jobs"]}
    seen: dict[str, int] = defaultdict(int)
    for p in _pilots(s):
        if not p.has_out or not p.jobs:
            continue
        for ad in _ads(_err_path(root, p).read_bytes()):
            mem, cpu = _overuse(ad)
            assert int(ad["ResidentSetSize"]) > 0 and float(ad["RemoteUserCpu"]) >= 0
            assert (int(ad["ResidentSetSize"]) + 1023) // 1024 == int(ad["MemoryUsage"])
            key = (f"{p.cluster}.{p.proc}", ad["GlobalJobId"].strip('"'))
            if key in labelled:
                j = labelled.pop(key)
                assert (mem, cpu) == (j["memory"], j["cpu"]) and (mem or cpu)
                if mem:
                    assert 1.5 <= int(ad["MemoryUsage"]) / int(ad["RequestMemory"]) <= 3.01
                seen["hog"] += 1
            else:
                assert not mem and not cpu, (p.entry, ad)
                seen["other"] += 1
            seen[p.entry == HOG.name] += 1
    assert not labelled  # every labelled job is in the tree
    # About the share asked for, at the hog entry only (the labelled jobs are all there).
    assert 0.2 <= seen["hog"] / seen[True] <= 0.4 and seen["other"] > seen["hog"]
    assert {j["pilot"].split(".")[0] for j in hog["jobs"]} <= {
        str(p.cluster) for p in _pilots(s) if p.entry == HOG.name
    }


def test_labels_name_exactly_the_anomalies(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    doc = json.loads((root / "anomalies.json").read_text())
    assert doc["version"] == 1 and doc["seed"] == 5 and doc["snapshot"] == s.snapshot
    kinds = {
        "black_hole",
        "slow_script",
        "resource_hog",
        "drift",
        "held",
        "ce_unreachable",
        "queue_slow",
        "submit_failing",
    }
    assert set(doc["kinds"]) == kinds and "leak" in doc["not_simulated"]
    by = {(a["kind"], a["entry"]): a for a in doc["anomalies"]}
    assert set(by) == {
        ("black_hole", "OSG_US_BLACKHOLE_ce"),
        ("slow_script", SLOW.name),
        ("resource_hog", HOG.name),
        ("drift", DRIFT.name),
        ("held", "OSG_US_AUTHFAIL_ce"),
        ("ce_unreachable", "CMSHTPC_T2_CEDOWN_ce"),
        ("queue_slow", "Fermilab_LONGQUEUE_ce"),
        ("submit_failing", "OSG_US_AUTHFAIL_ce"),
    }
    assert s.anomalies == dict.fromkeys(kinds, 1)
    sites = {e.name: e.site for e in (*DEFAULT_ENTRIES, *ANOMALY_ENTRIES, *OPERATOR_ENTRIES)}
    assert all(a["site"] == sites[a["entry"]] for a in doc["anomalies"])
    assert by["slow_script", SLOW.name]["params"] == {"script": "main/cvmfs_setup.sh", "factor": 6.0}
    assert by["drift", DRIFT.name]["params"] == {"validation_failure_start": 0.02, "validation_failure_end": 0.62}
    assert by["drift", DRIFT.name]["unit"] == "entry" and by["resource_hog", HOG.name]["unit"] == "job"
    pilots = {f"{p.cluster}.{p.proc}": p for p in _pilots(s)}
    # Per-pilot labels: exactly the pilots that show the anomaly, each with its files in the tree.
    black = by["black_hole", "OSG_US_BLACKHOLE_ce"]["pilots"]
    assert set(black) == {k for k, p in pilots.items() if p.blackhole and p.jobs and p.has_out} and black
    assert all(pilots[k].entry == "OSG_US_BLACKHOLE_ce" and _err_path(root, pilots[k]).is_file() for k in black)
    healthy = [p for p in pilots.values() if p.entry == "OSG_US_BLACKHOLE_ce" and p.has_out and not p.blackhole]
    assert healthy  # negatives at the labelled entry
    slow = by["slow_script", SLOW.name]["pilots"]
    assert all(pilots[k].entry == SLOW.name and _err_path(root, pilots[k]).is_file() for k in slow)
    # every pilot that ran the slow script (a validation failing before it never reaches it)
    ran = [p for p in pilots.values() if p.entry == SLOW.name and p.has_out]
    assert len(slow) == sum(any(n == p.slow_script for n, _, _ in script_times(p)) for p in ran) > 0.9 * len(ran)


def _gwms_obs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_cli_anomalies_and_the_report_ignores_the_labels(tmp_path: Path) -> None:
    """`simulate --anomalies` writes the labels; the exporter reads the tree as if they were not there."""
    out = tmp_path / "f"
    r = _gwms_obs("simulate", "--out", str(out), "--pilots", "200", "--seed", "4", "--anomalies")
    assert r.returncode == 0, r.stderr
    assert "200 pilots on 13 entries" in r.stdout and "labelled anomalies in anomalies.json" in r.stdout
    assert (out / "anomalies.json").is_file()
    report = _gwms_obs("report", "--factory-dir", str(out), "--format", "json")
    assert report.returncode == 0 and "skipped" not in report.stderr, report.stderr
    ing = Ingest(IngestConfig(factory_dir=str(out), settle_seconds=0.0))
    ing.scan()
    assert ing.errors.total() == 0
    (out / "anomalies.json").unlink()
    assert _gwms_obs("report", "--factory-dir", str(out), "--format", "json").stdout == report.stdout
    entries = {row["entry"] for row in json.loads(report.stdout)["pilots"]}
    assert {SLOW.name, HOG.name, DRIFT.name, "OSG_US_BLACKHOLE_ce"} <= entries and len(entries) == 13


def test_cli_fleet_with_anomalies(tmp_path: Path) -> None:
    out = tmp_path / "fleet"
    r = _gwms_obs("simulate", "--out", str(out), "--pilots", "60", "--entries", "30", "--anomalies")
    assert r.returncode == 0, r.stderr
    assert "60 pilots on 30 entries" in r.stdout and "30 entries on 6 sites" in r.stdout
    assert "labelled anomalies in anomalies.json: black_hole 3, slow_script 3, resource_hog 3, drift 3" in r.stdout
    doc = json.loads((out / "anomalies.json").read_text())
    assert len(doc["anomalies"]) == 12 and all(a["entry"].endswith(tuple("0123456789")) for a in doc["anomalies"])
