"""The simulator's labelled anomalies (issue 12): off by default, visible in the files when on.

A tree without anomalies is the tree the simulator wrote before they existed
(pinned hashes); with them, each anomaly shows in the files the exporter reads
(slow script durations in the .err's long XML, validation failures over time,
job ads above their request) and ``anomalies.json`` names exactly what is
labelled.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import SimulationSummary, simulate
from gwms_obs.simulate.plan import SimPilot
from gwms_obs.simulate.scenario import ANOMALY_ENTRIES, DEFAULT_ENTRIES, EntrySpec, fleet
from gwms_obs.sources.condor_sections import decode, iter_sections
from gwms_obs.sources.glidein_err import parse_err

SLOW = next(e for e in ANOMALY_ENTRIES if e.slow_script)
DRIFT = next(e for e in ANOMALY_ENTRIES if e.drift)

# What simulate(150 pilots, seed 3) and simulate(400, seed 11) wrote before anomalies existed:
# every file but the .err byte for byte, and the .err with its StartdHistoryLog ads stripped of
# the resource-usage attributes added since (and their banners' offsets, which those shift).
_PINNED = {
    (150, 3): (
        "35684832116dff80c8d6e726cbcb51d0e79c5bf4de4bdd38ed55f8eee96c1640",
        "1181d4e5e52b97b1d6bf3ca6948b9110f14282329906de5fe382e9228b9d44fe",
    ),
    (400, 11): (
        "43aa7eca15860c4a84967fcb8c9d47c9c92b593485856c0df26e6f453e904575",
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


def _hashes(root: Path) -> tuple[str, str]:
    """(hash of every file but the .err, hash of the canonical .err files), paths included."""
    other, err = hashlib.sha256(), hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
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
    return out, simulate(
        out, 1400, seed=5, entries=DEFAULT_ENTRIES + ANOMALY_ENTRIES, ground_truth=True, span_hours=168
    )


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
        if not p.has_out:
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
        return tuple(sum(p.kind == "validation_failed" for p in part) / len(part) for part in (ps[:h], ps[h:]))  # type: ignore[return-value]

    early, late = halves(DRIFT.name)
    assert late - early >= DRIFT.drift / 4 and late > 1.5 * early
    early, late = halves("OSG_US_FAIL_VALIDATION_ce1")
    assert abs(late - early) < 0.2
