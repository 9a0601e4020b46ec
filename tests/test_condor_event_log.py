"""HTCondor-G event log reader and the per-pilot fold."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources import condor_event_log as el
from tests.support.readers import event_log_file

FIXTURE = Path(__file__).parent / "fixtures" / "condor_event_log_sample.log"
SAMPLE = FIXTURE.read_bytes()
PATH = (
    "/var/log/gwms-factory/client/user_fefermilab/glidein_gfactory_instance/entry_CMS_Vienna/"
    "condor_activity_20220624_CMSG-v1_0.main.log"
)
SRC = "condor_event_log"
CET = timezone(timedelta(hours=2))


def ts(s: str, tz: timezone = CET) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=tz).timestamp()


def parse(buf: bytes, path: str = PATH) -> tuple[list[el.CondorEvent], int, ParseErrors]:
    errors = ParseErrors()
    evs, used = el.parse_buffer(buf, path, 0, errors, tz=CET)
    return evs, used, errors


def test_events_both_date_formats() -> None:
    evs, used, errors = parse(SAMPLE)
    assert used == len(SAMPLE) and not errors.counts
    assert [(e.cluster, e.code) for e in evs][:3] == [(10176593, 0), (10176593, 27), (10176593, 1)]
    assert 28 not in {e.code for e in evs}  # ignored event
    assert evs[0].time == ts("2022-06-24 04:03:44")
    legacy = [e for e in evs if e.cluster == 10176595]
    assert [e.time for e in legacy] == [ts("2022-06-24 04:07:00"), ts("2022-06-24 05:07:00")]
    held = next(e for e in evs if e.code == el.HELD)
    assert held.reason == "Error from slot1@ce-1: Failed to transfer files"
    term = [e for e in evs if e.code == el.TERMINATED]
    assert (term[0].return_value, term[0].reason) == (0, None)
    assert (term[1].return_value, term[1].reason) == (None, "signal 9")


def test_pilot_timeline() -> None:
    evs, _, _ = parse(SAMPLE)
    tl = el.PilotTimeline()
    done = {p.cluster: p for p in tl.feed(evs, PATH)}
    assert set(done) == {10176593, 10176594, 10176595}
    p = done[10176593]
    assert (p.submitted, p.grid_submitted, p.started, p.ended) == (
        ts("2022-06-24 04:03:44"),
        ts("2022-06-24 04:03:50"),
        ts("2022-06-24 04:05:40"),
        ts("2022-06-24 06:25:20"),
    )
    assert (p.end_event, p.return_value, p.entry, p.client) == ("terminated", 0, "CMS_Vienna", "CMSG-v1_0.main")
    h = done[10176594]  # held, released, restarted, killed
    assert (h.started, h.end_event, h.ended) == (ts("2022-06-24 05:30:00"), "terminated", ts("2022-06-24 07:00:00"))
    assert h.held_reason is not None and h.return_value is None
    assert done[10176595].end_event == "aborted" and done[10176595].started is None
    assert len(tl) == 1  # 10176596 started, no end yet
    assert tl.feed([el.CondorEvent(10176593, 0, el.EXECUTING, 1.0)], PATH) == []  # stray late event
    assert len(tl) == 1
    # Expiry runs on the log's own time: its events move it, never the wall clock.
    assert tl.expire() == []
    tl.feed([el.CondorEvent(7, 0, el.SUBMITTED, ts("2022-06-24 04:09:00") + tl.max_age - 1)], PATH)
    assert tl.expire() == []
    tl.feed([el.CondorEvent(7, 0, el.SUBMITTED, ts("2022-06-24 04:09:00") + tl.max_age + 1)], PATH)
    ((left, _),) = tl.expire()
    assert (left.cluster, left.started, left.ended) == (10176596, ts("2022-06-24 04:09:00"), None)
    assert len(tl) == 1  # pilot 7, just submitted


def test_timeline_checkpoint_roundtrip() -> None:
    evs, _, _ = parse(SAMPLE)
    tl = el.PilotTimeline()
    tl.feed(evs, PATH)
    back = el.PilotTimeline.from_json(json.loads(json.dumps(tl.to_json())))
    assert len(back) == 1
    assert back.feed([el.CondorEvent(10176593, 0, el.EXECUTING, 1.0)], PATH) == []  # still known ended
    (p,) = back.feed([el.CondorEvent(10176596, 0, el.ABORTED, 9.0)], PATH)
    assert (p.started, p.ended, p.end_event, p.entry) == (ts("2022-06-24 04:09:00"), 9.0, "aborted", "CMS_Vienna")
    assert len(el.PilotTimeline.from_json({})) == 0


def test_held_pilot_stays_open_and_bounded() -> None:
    tl = el.PilotTimeline(max_pilots=2)
    hold = [el.CondorEvent(c, 0, el.HELD, float(c), reason="r") for c in range(5)]
    out = tl.feed(hold, PATH)
    assert len(tl) == 2 and [p.cluster for p in out] == [0, 1, 2]
    assert all(p.end_event == "held" for p in out)


def test_legacy_year_rollover_and_utc_iso() -> None:
    path = "/x/entry_E/condor_activity_20221231_fe.log"
    buf = (
        b"001 (1.000.000) 01/01 00:10:00 Job executing on host: x\n...\n"
        b"000 (2.000.000) 12/30 23:00:00 Job submitted from host: x\n...\n"
        b"005 (3.000.000) 2023-01-02T00:00:00.500Z Job terminated.\n"
        b"\t(1) Normal termination (return value 3)\n...\n"
    )
    evs, _, errors = parse(buf, path)
    assert not errors.counts
    assert evs[0].time == ts("2023-01-01 00:10:00")
    assert evs[1].time == ts("2022-12-30 23:00:00")
    assert evs[2].time == datetime(2023, 1, 2, tzinfo=UTC).timestamp() + 0.5 and evs[2].return_value == 3


def test_incomplete_event_left() -> None:
    cut = SAMPLE.index(b"027")
    evs, used, errors = parse(SAMPLE[: cut + 40])
    assert len(evs) == 1 and used == cut and not errors.counts
    evs, used, _ = parse(SAMPLE[: cut - 1])  # "..." without its newline yet
    assert evs == [] and used == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(SAMPLE)), max_size=6))
def test_any_split_gives_same_events(cuts: list[int]) -> None:
    whole, _, _ = parse(SAMPLE)
    errors = ParseErrors()
    got: list[el.CondorEvent] = []
    pending, offset = b"", 0
    for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(SAMPLE)], strict=True):
        buf = pending + SAMPLE[a:b]
        evs, used = el.parse_buffer(buf, PATH, offset, errors, tz=CET)
        got += evs
        offset += used
        pending = buf[used:]
    assert got == whole and pending == b"" and not errors.counts


def test_hostile_events_counted_and_neighbours_survive() -> None:
    good1 = b"000 (7.000.000) 2022-06-24 04:03:44 Job submitted from host: x\n...\n"
    good2 = b"005 (7.000.000) 2022-06-24 05:03:44 Job terminated.\n\t(1) Normal termination (return value 1)\n...\n"
    bad = (
        b"\xff\xfe garbage\n...\n"  # not an event
        b"001 (8.000.000) 2022-06-24 04:0"  # cut by a crash, next event follows without "..."
        b"\n001 (9.000.000) 2022-06-24 04:05:00 Job executing on host: x\n...\n"
        b"001 (10.000.000) 2022-13-45 04:05:00 Job executing on host: x\n...\n"  # impossible date
        b"001 (11.000.000) 02/30 04:05:00 Job executing on host: x\n...\n"
        + b"\tfiller\n" * 200_000
        + b"...\n"  # event body > 1 MB
    )
    evs, used, errors = parse(good1 + bad + good2)
    assert [(e.cluster, e.code) for e in evs] == [(7, 0), (9, 1), (7, 5)]
    assert errors.counts == {
        (SRC, "bad_event"): 1,
        (SRC, "truncated_event"): 1,
        (SRC, "bad_time"): 2,
        (SRC, "line_too_long"): 1,
    }
    evs, used, errors = parse(good1 + b"x" * (el.MAX_EVENT + 1))
    assert len(evs) == 1 and used == len(good1) + el.MAX_EVENT + 1
    assert errors.counts == {(SRC, "line_too_long"): 1}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_parse_buffer_never_raises(junk: bytes) -> None:
    buf = junk + b"\n...\n" + SAMPLE
    evs, used, _ = parse(buf)
    assert 0 <= used <= len(buf) and all(isinstance(e, el.CondorEvent) for e in evs)


def test_read_file_and_names(tmp_path: Path) -> None:
    d = tmp_path / "entry_E2"
    d.mkdir()
    p = d / "condor_activity_20220624_fe.main.log"
    p.write_bytes(SAMPLE + b"001 (99.000.000) 2022-06-24 08:00:00 Job exec")
    errors = ParseErrors()
    evs = event_log_file(str(p), errors, tz=CET)
    assert len(evs) == len(parse(SAMPLE)[0]) and errors.counts == {(SRC, "truncated_event"): 1}
    assert el.names_from_path(str(p)) == ("E2", date(2022, 6, 24), "fe.main")
    assert event_log_file(str(d / "nope.log"), errors) == [] and errors.counts[(SRC, "unreadable")] == 1
