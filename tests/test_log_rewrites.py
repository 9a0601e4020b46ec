"""Followed logs that change under the daemon other than by appends (issue 29, items 8, 16, 17).

* a completed_jobs log rewritten in place (same inode, truncated, then longer):
  the bytes before the cursor changed, so it is read again from its start;
* a log renamed logrotate-style (``….log`` → ``….log.1``): the rotated file is
  listed by the daemon and by ``report`` alike, and the daemon follows it by its
  inode (what it read under the old name is not read again);
* event-log pilots whose events are months old, their start and end read in
  different scans: the timeline's expiry runs on the log's own time.

Each case ends with the daemon's numbers equal to a one-shot report on the final tree.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gwms_obs.catalogue import Source
from gwms_obs.ingest.books import Books
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import condor_event_log as el
from tests.support.readers import read_new

NEVER = 1e12  # lost_after_seconds: the event log never counts a pilot (completed_jobs lines do)


def daemon(root: Path, ck: Path, lost_after: float = NEVER) -> Ingest:
    return Ingest(
        IngestConfig(factory_dir=str(root), checkpoint=str(ck), settle_seconds=0.0, lost_after_seconds=lost_after)
    )


def report(root: Path, lost_after: float = NEVER) -> Ingest:
    ing = Ingest(IngestConfig.one_shot(str(root), None, lost_after, workers=1))
    ing.scan()
    return ing


def pilots(ing: Ingest) -> int:
    return sum(ing.ledger.pilots.values())


def assert_same(got: Ingest, want: Ingest) -> None:
    """The same pilots per label set, and the same seconds (summed in another order: approx)."""
    assert dict(got.ledger.pilots) == dict(want.ledger.pilots)
    for table in ("cpu", "gpu"):
        assert dict(getattr(got.ledger, table)) == pytest.approx(dict(getattr(want.ledger, table)), rel=1e-9)


def drop_pilot_files(root: Path) -> None:
    """The factory cleaned up every .out/.err: the logs are the only sources."""
    for p in root.glob("client/user_*/glidein_*/entry_*/job.*"):
        p.unlink()


def completed_logs(root: Path) -> list[Path]:
    return sorted(root.glob("server/entry_*/completed_jobs_*.log"))


def event_logs(root: Path) -> list[Path]:
    return sorted(root.glob("client/user_*/glidein_*/entry_*/condor_activity_*.log"))


def reasons(ing: Ingest, source: str) -> dict[str, int]:
    return {r: n for (s, r), n in ing.errors.counts.items() if s == source}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "f"
    simulate(root, 120, seed=29)
    return root


# --- 8. a log rewritten in place -------------------------------------------------------------------
def test_a_log_rewritten_in_place_is_read_again_from_its_start(tree: Path, tmp_path: Path) -> None:
    drop_pilot_files(tree)
    log = max(completed_logs(tree), key=lambda p: p.stat().st_size)
    lines = log.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 6
    # The daemon first sees the log holding its later lines only...
    log.write_bytes(b"".join(lines[len(lines) // 2 :]))
    inode = log.stat().st_ino
    ck = tmp_path / "ck.json"
    d = daemon(tree, ck)
    d.scan()
    before = pilots(d)
    # ...then the log is rewritten in place (truncated, the whole day written back: longer).
    with open(log, "r+b") as f:
        f.truncate(0)
        f.write(b"".join(lines))
    assert log.stat().st_ino == inode
    again = daemon(tree, ck)  # a restart: the cursor comes from the checkpoint
    again.scan()
    want = report(tree)
    assert pilots(want) > before
    assert pilots(again) == pilots(want)
    assert_same(again, want)
    assert "bad_line" not in reasons(again, Source.COMPLETED_JOBS)
    again.scan()  # nothing new: nothing counted twice, the cursor at the end again
    assert pilots(again) == pilots(want)


def test_an_unchanged_log_is_not_reread_and_appends_are_read_once(tree: Path, tmp_path: Path) -> None:
    """The fingerprint holds across scans and restarts: only what was appended is read."""
    drop_pilot_files(tree)
    log = max(completed_logs(tree), key=lambda p: p.stat().st_size)
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-2]))
    ck = tmp_path / "ck.json"
    d = daemon(tree, ck)
    d.scan()
    with open(log, "ab") as f:
        f.write(b"".join(lines[-2:]))
    again = daemon(tree, ck)
    again.scan()
    assert again.health.bytes_read[Source.COMPLETED_JOBS] == len(b"".join(lines[-2:]))
    assert_same(again, report(tree))


def test_a_checkpoint_without_fingerprints_resumes_as_before(tree: Path, tmp_path: Path) -> None:
    """A checkpoint written before fingerprints (cursors [inode, offset], version 2) loads:
    its cursors are trusted as they were."""
    import json

    drop_pilot_files(tree)
    ck = tmp_path / "ck.json"
    d = daemon(tree, ck)
    d.scan()
    state = json.loads(ck.read_bytes())
    state["version"] = 2
    state["cursors"] = {p: v[:2] for p, v in state["cursors"].items()}
    ck.write_text(json.dumps(state))
    again = daemon(tree, ck)
    again.scan()
    assert again.health.bytes_read[Source.COMPLETED_JOBS] == 0
    assert_same(again, d)


# --- 17. logs renamed logrotate-style --------------------------------------------------------------
def test_report_reads_rotated_completed_jobs_logs(tree: Path) -> None:
    want = report(tree)
    assert "unmapped_client" not in reasons(want, Source.GLIDEIN_OUT)
    for log in completed_logs(tree):
        log.rename(log.with_name(log.name + ".1"))
    got = report(tree)
    assert_same(got, want)
    assert not any(r == "unmapped_client" for (_, r) in got.errors.counts)


def test_the_daemon_follows_a_renamed_log_by_its_inode(tree: Path, tmp_path: Path) -> None:
    drop_pilot_files(tree)
    log = max(completed_logs(tree), key=lambda p: p.stat().st_size)
    lines = log.read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    log.write_bytes(b"".join(lines[:half]))
    ck = tmp_path / "ck.json"
    d = daemon(tree, ck)
    d.scan()
    # logrotate renames the log; the factory, still holding it open, appends the rest there.
    rotated = log.with_name(log.name + ".1")
    log.rename(rotated)
    with open(rotated, "ab") as f:
        f.write(b"".join(lines[half:]))
    again = daemon(tree, ck)
    again.scan()
    assert again.health.bytes_read[Source.COMPLETED_JOBS] == len(b"".join(lines[half:]))  # not the old bytes
    want = report(tree)
    assert_same(again, want)
    # A new log under the old name: read from its start, the rotated one left where it was.
    log.write_bytes(lines[0])  # a pilot already counted
    read = again.health.bytes_read[Source.COMPLETED_JOBS]
    again.scan()
    assert again.health.bytes_read[Source.COMPLETED_JOBS] - read == len(lines[0])
    assert_same(again, want)


def test_a_rotated_event_log_is_the_same_log(tree: Path, tmp_path: Path) -> None:
    """A pilot started in ``condor_activity_….log`` and ended after its rename to ``….log.1``
    is one pilot (lost: its .out and line are gone), for the daemon and the report."""
    want = event_logs_in_two_pieces(tree, tmp_path, rotate=True)
    assert pilots(want) > 0
    again = daemon(tree, tmp_path / "ck.json", lost_after=0.0)
    again.scan()
    assert_same(report(tree, lost_after=0.0), want)
    assert_same(again, want)


# --- 16. event-log time, not the wall clock --------------------------------------------------------
def split_events(data: bytes) -> tuple[bytes, bytes]:
    """The log cut after the event that ends nearest its middle."""
    ends = [m.end() for m in re.finditer(rb"^\.\.\.\n", data, re.M)]
    cut = min(ends, key=lambda e: abs(e - len(data) // 2))
    return data[:cut], data[cut:]


def event_logs_in_two_pieces(tree: Path, tmp_path: Path, *, rotate: bool) -> Ingest:
    """The pilots the event logs alone count (the report of the whole logs), after a daemon
    on ``tmp_path/ck.json`` scanned each log's first half and the second half arrived, in
    the same file or in its logrotate-style rename ``….log.1`` (``rotate``)."""
    drop_pilot_files(tree)
    for log in completed_logs(tree):
        log.unlink()
    want = report(tree, lost_after=0.0)
    halves = {log: split_events(log.read_bytes()) for log in event_logs(tree)}
    for log, (first, _) in halves.items():
        log.write_bytes(first)
    daemon(tree, tmp_path / "ck.json", lost_after=0.0).scan()
    for log, (_, rest) in halves.items():
        target = log.rename(log.with_name(log.name + ".1")) if rotate else log
        with open(target, "ab") as f:
            f.write(rest)
    return want


def test_old_event_logs_read_in_two_scans_count_every_pilot(tree: Path, tmp_path: Path) -> None:
    """A backfill of months-old event logs, each arriving in two pieces: the pilots open
    at the first scan are not expired by the wall clock (the logs' events are ~170 days old)."""
    want = event_logs_in_two_pieces(tree, tmp_path, rotate=False)
    again = daemon(tree, tmp_path / "ck.json", lost_after=0.0)
    again.scan()
    assert pilots(again) == pilots(want)
    assert_same(again, want)
    assert "pilot_expired" not in reasons(again, Source.CONDOR_EVENT_LOG)


PATH = "/f/client/user_u/glidein_g/entry_E/condor_activity_20220624_fe.log"


def test_expiry_runs_on_the_logs_time_and_what_it_drops_is_returned() -> None:
    tl = el.PilotTimeline()
    t0 = 1_600_000_000.0  # years before the wall clock
    tl.feed([el.CondorEvent(1, 0, el.EXECUTING, t0), el.CondorEvent(2, 0, el.EXECUTING, t0)], PATH)
    assert tl.expire() == []  # silent in its log for 0 s, whatever the wall clock says
    # Another log of the same entry and client moves on a year: its time is not this log's.
    other = PATH.replace("20220624", "20230624")
    tl.feed([el.CondorEvent(9, 0, el.EXECUTING, t0 + 365 * 86400)], other)
    assert tl.expire() == []
    # This log moves on past max_age with pilot 2 still in it and pilot 1 silent.
    tl.feed([el.CondorEvent(2, 0, el.HELD, t0 + tl.max_age + 5, reason="r")], PATH)
    ((gone, log),) = tl.expire()
    assert (gone.cluster, gone.started, gone.ended) == (1, t0, None)
    assert log == ("E", "fe", "20220624")
    assert len(tl) == 2
    # A rotated name is the same log: its events move the same clock.
    tl.feed([el.CondorEvent(5, 0, el.EXECUTING, t0 + 3 * tl.max_age)], PATH + ".1")
    assert {p.cluster for p, _ in tl.expire()} == {2}


def test_expired_pilots_are_counted_and_logged(tree: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A pilot silent in its log for longer than max_age is still dropped, but never silently."""
    drop_pilot_files(tree)
    for log in completed_logs(tree):
        log.unlink()
    log = event_logs(tree)[0]
    data = log.read_bytes()
    first_end = re.search(rb"^005 \(", data, re.M)
    assert first_end is not None
    # The log up to its first end, then an unrelated pilot decades later: the pilots
    # still open went silent in their own log.
    late = b"001 (99999.000.000) 2099-01-01 00:00:00 Job executing on host: x\n...\n"
    log.write_bytes(data[: first_end.start()] + late)
    d = daemon(tree, tmp_path / "ck.json", lost_after=0.0)
    with caplog.at_level("WARNING"):
        d.scan()
    assert reasons(d, Source.CONDOR_EVENT_LOG).get("pilot_expired", 0) > 0
    assert "pilot_expired" in caplog.text and str(log) in caplog.text


def test_a_cursor_moves_to_the_renamed_path_only_with_its_bytes(tmp_path: Path) -> None:
    """Following by inode checks the fingerprint: a recycled inode with other bytes is a new file."""
    root = tmp_path / "f"
    simulate(root, 20, seed=3)
    b = Books(IngestConfig(factory_dir=str(root)), lambda: 0.0)
    log = completed_logs(root)[0]
    got: list[bytes] = []
    read_new(b.follower, str(log), lambda buf, p, o: ([buf], len(buf)), got.extend)
    size = log.stat().st_size
    rotated = str(log) + ".1"
    os.rename(log, rotated)
    with open(rotated, "r+b") as f:  # same inode, other bytes just before the cursor
        f.seek(size - 20)
        f.write(b"X" * 10)
    got.clear()
    read_new(b.follower, rotated, lambda buf, p, o: ([buf], len(buf)), got.extend)
    assert sum(map(len, got)) == size  # read from its start
