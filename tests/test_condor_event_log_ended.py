"""The timeline's ended pilots are remembered while their event log is on disk (issue 34, the soak).

A late stray event of an ended pilot must not resurrect it; once every file of its log is gone
(deleted by the factory's cleanup, rotated away), no event of it can come, and its key is
forgotten, so what the daemon remembers follows the factory's log retention, not the pilots
ever counted.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.ingest.config import IngestConfig
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import condor_event_log as el

DIR = "/f/client/user_fe/glidein_gfactory_instance/entry_E"
OLD = f"{DIR}/condor_activity_20260921_fe.main.log"  # the older day's log
NEW = f"{DIR}/condor_activity_20260922_fe.main.log"
OTHER = "/f/client/user_fe/glidein_gfactory_instance/entry_F/condor_activity_20260921_fe.main.log"


def ended(cluster: int, t: float = 100.0) -> list[el.CondorEvent]:
    """A pilot's submit, start and end."""
    return [
        el.CondorEvent(cluster, 0, el.SUBMITTED, t),
        el.CondorEvent(cluster, 0, el.EXECUTING, t + 10),
        el.CondorEvent(cluster, 0, el.TERMINATED, t + 20, return_value=0),
    ]


def stray(cluster: int) -> list[el.CondorEvent]:
    """A late duplicate of the pilot's end (a log re-read, a schedd writing it twice)."""
    return [el.CondorEvent(cluster, 0, el.TERMINATED, 500.0, return_value=0)]


def test_a_stray_event_from_a_present_log_is_refused_and_a_gone_logs_keys_are_dropped() -> None:
    tl = el.PilotTimeline()
    assert len(tl.feed(ended(1) + ended(2), OLD)) == 2
    assert len(tl.feed(ended(3), NEW)) == 1
    assert tl.ended_count() == 3
    # Both logs on disk: nothing forgotten, a stray event of either log's pilots refused.
    assert tl.forget_ended([el.log_of(OLD), el.log_of(NEW)]) == 0
    assert tl.feed(stray(1), OLD) == [] and tl.feed(stray(3), NEW) == []
    assert len(tl) == 0  # nor reopened
    # The older day's log deleted: its two pilots forgotten, the newer log's still refused.
    assert tl.forget_ended([el.log_of(NEW)]) == 2
    assert tl.ended_count() == 1
    assert tl.feed(stray(3), NEW) == []
    # A rotated file of a log is the same log: its pilots stay while it is there.
    assert tl.forget_ended([el.log_of(NEW + ".1")]) == 0
    # Were the deleted log written again (a file of that day recreated), its pilot is no longer known.
    assert [p.cluster for p in tl.feed(stray(1), OLD)] == [1]


def test_same_cluster_in_another_entry_is_another_pilot() -> None:
    tl = el.PilotTimeline()
    tl.feed(ended(1), OLD)
    assert tl.feed(stray(1), OLD) == []
    assert [p.entry for p in tl.feed(ended(1), OTHER)] == ["F"]


def test_ended_by_log_checkpoint_roundtrip_and_old_checkpoints() -> None:
    tl = el.PilotTimeline()
    tl.feed(ended(10176593) + ended(7), OLD)
    tl.feed([el.CondorEvent(999_999_999_999, 999_999_999, el.ABORTED, 1.0)], NEW)  # the widest ids
    state = json.loads(json.dumps(tl.to_json()))
    assert "ended" not in state
    assert sorted(state["ended_by_log"]) == [
        ["E", "fe.main", "20260921", [7, 0, 10176593, 0]],
        ["E", "fe.main", "20260922", [999_999_999_999, 999_999_999]],
    ]
    back = el.PilotTimeline.from_json(state)
    assert back.ended_count() == 3
    assert back.feed(stray(7), OLD) == []
    assert back.feed([el.CondorEvent(999_999_999_999, 999_999_999, el.TERMINATED, 2.0)], NEW) == []
    # A checkpoint written before (one "ended" row a pilot, no log): its keys are refused in
    # every day's log of their entry and client, and kept while one is on disk.
    old = el.PilotTimeline.from_json({"ended": [["E", "fe.main", 7, 0], ["F", "fe.main", 5, 0]]})
    assert old.ended_count() == 2
    assert old.feed(stray(7), NEW) == [] and old.feed(stray(7), OLD) == []
    assert [p.entry for p in old.feed(stray(7), OTHER)] == ["F"]  # entry F's pilot 7 is another one
    # Entry F has no log left: its undated key goes, and the pilot 7 its log just ended.
    assert old.forget_ended([el.log_of(NEW)]) == 2
    assert old.feed(stray(7), NEW) == []
    assert old.forget_ended([]) == 1 and old.ended_count() == 0


