"""The compiled event-log reader (``gwms_obs_native.parse_eventlog``) against its oracle,
``condor_event_log.parse_buffer`` in pure Python.

For any buffer the compiled reader either declines (None: the Python reader reads
it) or gives exactly Python's answer: the same events in the same order, times
equal bit for bit (compared as ``float.hex``), the same bytes consumed — and
then Python records no parse error for that buffer, since every error is meant
to send the buffer to the Python path. Through ``parse_buffer`` the two paths
also agree on the errors recorded. Checked on the simulator's logs, on the
fixture, on generated events (every field at and past its edges) and on
mutated logs, with fixed zones and with the host's local time under several TZ
rules, DST gaps and folds and leap-second zones included.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gwms_obs import follow, native
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import condor_event_log as el
from tests.support.readers import event_log_file

if native.core is None:  # absent or refused (stale ABI, GWMS_OBS_NATIVE=0): nothing to compare
    if os.environ.get("GWMS_OBS_REQUIRE_NATIVE") == "1":  # make test: CI must run these
        raise RuntimeError(f"gwms_obs_native is required here (make native): {native.describe()}")
    pytest.skip(f"native readers off: {native.describe()}", allow_module_level=True)
CORE = native.core

FIXTURE = (Path(__file__).parent / "fixtures" / "condor_event_log_sample.log").read_bytes()
PATH = "/f/client/user_fe/glidein_g/entry_E/condor_activity_20220624_fe.main.log"
REF = date(2022, 6, 24)
CET = timezone(timedelta(hours=2))
Rec = tuple[int, int, int, str, int | None, str | None, int | None, int | None]


def bits(events: list[el.CondorEvent]) -> list[Rec]:
    """Every field, the time to the last bit."""
    assert all(type(e) is el.CondorEvent for e in events)
    assert all(type(e.time) is float and type(e.cluster) is int and type(e.proc) is int for e in events)
    return [
        (e.cluster, e.proc, e.code, e.time.hex(), e.return_value, e.reason, e.reason_code, e.reason_subcode)
        for e in events
    ]


def python(buf: bytes, tz: tzinfo | None, ref: date) -> tuple[list[el.CondorEvent], int, ParseErrors]:
    errors = ParseErrors()
    native.core = None
    try:
        events, used = el.parse_buffer(buf, PATH, 0, errors, tz=tz, ref_day=ref)
    finally:
        native.core = CORE
    return events, used, errors


def check(buf: bytes, tz: tzinfo | None = None, ref: date = REF) -> bool:
    """The property for one buffer; True when the compiled reader took it."""
    want, used, errors = python(buf, tz, ref)
    # Through parse_buffer: the same events, consumption and errors, whichever path ran.
    errors2 = ParseErrors()
    got2, used2 = el.parse_buffer(buf, PATH, 0, errors2, tz=tz, ref_day=ref)
    assert (bits(got2), used2) == (bits(want), used)
    assert errors2.counts == errors.counts
    zone = el._native_zone(tz)
    if zone is el._PYTHON_ONLY:
        return False
    got = CORE.parse_eventlog(buf, el.CondorEvent, zone, (ref.year, ref.month, ref.day), el.MAX_EVENT)
    if got is None:
        return False
    assert bits(got[0]) == bits(want)
    assert got[1] == used
    assert errors.total() == 0, f"the fast path took a buffer the Python reader finds fault with: {errors.counts}"
    return True


@contextmanager
def local_zone(name: str) -> Iterator[None]:
    """The host's local zone set to ``name`` (TZ + tzset: Python and the C library alike)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


