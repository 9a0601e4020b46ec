"""analyze's actions for entries whose glideins do not run (analysis/entry_actions.py, issue 33 item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards.gen.config import Thresholds, Timing
from gwms_obs.accounting.pilot import from_event_log
from gwms_obs.analysis import entry_actions as EA
from gwms_obs.catalogue import HoldClass
from gwms_obs.ingest.outlets import FactoryLogCount, HoldCount
from gwms_obs.model import PilotTimes
from gwms_obs.outputs.entry_health import EntryHealth
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from gwms_obs.simulate.scenario import OPERATOR_ENTRIES


def test_the_thresholds_are_the_alerts() -> None:
    t = Thresholds()
    assert (t.held_share, t.held_mostly_glideins, t.submit_failures) == (EA.HELD_SHARE, EA.HELD_MIN, EA.SUBMIT_FAILURES)
    assert (
        t.queue_slow_ratio,
        t.queue_slow_seconds,
        t.queue_slow_pilots,
    ) == (EA.QUEUE_RATIO, EA.QUEUE_MIN_SECONDS, EA.QUEUE_MIN_PILOTS)
    assert (Timing().window, Timing().queue_baseline_range) == (
        f"{EA.QUEUE_WINDOW / 3600:g}h",
        f"{EA.QUEUE_BASELINE / 86400:g}d",
    )


def test_every_hold_class_has_advice() -> None:
    assert set(EA.ADVICE) == set(HoldClass)


def _held(h: EntryHealth, entry: str, cls: HoldClass, n: int) -> None:
    for i in range(n):
        h.add_hold(HoldCount(entry, "S", cls.value, 100.0 + i))


def _submitted(h: EntryHealth, entry: str, n: int, failures: int = 0) -> None:
    h.add_factory_log(FactoryLogCount(entry, "S", "submitted", "c", n, 50.0))
    for _ in range(failures):
        h.add_factory_log(FactoryLogCount(entry, "S", "submit_failures", "", 1, 60.0))


@pytest.mark.parametrize(
    ("held", "submitted", "flagged"),
    [(8, 10, True), (5, 10, True), (4, 5, False), (5, 11, False), (12, 0, True)],  # at and just past each bound
)
def test_held_needs_half_the_glideins_and_five_holds(held: int, submitted: int, flagged: bool) -> None:
    h = EntryHealth()
    _held(h, "E", HoldClass.AUTH_FAILED, held - 1)
    _held(h, "E", HoldClass.OTHER, 1)  # the top class is named, not the last
    if submitted:
        _submitted(h, "E", submitted)
    got = EA.entry_actions(h, {"E": 3})
    assert [a.reason for a in got] == ([EA.HELD] if flagged else [])
    if flagged:
        (a,) = got
        assert a.hold_class == "auth_failed" and "auth_failed" in a.text and "credential" in a.text
        assert a.text.startswith("entry E: ")


def test_submit_failing_from_three_failures() -> None:
    h = EntryHealth()
    _submitted(h, "A", 40, failures=3)
    _submitted(h, "B", 40, failures=2)
    assert [(a.entry, a.reason, a.glideins) for a in EA.entry_actions(h, {})] == [("A", EA.SUBMIT_FAILING, 3)]


def _queued(h: EntryHealth, entry: str, seconds: float, n: int) -> None:
    for i in range(n):
        t = PilotTimes(i, 0, submitted=0.0, started=seconds, ended=seconds + 600, end_event="terminated",
                       return_value=0, entry=entry, client="c")  # fmt: skip
        acc = from_event_log(t, None)
        assert acc is not None
        h.add_times(acc, t)


@pytest.mark.parametrize(("slow", "flagged"), [(4 * 1200.0, True), (4 * 1200.0 - 1, False)])
def test_queue_slow_against_the_fleet(slow: float, flagged: bool) -> None:
    h = EntryHealth()
    for e in ("A", "B", "C"):
        _queued(h, e, 1200.0, 10)
    _queued(h, "SLOW", slow, 10)
    _queued(h, "FEW", 20 * 3600.0, 9)  # too few pilots to judge
    got = EA.entry_actions(h, {})
    assert [(a.entry, a.reason) for a in got] == ([("SLOW", EA.QUEUE_SLOW)] if flagged else [])
    if flagged:  # 10 pilots: no past of its own in the window, and the action says so
        assert "the fleet median" in got[0].text and "too few to compare it with its own past" in got[0].text


def test_queue_slow_needs_an_hour() -> None:
    h = EntryHealth()
    for e in ("A", "B", "C"):
        _queued(h, e, 60.0, 10)
    _queued(h, "SLOW", 3599.0, 10)  # 60x the fleet, but under an hour
    assert EA.entry_actions(h, {}) == []


def _queued_at(h: EntryHealth, entry: str, seconds: float, ends: list[float]) -> None:
    """Pilots that waited ``seconds`` in queue and ended at ``ends`` (an hour after they started)."""
    for i, end in enumerate(ends):
        t = PilotTimes(i, 0, submitted=end - 3600 - seconds, started=end - 3600, ended=end, end_event="terminated",
                       return_value=0, entry=entry, client="c")  # fmt: skip
        acc = from_event_log(t, None)
        assert acc is not None
        h.add_times(acc, t)


DAY = 86400.0


@pytest.mark.parametrize(("slow", "flagged"), [(4 * 1200.0, True), (4 * 1200.0 - 1, False)])
def test_queue_slow_against_its_own_past(slow: float, flagged: bool) -> None:
    h = EntryHealth()
    _queued_at(h, "E", 1200.0, [DAY + 7200.0 * i for i in range(40)])  # 3 days of a pilot every 2 h
    last = DAY + 7200.0 * 40
    _queued_at(h, "E", slow, [last + 300.0 * i for i in range(10)])  # then 10 in the last hour
    got = EA.entry_actions(h, {})  # one entry: no fleet to compare with, its past is enough
    assert [(a.entry, a.reason) for a in got] == ([("E", EA.QUEUE_SLOW)] if flagged else [])
    if flagged:
        (a,) = got
        assert a.glideins == 10 and a.share == pytest.approx(slow / 1200.0)
        assert "its own median of the 40 before them" in a.text and "fleet" not in a.text


def test_queue_slow_needs_an_hour_against_its_own_past() -> None:
    h = EntryHealth()
    _queued_at(h, "E", 600.0, [DAY + 7200.0 * i for i in range(40)])
    _queued_at(h, "E", 3599.0, [DAY + 7200.0 * 40 + 60.0 * i for i in range(10)])  # 6x its own, under an hour
    assert EA.entry_actions(h, {}) == []


def test_an_entry_always_slow_is_its_own_normal() -> None:
    """As the alert: an entry's queue as long as it has been all along is no action, however the fleet's."""
    h = EntryHealth()
    for e in ("A", "B", "C"):
        _queued(h, e, 600.0, 10)
    _queued_at(h, "LONG", 5 * 3600.0, [DAY + 3600.0 * i for i in range(50)])  # 30x the fleet, every hour
    assert EA.entry_actions(h, {}) == []


def test_the_slowness_of_the_past_is_named_with_its_hours() -> None:
    """Slow for a stretch of the window, then back: the action is the latest hour it held, by its times."""
    h = EntryHealth()
    ends = [DAY + 1800.0 * i for i in range(120)]  # a pilot every 30 min for 2.5 days
    _queued_at(h, "E", 900.0, ends[:60])
    _queued_at(h, "E", 6 * 3600.0, ends[60:80])  # 10 h slow
    _queued_at(h, "E", 900.0, ends[80:])
    (a,) = EA.entry_actions(h, {})
    own = EA.own_queue(h.queue_at["E"], h.queue["E"])
    # the latest hour whose 10 latest pilots were mostly slow: before the 5th normal one after them
    assert own is not None and own.slow and ends[60] <= own.since and ends[79] < own.at < ends[84]
    assert a.reason == EA.QUEUE_SLOW and a.share == pytest.approx(own.ratio) and own.ratio >= EA.QUEUE_RATIO
    assert EA._utc(own.since) in a.text and EA._utc(own.at) in a.text


def test_failing_actions_rank_before_a_slow_queue_most_glideins_first() -> None:
    h = EntryHealth()
    for e in ("A", "B", "C"):
        _queued(h, e, 600.0, 10)
    _queued(h, "SLOW", 5 * 3600.0, 10)
    _held(h, "H", HoldClass.CE_UNREACHABLE, 6)
    _submitted(h, "F", 10, failures=9)
    assert [(a.rank, a.entry) for a in EA.entry_actions(h, {})] == [(1, "F"), (2, "H"), (3, "SLOW")]


def test_analyze_names_the_refusing_ce_and_nothing_at_a_healthy_entry(tmp_path: Path) -> None:
    factory = tmp_path / "factory"
    simulate(factory, 400, seed=33, entries=(DEFAULT_ENTRIES[0], *OPERATOR_ENTRIES))
    cmd = [sys.executable, "-m", "gwms_obs.cli", "analyze", "--factory-dir", str(factory), "--format", "json"]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout)
    by = {(a["entry"], a["reason"]): a for a in doc["entry_actions"]}
    refusing = OPERATOR_ENTRIES[0].name
    assert by[(refusing, EA.HELD)]["hold_class"] == "auth_failed"
    assert "check the factory's credential for the CE" in by[(refusing, EA.HELD)]["text"]
    assert (refusing, EA.SUBMIT_FAILING) in by
    # the long queue (8x from half the span on) against its own earlier glideins, as the alert
    slow = next(e for e in OPERATOR_ENTRIES if e.queue_slow != 1.0).name
    assert "its own median of the" in by[(slow, EA.QUEUE_SLOW)]["text"]
    assert not any(e == DEFAULT_ENTRIES[0].name for e, _ in by)
    assert {r["entry"] for r in doc["entries"]} >= {refusing, DEFAULT_ENTRIES[0].name}