def test_ended_pilots_capped_oldest_log_first() -> None:
    tl = el.PilotTimeline(max_pilots=3)
    tl.feed(ended(1) + ended(2), OLD)
    tl.feed(ended(3) + ended(4), NEW)
    assert tl.ended_count() == 3
    # The newer log's kept whole, one of the older log's.
    assert {g[2]: len(jobs) for g, jobs in tl._ended.items()} == {"20260921": 1, "20260922": 2}
    assert tl.feed(stray(3), NEW) == [] and tl.feed(stray(4), NEW) == []
    back = el.PilotTimeline.from_json(tl.to_json(), max_pilots=2)
    assert back.ended_count() == 2


def test_a_full_scan_forgets_the_ended_pilots_of_deleted_logs(tmp_path: Path) -> None:
    """Through the daemon's scans: the retention deletes a day's event log and the pilots' files;
    the next full scan drops that log's ended pilots, keeps the others, and counts nothing again."""
    root = tmp_path / "f"
    simulate(root, 200, seed=5)
    cfg = IngestConfig(factory_dir=str(root), checkpoint=str(tmp_path / "ck.json"), settle_seconds=0.0)
    ing = Ingest(cfg)
    ing.scan()
    tl = ing.events.timeline
    logs = sorted(root.glob("client/*/*/entry_*/condor_activity_*.log"))
    by_log = {g: len(jobs) for g, jobs in tl._ended.items()}
    assert sum(by_log.values()) == tl.ended_count() > 0
    gone = max(logs, key=lambda p: by_log.get(el.log_of(str(p)), 0))
    n_gone = by_log[el.log_of(str(gone))]
    assert n_gone > 0
    pilots = dict(ing.ledger.pilots)
    gone.unlink()
    ing.scan()
    assert tl.ended_count() == sum(by_log.values()) - n_gone
    assert el.log_of(str(gone)) not in tl._ended
    assert dict(ing.ledger.pilots) == pilots
    # The checkpoint holds what remains, and a restart from it refuses the remaining logs' strays.
    again = Ingest(cfg)
    assert again.events.timeline.ended_count() == tl.ended_count()
    again.scan()
    assert dict(again.ledger.pilots) == pilots


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**18 - 1), st.integers(0, 10**9 - 1)), unique=True, max_size=60),
    st.integers(0, 70),
)
def test_ended_jobs_of_a_log_behave_as_a_set(jobs: list[tuple[int, int]], n: int) -> None:
    """The sorted array a log's ended pilots are kept in (any order of ends, ids of up to 18 digits)."""
    ints = [el._job(c, p) for c, p in jobs]
    half = len(ints) // 2
    kept = el._Jobs(ints[:half])  # as restored from a checkpoint
    for j in ints[half:]:  # as ended, in any order
        assert j not in kept
        kept.add(j)
    assert len(kept) == len(ints) and sorted(kept) == sorted(ints)
    assert all(j in kept for j in ints)
    assert not any(el._job(c, p) + 1 in kept for c, p in jobs if el._job(c, p) + 1 not in ints)
    dropped = kept.drop(n)
    assert dropped == min(n, len(ints)) and len(kept) == len(ints) - dropped
    assert sum(j in kept for j in ints) == len(ints) - dropped