# Zones whose rules differ in kind: DST both ways of the equator, half-hour and 45-minute
# offsets and DST steps, negative DST, a skipped day, leap seconds, POSIX rule strings.
ZONES = [
    "UTC",
    "America/Chicago",
    "Europe/Berlin",
    "Europe/Dublin",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "America/St_Johns",
    "Pacific/Apia",
    "right/America/New_York",
    "EST5EDT,M3.2.0,M11.1.0",
    "<+0330>-3:30",
]
# Local times at and around these zones' transitions (gaps and folds).
EDGES = [
    datetime(2024, 3, 10, 2, 30),
    datetime(2024, 11, 3, 1, 30),
    datetime(2024, 3, 31, 2, 30),
    datetime(2024, 10, 27, 2, 30),
    datetime(2024, 10, 27, 1, 30),
    datetime(2024, 4, 7, 1, 45),
    datetime(2024, 10, 6, 2, 15),
    datetime(2011, 12, 30, 12, 0),
    datetime(2011, 12, 29, 23, 59, 59),
    datetime(2016, 12, 31, 23, 59, 59),
    datetime(2017, 1, 1, 0, 0, 0),
    datetime(2024, 3, 10, 1, 59, 59),
    datetime(2024, 3, 10, 3, 0, 0),
    datetime(2024, 11, 3, 0, 59, 59),
    datetime(2024, 11, 3, 2, 0, 0),
]


def test_zones_exist() -> None:
    for z in ZONES:
        if "/" in z:
            assert Path("/usr/share/zoneinfo", z).exists(), z


# --- whole logs -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, bytes]]:
    root = tmp_path_factory.mktemp("eventlog")
    simulate(root, 200, seed=6)
    found = [(str(p), p.read_bytes()) for p in sorted(root.glob("client/*/*/entry_*/condor_activity_*.log"))]
    assert len(found) >= 3 and sum(len(b) for _, b in found) > 50_000
    return found


@pytest.mark.parametrize("zone", ["UTC", "America/Chicago", "Australia/Lord_Howe"])
def test_every_simulated_log_takes_the_fast_path(logs: list[tuple[str, bytes]], zone: str) -> None:
    with local_zone(zone):
        for path, buf in logs:
            ref = el.names_from_path(path)[1]
            assert ref is not None
            assert check(buf, None, ref), path
            assert check(buf, CET, ref), path
    # and every event was read, not skipped
    assert sum(len(CORE.parse_eventlog(b, el.CondorEvent, 0, (2026, 1, 1), el.MAX_EVENT)[0]) for _, b in logs) > 500


def test_the_fixture_both_date_forms_and_skipped_codes() -> None:
    for tz in (None, CET, UTC):
        assert check(FIXTURE, tz)
    for ref in (date(2022, 1, 1), date(2021, 12, 31), date(2023, 6, 24), date(2024, 2, 29)):
        assert check(FIXTURE, None, ref)


# As HTCondor writes them: JobHeldEvent::formatBody ("Job was held.", "\t<reason>", "\tCode %d Subcode %d")
# and JobEvictedEvent::formatBody as the gridmanager's WriteEvictEventToUserLog fills it (no codes, zero
# usage), src/condor_utils/condor_event.cpp and src/condor_gridmanager/basejob.cpp.
HOLDS = (
    b"012 (4242.000.000) 2026-06-01 10:00:00 Job was held.\n"
    b"\tError connecting to schedd ce.example.org: CEDAR:6001:Failed to connect to <192.0.2.7:9619>\n"
    b"\tCode 0 Subcode 0\n...\n"
    b"012 (4243.000.000) 2026-06-01 10:00:01 Job was held.\n"
    b"\tThe job attribute PeriodicHold expression 'NumJobStarts > 1' evaluated to TRUE\n"
    b"\tCode 3 Subcode 0\n...\n"
    b"012 (4244.000.000) 2026-06-01 10:00:02 Job was held.\n\tReason unspecified\n\tCode -1 Subcode 17\n...\n"
    b"012 (4245.000.000) 2026-06-01 10:00:03 Job was held.\n\tby hand\n...\n"
    b"004 (4243.000.000) 2026-06-01 10:05:00 Job was evicted.\n\t(0) CPU times\n"
    b"\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n"
    b"\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
    b"\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n...\n"
)


