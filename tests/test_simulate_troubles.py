"""The simulator's misbehaving CEs (issue 33): one refusing the factory's credentials, one down for an
hour, one whose queue grows; written as HTCondor writes them and read back by the exporter."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.catalogue import HoldClass
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.outputs.prometheus import FactoryCollector
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import SimulationSummary, simulate
from gwms_obs.simulate.scenario import DEFAULT_ENTRIES, OPERATOR_ENTRIES
from gwms_obs.sources import condor_event_log as el
from gwms_obs.sources.hold_reasons import classify

AUTH, DOWN, SLOW = OPERATOR_ENTRIES


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationSummary]:
    out = tmp_path_factory.mktemp("troubles")
    return out, simulate(out, 1500, seed=11, anomalies=True, ground_truth=True)


def _events(root: Path, entry: str) -> list[el.CondorEvent]:
    out: list[el.CondorEvent] = []
    for path in sorted(root.glob(f"client/*/*/entry_{entry}/condor_activity_*.log")):
        errors = ParseErrors()
        events, used = el.parse_buffer(path.read_bytes(), str(path), 0, errors)
        assert not errors.counts and used == path.stat().st_size
        out += events
    return out


def test_the_refusing_ce_holds_with_the_gahps_authentication_error(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    assert s.ground_truth is not None
    events = _events(root, AUTH.name)
    holds = [e for e in events if e.code == el.HELD]
    classes = {classify(e.reason_code, e.reason_subcode, e.reason) for e in holds}
    refused = [p for p in s.ground_truth if p.entry == AUTH.name and p.refused]
    assert len(refused) / sum(p.entry == AUTH.name for p in s.ground_truth) > 0.8
    assert HoldClass.AUTH_FAILED in classes and len(holds) >= len(refused)
    gahp = "Error connecting to schedd ce.authfail.example.edu: AUTHENTICATE:1003"
    auth = [e for e in holds if classify(e.reason_code, e.reason_subcode, e.reason) is HoldClass.AUTH_FAILED]
    assert len(auth) == len(refused) and all(e.reason and e.reason.startswith(gahp) for e in auth)
    grid = {(e.cluster, e.proc) for e in events if e.code in (el.GRID_SUBMITTED, el.EXECUTING)}
    assert not grid & {(p.cluster, p.proc) for p in refused}  # never reached the CE
    # Held at the snapshot: in schedd_status's Held, and in the exporter's gauge, as auth_failed.
    status = (root / f"monitor/entry_{AUTH.name}/schedd_status.xml").read_text()
    assert 'Held="0"' not in status.split("<total>")[1].split("</total>")[0]
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0.0))
    ing.scan()
    fam = {m.name: m for m in FactoryCollector(ing).collect()}[catalogue.HELD_GLIDEINS.name]
    held = {s.labels["class"]: s.value for s in fam.samples if s.labels["entry"] == AUTH.name}
    assert held and max(held, key=lambda k: held[k]) == HoldClass.AUTH_FAILED.value
    assert all(s.labels["entry"] != e.name for s in fam.samples for e in DEFAULT_ENTRIES if not e.lost)


def test_the_ce_down_for_an_hour(tree: tuple[Path, SimulationSummary]) -> None:
    """Down 45 minutes before the snapshot, for an hour: the tree shows it down (no 025 yet)."""
    root, s = tree
    doc = json.loads((root / "anomalies.json").read_text())
    label = next(a for a in doc["anomalies"] if a["kind"] == "ce_unreachable")
    assert label["entry"] == DOWN.name and label["unit"] == "entry"
    down, up = label["params"]["down"], label["params"]["up"]
    assert up - down == 3600 and s.snapshot - down == 45 * 60
    events = _events(root, DOWN.name)
    downs = [e for e in events if e.code == el.GRID_RESOURCE_DOWN]
    assert downs and min(e.time for e in downs) == down
    assert not [e for e in events if e.code == el.GRID_RESOURCE_UP]  # after the snapshot
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0.0))
    ing.scan()
    assert ing.ledger.ce_down[(DOWN.name, DOWN.site)] == 1.0
    assert ing.ledger.ce_down_since[(DOWN.name, DOWN.site)] == down
    # nothing reached the CE while it was down
    assert not [e for e in events if e.code == el.GRID_SUBMITTED and down <= e.time < up]
    # other entries have no 025/026
    assert not [e for e in _events(root, DEFAULT_ENTRIES[0].name) if e.code in (25, 26)]


def test_the_long_queue(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    assert s.ground_truth is not None
    doc = json.loads((root / "anomalies.json").read_text())
    since = next(a for a in doc["anomalies"] if a["kind"] == "queue_slow")["params"]["since"]
    mine = [p for p in s.ground_truth if p.entry == SLOW.name and p.executing is not None]
    before = [p.executing - p.grid_submitted for p in mine if p.submitted < since]
    after = [p.executing - p.grid_submitted for p in mine if p.submitted >= since]
    assert len(before) > 20 and len(after) > 20
    assert statistics.median(after) > 4 * statistics.median(before)
