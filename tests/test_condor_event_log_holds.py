"""Every hold of a glidein (012 → 013, with HoldReasonCode/SubCode) and its evictions (004),
as PilotTimeline folds them, bounded, and through the exporter's checkpoint."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from gwms_obs.ingest.books import Books
from gwms_obs.ingest.condor_event_log import CondorEventLogStage
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.outlets import NO_OUTLETS
from gwms_obs.model import HoldInterval, PilotTimes
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import condor_event_log as el
from gwms_obs.sources.hold_reasons import HoldClass, classify

FIXTURE = (Path(__file__).parent / "fixtures" / "condor_event_log_sample.log").read_bytes()
PATH = "/f/client/user_fe/glidein_g/entry_E/condor_activity_20260601_fe.main.log"
T0 = 1_780_000_000.0  # 2026-05-28


def _hms(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def held(c: int, t: float, reason: str, code: int, sub: int) -> bytes:
    # JobHeldEvent::formatBody (HTCondor src/condor_utils/condor_event.cpp)
    return f"012 ({c}.000.000) {_hms(t)} Job was held.\n\t{reason}\n\tCode {code} Subcode {sub}\n...\n".encode()


def released(c: int, t: float) -> bytes:
    return f"013 ({c}.000.000) {_hms(t)} Job was released.\n\tvia condor_release (by user fe)\n...\n".encode()


def evicted(c: int, t: float) -> bytes:
    return (
        f"004 ({c}.000.000) {_hms(t)} Job was evicted.\n\t(0) CPU times\n"
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n"
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
        "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n...\n"
    ).encode()


def simple(code: str, c: int, t: float, text: str) -> bytes:
    return f"{code} ({c}.000.000) {_hms(t)} {text}\n...\n".encode()


def fold(buf: bytes, tl: el.PilotTimeline | None = None) -> tuple[list[PilotTimes], el.PilotTimeline]:
    errors = ParseErrors()
    events, used = el.parse_buffer(buf, PATH, 0, errors)
    assert used == len(buf) and not errors.counts
    tl = tl or el.PilotTimeline()
    return tl.feed(events, PATH), tl


def test_fixture_hold_and_release() -> None:
    tl = el.PilotTimeline()
    errors = ParseErrors()
    events, _ = el.parse_buffer(FIXTURE, "/x/entry_E/condor_activity_20220624_fe.log", 0, errors)
    done = {p.cluster: p for p in tl.feed(events, "/x/entry_E/condor_activity_20220624_fe.log")}
    p = done[10176594]
    assert len(p.holds) == 1
    h = p.holds[0]
    assert (h.code, h.subcode, h.reason) == (12, 2, "Error from slot1@ce-1: Failed to transfer files")
    assert h.released is not None and h.released - h.held == 20 * 60
    assert done[10176593].holds == () and done[10176593].evictions == ()


def test_every_hold_interval_and_eviction() -> None:
    c = 500
    refused = "Error connecting to schedd ce.example.org: CEDAR:6001:Failed to connect"
    buf = (
        simple("000", c, T0, "Job submitted from host: <192.0.2.1:9615>")
        + held(c, T0 + 60, refused, 0, 0)
        + released(c, T0 + 600)
        + held(c, T0 + 700, "The job attribute PeriodicHold expression 'x' evaluated to TRUE", 3, 0)
        + held(c, T0 + 710, "a second 012 while held", 3, 1)  # no new interval
        + released(c, T0 + 900)
        + simple("001", c, T0 + 1000, "Job executing on host: condor ce ce:9619")
        + evicted(c, T0 + 5000)
        + simple("001", c, T0 + 5100, "Job executing on host: condor ce ce:9619")
        + held(c, T0 + 8000, "Job credentials are not available", 4, 0)
    )
    done, tl = fold(buf)
    assert done == []  # held at the end: not ended, 013 may come
    p = tl._open[("E", "fe.main", c, 0)][0]
    assert p.holds == (
        HoldInterval(
            T0 + 60, T0 + 600, 0, 0, "Error connecting to schedd ce.example.org: CEDAR:6001:Failed to connect"
        ),
        HoldInterval(T0 + 700, T0 + 900, 3, 0, "The job attribute PeriodicHold expression 'x' evaluated to TRUE"),
        HoldInterval(T0 + 8000, None, 4, 0, "Job credentials are not available"),
    )
    assert p.evictions == (T0 + 5000,)
    assert (p.end_event, p.held_reason, p.started) == ("held", "Job credentials are not available", T0 + 5100)
    assert p.first_started == T0 + 1000  # the queue's end; started is the last run's
    done, _ = fold(simple("009", c, T0 + 9000, "Job was aborted.\n\tvia condor_rm (by user fe)"), tl)
    assert [d.holds[-1].released for d in done] == [None] and done[0].end_event == "aborted"


def test_holds_and_evictions_are_bounded_and_counted() -> None:
    c = 501
    buf = simple("000", c, T0, "Job submitted from host: x")
    for i in range(el.MAX_HOLDS + 7):
        buf += held(c, T0 + 100 * i + 10, f"hold {i}", 0, 0) + released(c, T0 + 100 * i + 50)
    for i in range(el.MAX_EVICTIONS + 3):
        buf += evicted(c, T0 + 10_000 + i)
    buf += simple("005", c, T0 + 20_000, "Job terminated.\n\t(1) Normal termination (return value 0)")
    (p,), _ = fold(buf)
    assert len(p.holds) == el.MAX_HOLDS and p.holds_dropped == 7
    assert [h.reason for h in p.holds] == [f"hold {i}" for i in range(el.MAX_HOLDS)]  # the first ones kept
    assert all(h.released is not None for h in p.holds)
    assert len(p.evictions) == el.MAX_EVICTIONS and p.evictions_dropped == 3


def test_checkpoint_round_trip_and_an_old_checkpoint(tmp_path: Path) -> None:
    c = 502
    buf = (
        simple("000", c, T0, "Job submitted from host: x")
        + held(c, T0 + 10, "r\u00e9ason", 2, 31)
        + released(c, T0 + 20)
        + evicted(c, T0 + 30)
        + held(c, T0 + 40, "again", 0, 0)
    )
    _, tl = fold(buf)
    saved = json.loads(json.dumps(tl.to_json()))
    back = el.PilotTimeline.from_json(saved)
    p, q = tl._open[("E", "fe.main", c, 0)][0], back._open[("E", "fe.main", c, 0)][0]
    assert p == q and type(q.holds[0]) is HoldInterval and type(q.evictions) is tuple
    # the restored pilot goes on: its open hold is released
    done, _ = fold(released(c, T0 + 50) + simple("005", c, T0 + 60, "Job terminated."), back)
    assert [h.released for h in done[0].holds] == [T0 + 20, T0 + 50]

    # A checkpoint written before holds were kept: no such keys, loads with none.
    old = dict(saved)
    old["open"] = [[*row[:4], {k: v for k, v in row[4].items() if not k.startswith(("holds", "evictions"))}, *row[5:]]
                   for row in saved["open"]]  # fmt: skip
    assert "holds" not in old["open"][0][4]
    r = el.PilotTimeline.from_json(old)._open[("E", "fe.main", c, 0)][0]
    assert (r.holds, r.holds_dropped, r.evictions, r.evictions_dropped) == ((), 0, (), 0)
    assert r.held_reason == "again" and r.end_event == "held"

    # The event-log stage's own part of the checkpoint (pilots ended, not counted yet) as well.
    stage = CondorEventLogStage(Books(IngestConfig(str(tmp_path)), clock=lambda: 0.0), NO_OUTLETS)
    stage.holds.ends["k"] = p
    state = json.loads(json.dumps(stage.state()))
    stage.restore(state)
    assert stage.holds.ends["k"] == p
    legacy = {k: v for k, v in dataclasses.asdict(p).items() if not k.startswith(("holds", "evictions"))}
    stage.restore({"waiting": {"k": legacy}})
    assert stage.holds.ends["k"].holds == ()


def test_the_simulators_holds_carry_real_codes(tmp_path: Path) -> None:
    """The simulated factory writes its holds as HTCondor does, codes included (not "Code 0 Subcode 0"
    for all), so each reads back with its codes and a class other than ``other``."""
    simulate(tmp_path, 300, seed=2)  # 7 held pilots
    classes: dict[HoldClass, int] = {}
    for path in sorted(tmp_path.glob("client/*/*/entry_*/condor_activity_*.log")):
        errors = ParseErrors()
        events, _ = el.parse_buffer(path.read_bytes(), str(path), 0, errors)
        assert not errors.counts
        for e in events:
            if e.code == el.HELD:
                assert e.reason_code is not None and e.reason_subcode is not None and e.reason
                cls = classify(e.reason_code, e.reason_subcode, e.reason)
                classes[cls] = classes.get(cls, 0) + 1
    assert set(classes) == {HoldClass.PERIODIC_HOLD, HoldClass.CE_UNREACHABLE, HoldClass.TRANSFER_FAILED}, classes
    assert sum(classes.values()) >= 5