def test_hold_codes_and_evictions_both_readers() -> None:
    for tz in (None, CET):
        assert check(HOLDS, tz)
        assert check(FIXTURE, tz)
    got = CORE.parse_eventlog(HOLDS, el.CondorEvent, 0, (2026, 6, 1), el.MAX_EVENT)[0]
    assert [(e.cluster, e.code, e.reason_code, e.reason_subcode) for e in got] == [
        (4242, 12, 0, 0),
        (4243, 12, 3, 0),
        (4244, 12, -1, 17),
        (4245, 12, None, None),  # an old writer's hold without its codes line
        (4243, 4, None, None),
    ]
    assert got[0].reason is not None and got[0].reason.endswith("CEDAR:6001:Failed to connect to <192.0.2.7:9619>")
    fixture = CORE.parse_eventlog(FIXTURE, el.CondorEvent, 0, (2022, 6, 24), el.MAX_EVENT)[0]
    assert [(e.reason_code, e.reason_subcode) for e in fixture if e.code == el.HELD] == [(12, 2)]


# GridResourceDownEvent / GridResourceUpEvent::formatBody (src/condor_utils/condor_event.cpp): the
# gridmanager's word that the CE is unreachable, and back (issue 33), kept by both readers.
GRID = (
    b"026 (4246.000.000) 2026-06-01 11:00:00 Detected Down Grid Resource\n"
    b"    GridResource: condor ce.example.org ce.example.org:9619\n...\n"
    b"025 (4246.000.000) 2026-06-01 12:00:00 Grid Resource Back Up\n"
    b"    GridResource: condor ce.example.org ce.example.org:9619\n...\n"
)


def test_grid_resource_down_and_up_both_readers() -> None:
    for tz in (None, CET):
        assert check(GRID, tz)
    got = CORE.parse_eventlog(GRID, el.CondorEvent, 0, (2026, 6, 1), el.MAX_EVENT)[0]
    assert [(e.code, e.time - got[0].time) for e in got] == [
        (el.GRID_RESOURCE_DOWN, 0.0),
        (el.GRID_RESOURCE_UP, 3600.0),
    ]


def test_other_zones_are_pythons() -> None:
    # a ZoneInfo, a sub-second offset: only the Python reader reads them
    assert not check(FIXTURE, ZoneInfo("Europe/Berlin"))
    assert not check(FIXTURE, timezone(timedelta(seconds=1, microseconds=5)))
    assert check(FIXTURE, timezone(timedelta(hours=-5, minutes=-30, seconds=-7)))


def test_read_file_with_small_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "entry_E"
    d.mkdir()
    p = d / "condor_activity_20220624_fe.main.log"
    p.write_bytes(FIXTURE * 3 + b"001 (99.000.000) 2022-06-24 08:00:00 Job exec")
    monkeypatch.setattr(follow, "READ_CHUNK", 333)  # events cut across reads: the pending tail
    e1, e2 = ParseErrors(), ParseErrors()
    got = event_log_file(str(p), e1)
    native.core = None
    try:
        want = event_log_file(str(p), e2)
    finally:
        native.core = CORE
    assert bits(got) == bits(want) and len(got) == 42
    assert e1.counts == e2.counts == {("condor_event_log", "truncated_event"): 1}


def test_hostile_events_are_declined() -> None:
    ok = b"000 (7.000.000) 2022-06-24 04:03:44 Job submitted from host: x\n...\n"
    assert check(ok)
    for bad in (
        b"\xff\xfe garbage\n...\n",  # not an event
        b"001 (8.000.000) 2022-06-24 04:0\n001 (9.000.000) 2022-06-24 04:05:00 x\n...\n",  # cut by a crash
        b"001 (10.000.000) 2022-13-45 04:05:00 x\n...\n",  # impossible date
        b"001 (11.000.000) 02/30 04:05:00 x\n...\n",
        b"001 (11.000.000) 2022-06-24 04:05:60 x\n...\n",  # a leap second: datetime refuses it
        b"001 (11.000.000) 2022-06-24 04:05:00+24:00 x\n...\n",
        b"001 (" + b"1" * 19 + b".000.000) 2022-06-24 04:05:00 x\n...\n",
        b"x\n001 (12.000.000) 2022-06-24 04:05:00 x\n...\n",  # text before the header
    ):
        assert not check(ok + bad + ok), bad
    # blank lines before a header, an ignored code with a time no datetime takes: fine
    assert check(ok + b"\n \t\x0b\n" + ok + b"028 (1.0.0) 2022-99-99 99:99:99 x\n...\n" + ok)


def test_event_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    ok = b"000 (7.000.000) 2022-06-24 04:03:44 Job submitted from host: x\n...\n"
    monkeypatch.setattr(el, "MAX_EVENT", len(ok) - 4)
    assert check(ok)  # "...\n" is not part of the event
    assert not check(ok + ok.replace(b"x\n", b"xx\n"))
    assert check(ok + b"000 (7.000.000) 2022-06-24 04:03:44 " + b"y" * (len(ok) - 40))  # tail waits
    assert not check(ok + b"y" * len(ok))  # an unterminated tail over the limit


# --- generated events --------------------------------------------------------------------------------
# Each token of an event has its good values and its broken ones; an event breaks at most one
# token (about half of them do), so most buffers are good and the fast path is exercised too.
def num(lo: int, hi: int) -> st.SearchStrategy[bytes]:
    return st.integers(lo, hi).flatmap(lambda n: st.text("0123456789", min_size=n, max_size=n).map(str.encode))


OK_CODE = st.sampled_from([b"000", b"001", b"005", b"005", b"009", b"012", b"012", b"013", b"027", b"028", b"004"])
BAD_CODE = st.sampled_from([b"05", b"0005", b"00a", b" 001"])
OK_ID = st.tuples(num(1, 18), num(1, 9), num(1, 9)).map(b".".join)
BAD_ID = st.sampled_from(
    [b"1" * 19 + b".0.0", b"1." + b"2" * 10 + b".0", b"1.0." + b"3" * 10, b"1.0", b"1..0", b"a.0.0"]
)
OK_SEP, BAD_SEP = st.sampled_from([b" ", b"T"]), st.sampled_from([b"t", b"  ", b"", b"\t"])
OK_FRAC = st.sampled_from([b"", b"", b".5", b".000000001", b".123456789", b".9", b".25"])
BAD_FRAC = st.sampled_from([b".1234567890", b".", b".x"])
OK_OFFSET = st.sampled_from([b"", b"", b"", b"Z", b"+02:00", b"-0530", b"+23:59", b"-23:59", b"-00:00", b"+0060"])
BAD_OFFSET = st.sampled_from([b"+24:00", b"-2400", b"+99:99", b"+01:0", b"z", b"+01:000", b"Z+01:00", b"+1:00"])
OK_AFTER = st.sampled_from([b" Job executing on host: x", b"", b"\t", b"\r", b" ", b"  text \xc3\xa9"])
BAD_AFTER = st.sampled_from([b"x", b".", b"\x0b"])
OK_LEAD, BAD_LEAD = st.sampled_from([b"", b"", b"\n", b" \t\n", b"\x0b\n"]), st.sampled_from([b"garbage\n", b"\xff\n"])
OK_END = st.sampled_from([b"...\n", b"...\n", b"... \r\n", b"...\t \n", b"...\r\n"])
BAD_END = st.sampled_from([b"...x\n", b"....\n", b" ...\n", b"..\n", b"", b"...\x0b\n"])
BAD_DATE = st.sampled_from(
    [b"2022-02-29", b"02/30", b"13/01", b"00/10", b"2022-00-10", b"0000-01-01", b"9999-12-31", b"1970-01-01",
     b"3000-01-01", b"22-06-24", b"2022/06/24", b"06-24", b"1969-12-31"]
)  # fmt: skip
BAD_TIME = st.sampled_from([b"24:00:00", b"23:60:00", b"23:59:60", b"1:02:03", b"01:02", b"99:99:99"])
BODY = st.sampled_from(
    [
        b"\t(1) Normal termination (return value 0)",
        b"\t(1) Normal termination (return value -3)",
        b"\t(1) Normal termination (return value 999999999)",
        b"\t(1) Normal termination (return value 1234567890)",
        b"\t(1) Normal termination (return value --1)",
        b"\t(1) Normal termination (return value +1)",
        b"(1) Normal termination (return value 7)(1) Normal termination (return value 8)",
        b"(1) Normal termination (return value 1234567890)(1) Normal termination (return value 8)",
        b"\t(0) Abnormal termination (signal 9)",
        b"\t(0) Abnormal termination (signal 0009)",
        b"\t(0) Abnormal termination (signal -9)",
        b"\t(0) Abnormal termination (signal 12345678901)",
        b"\tError from slot1@ce-1: Failed to transfer files",
        b"\tCode 12 Subcode 2",
        b"\tCode -3 Subcode 0 \r",
        b"\tCode 0 Subcode 0",
        b"Code 2 Subcode 1234567890",  # ten digits: not the codes line
        b"Code 2 Subcode 7 more",
        b"Code 12  Subcode 2",
        b"Code 1",
        b"   ",
        b"\x0b\x0c",
        b"\t  reason with spaces  \r",
        b"\tr\xc3\xa9sum\xc3\xa9 \xe2\x82\xac",
        b"\tbad utf-8 \xff\xfe",  # Python takes it ("replace"); the fast path declines
        b"\tCode \xff",
        b"\t" + b"L" * 600,
        b"\t" + "é".encode() * 600,
        b"    GridResource: condor ce-1 ce-1:9619",
        b"GlideinOverloadEnabled = false",
        b"\t(1) Normal termination (return value 0)\n\t(0) Abnormal termination (signal 9)",
    ]
)


@st.composite
def event(draw: st.DrawFn, broken: int | None = None) -> bytes:
    """LEAD CODE (ID) DATE SEP TIME FRAC OFFSET AFTER, body lines, END: token ``broken`` (1-10) broken, if any."""
    if broken is None:
        broken = draw(st.integers(1, 30))
    n = 0

    def tok(ok: st.SearchStrategy[bytes], bad: st.SearchStrategy[bytes]) -> bytes:
        nonlocal n
        n += 1
        return draw(bad if n == broken else ok)

    lead, code, id_ = tok(OK_LEAD, BAD_LEAD), tok(OK_CODE, BAD_CODE), tok(OK_ID, BAD_ID)
    base = draw(st.one_of(st.sampled_from(EDGES), st.datetimes(datetime(1971, 1, 2), datetime(2039, 12, 31))))
    base += timedelta(seconds=draw(st.integers(-4000, 4000)))
    day = base.strftime("%Y-%m-%d" if draw(st.booleans()) else "%m/%d").encode()
    day, sep, clock = (
        tok(st.just(day), BAD_DATE),
        tok(OK_SEP, BAD_SEP),
        tok(st.just(base.strftime("%H:%M:%S").encode()), BAD_TIME),
    )
    frac, off, after = tok(OK_FRAC, BAD_FRAC), tok(OK_OFFSET, BAD_OFFSET), tok(OK_AFTER, BAD_AFTER)
    end = tok(OK_END, BAD_END)
    head = code + b" (" + id_ + b") " + day + sep + clock + frac + off + after + b"\n"
    body = b"".join(line + b"\n" for line in draw(st.lists(BODY, max_size=3)))
    return lead + head + body + end


ZONE_ARGS = st.sampled_from([None, None, None, CET, UTC, timezone(timedelta(hours=-9, minutes=-30))])
REF_DAY = st.one_of(
    st.sampled_from([REF, date(2024, 2, 29), date(2023, 12, 31), date(2024, 1, 1), date(1971, 1, 1)]),
    st.dates(date(1972, 1, 1), date(2035, 12, 31)),
    st.sampled_from([date(1969, 6, 1), date(1970, 12, 31)]),  # before the fast path's years: Python's
)
SLOW = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(
    events=st.lists(event(), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.integers(0, 2000)),
    zone=st.sampled_from(ZONES),
    tz=ZONE_ARGS,
    ref=REF_DAY,
)
def test_generated_events(events: list[bytes], cut: int | None, zone: str, tz: tzinfo | None, ref: date) -> None:
    buf = b"".join(events)
    if cut is not None:
        buf = buf[:cut]
    with local_zone(zone):
        check(buf, tz, ref)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(event(broken=0), min_size=1, max_size=8), zone=st.sampled_from(ZONES), ref=REF_DAY)
def test_good_events_are_taken(events: list[bytes], zone: str, ref: date) -> None:
    """Nothing broken: taken, unless Python finds fault (02/29 in no leap year near the
    reference day), a reason is not UTF-8, or the year is before the fast path's."""
    buf = b"".join(events)
    with local_zone(zone):
        taken = check(buf, None, ref)
        errors = python(buf, None, ref)[2]
    assert taken or errors.total() or b"\xff" in buf or ref.year < 1972


def test_local_times_at_every_transition_hour() -> None:
    """Each second-ish step through the edges, in each zone: taken, and equal (no decline hides a miss)."""
    stamps = []
    for base in EDGES:
        for step in range(-3700, 3700, 97):
            t = base + timedelta(seconds=step)
            stamps.append(t.strftime("%Y-%m-%d %H:%M:%S").encode())
            stamps.append(t.strftime("%m/%d %H:%M:%S").encode() + b".25")
    buf = b"".join(b"000 (1.0.0) " + s + b" Job submitted\n...\n" for s in stamps)
    for zone in ZONES:
        with local_zone(zone):
            for ref in (date(2024, 6, 1), date(2011, 12, 30), date(2017, 1, 1)):
                assert check(buf, None, ref), zone


# --- mutated logs ------------------------------------------------------------------------------------
NASTY = [
    b"...\n",
    b"\n...\n",
    b"...",
    b"\n",
    b"\r",
    b"\x00",
    b"\xff\xfe",
    b"\xc3\xa9",
    b"001 (",
    b"\n001 (5.0.0) 2022-06-24 04:05:00 x\n",
    b"\n005 (5.0.0) 06/24 04:05:00 Job terminated.\n\t(1) Normal termination (return value 5)\n...\n",
    b"\n012 (5.0.0) 2022-06-24T04:05:00.5+01:00 Job was held.\n\tby hand\n...\n",
    b"9" * 25,
    b"(1) Normal termination (return value ",
    b"x" * 3000,
]
mutation = st.tuples(
    st.sampled_from(["insert", "delete", "replace", "truncate"]),
    st.floats(0, 1),
    st.one_of(st.sampled_from(NASTY), st.binary(max_size=30)),
    st.integers(1, 300),
)


def mutate(data: bytes, muts: list[tuple[str, float, bytes, int]]) -> bytes:
    for kind, where, blob, span in muts:
        i = int(where * len(data))
        if kind == "insert":
            data = data[:i] + blob + data[i:]
        elif kind == "delete":
            data = data[:i] + data[i + span :]
        elif kind == "replace":
            data = data[:i] + blob + data[i + len(blob) :]
        else:
            data = data[:i]
    return data


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(0, 10**6), muts=st.lists(mutation, min_size=1, max_size=4), tz=ZONE_ARGS)
def test_mutated_logs(logs: list[tuple[str, bytes]], pick: int, muts: Any, tz: tzinfo | None) -> None:
    if pick % 5 == 0:
        data = FIXTURE
    else:
        data = logs[pick % len(logs)][1]
        start = data.find(b"\n...\n", (pick * 7919) % max(1, len(data) - 6000)) + 5  # ~6 KB of a log
        data = data[start : start + 6000]
    assume(data)
    with local_zone("America/Chicago"):
        check(mutate(data, muts), tz)
