"""The checkpoint's journal (ingest/checkpoint.py): a base, then what changed since, appended.

Loading the base and its journal gives exactly the state a whole checkpoint would hold; a torn
last record is ignored and counted; an older checkpoint (no journal) still loads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gwms_obs.ingest import checkpoint
from gwms_obs.ingest.counted import Counted
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from tests.test_replay_crashes import arrivals


def whole(ing: Ingest) -> dict[str, Any]:
    """The state a whole checkpoint of ``ing`` holds now, as a load reads it back."""
    return json.loads(checkpoint.dumps(ing.state()))


def loaded(ing: Ingest) -> dict[str, Any] | None:
    assert ing.cfg.checkpoint
    return checkpoint.load(ing.cfg.checkpoint, ing.cfg.factory_dir)


def changed(ck: Path, ing: Ingest) -> set[str]:
    """What the journal's last record changed: "part set", "part del" for each non-empty change (none:
    the save was a base, the journal past its bound)."""
    gen = json.loads(ck.read_bytes())["generation"]
    out: set[str] = set()
    records = list(checkpoint.records(f"{ck}{checkpoint.JOURNAL_SUFFIX}", gen))
    for kind, path, value in records[-1] if records else []:
        if kind != "whole":
            out |= {f"{'.'.join(path)} {what}" for what in ("set", "del") if value[what]}
    return out


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("archive") / "factory"
    simulate(root, 80, seed=31)
    return root


def watching(archive: Path, tmp_path: Path) -> tuple[Path, Path, Ingest]:
    """A copy of the archive's tree, watched and scanned once by an Ingest saving to its checkpoint."""
    live = tmp_path / "live"
    shutil.copytree(archive, live)
    ck = tmp_path / "checkpoint.json"
    ing = Ingest(IngestConfig(factory_dir=str(live), checkpoint=str(ck), settle_seconds=0.0))
    ing.watch()
    ing.scan()
    return live, ck, ing


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
@example(seed=524288)  # its journal passes its bound (1 MiB over a base of the empty tree): a base instead
def test_base_and_journal_load_as_the_whole_state_after_random_ticks(
    archive: Path, tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    """A watching daemon's ticks over files arriving in random pieces (event logs cut mid-event, a
    rotation), a journal record after each, now and then a base: each time, base + journal == whole."""
    rng = random.Random(seed)
    tmp = tmp_path_factory.mktemp("journal")
    live = tmp / "live"
    live.mkdir()
    steps = arrivals(archive, live, rng)
    ck = tmp / "checkpoint.json"
    ing = Ingest(IngestConfig(factory_dir=str(live), checkpoint=str(ck), settle_seconds=0.0))
    assert ing.watch()
    ing.scan()  # the first, full scan: a base
    records = 0
    seen_ops: set[str] = set()
    try:
        for step in steps:
            step()
            if rng.random() < 0.5:
                continue  # several steps in one tick
            full = rng.random() < 0.15  # the hourly full scan now and then: it appends as a tick does
            assert ing.discovery is not None
            ing.discovery.full_scan_seconds = 0.0 if full else 3600.0
            ing.scan()
            assert ing.last_scan_full == full
            if rng.random() < 0.1:
                ing.save_checkpoint()  # a base now and then (a full scan's, a journal past its bound)
            else:
                ing.save_checkpoint(journal=True)
                records += 1
                seen_ops.update(changed(ck, ing))
            assert loaded(ing) == whole(ing)
        ing.scan()
        ing.save_checkpoint(journal=True)
        assert loaded(ing) == whole(ing)
        assert sum(ing.ledger.pilots.values()) > 10
    finally:
        ing.close()
    assert records > 3
    # The records wrote changes, not the whole: pilots counted, open pilots set and ended.
    assert {"seen set", "timeline.open set", "timeline.open del", "timeline.ended_by_log set"} <= seen_ops, seen_ops
    shutil.rmtree(tmp)


@settings(max_examples=300, deadline=None)
@given(
    start=st.lists(st.integers(0, 30), unique=True, max_size=20),
    edits=st.lists(st.tuples(st.sampled_from(["set", "del", "new"]), st.integers(0, 40)), max_size=30),
)
def test_rows_changed_applies_to_the_same_rows_in_the_same_order(
    start: list[int], edits: list[tuple[str, int]]
) -> None:
    """An insertion-ordered map's rows replaced, deleted, added, deleted and added again (moved to its
    end): the marked rows plus the "rows" operation are the live rows, in the live order."""
    live: dict[tuple[int], list[int]] = {(k,): [k, 0] for k in start}
    before = [list(v) for v in live.values()]
    marks = checkpoint.mark_rows(live.items(), id)
    for i, (what, k) in enumerate(edits, 1):
        if what == "set" and (k,) in live:
            live[(k,)] = [k, i]  # a new value object, as the timeline stores a new tuple
        elif what == "del":
            live.pop((k,), None)
        elif what == "new":
            live.pop((k,), None)
            live[(k,)] = [k, -i]
    state = {"rows": before}
    op = checkpoint.rows_changed(marks, live, id, lambda k, v: list(v), 1)
    checkpoint.apply(state, ("rows", ["rows"], op))
    assert state["rows"] == list(live.values())


def test_a_torn_last_record_is_ignored_and_counted(
    archive: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kill mid-append (or a full disk) leaves part of a record: the load stops before it, with the
    state of the record before, counted as a parse error and logged."""
    live, ck, ing = watching(archive, tmp_path)
    journal = Path(f"{ck}{checkpoint.JOURNAL_SUFFIX}")
    states = []
    for i in range(3):
        ing.books.counted.count(f"x/{i}.0", 1.0 + i)  # a pilot counted (its key) in each record
        ing.save_checkpoint(journal=True)
        states.append((whole(ing), journal.stat().st_size))
    ing.close()
    assert loaded(ing) == states[2][0]
    for cut in (states[2][1] - 1, states[1][1] + 12, states[1][1] + 2):  # in the payload, in the header
        os.truncate(journal, cut)
        fresh = Ingest(IngestConfig(factory_dir=str(live), checkpoint=str(ck), settle_seconds=0.0))
        assert fresh.errors.counts[("checkpoint", "torn_journal")] == 1
        assert json.loads(checkpoint.dumps(fresh.state())) == states[1][0]
    assert any("torn_journal" in r.getMessage() and str(journal) in r.getMessage() for r in caplog.records)
    # A flipped byte is a checksum that does not match: the record is not applied.
    data = bytearray(journal.read_bytes()[: states[1][1]])
    data[-3] ^= 0x20
    journal.write_bytes(bytes(data))
    fresh = Ingest(IngestConfig(factory_dir=str(live), checkpoint=str(ck), settle_seconds=0.0))
    assert json.loads(checkpoint.dumps(fresh.state())) == states[0][0]
    assert fresh.errors.counts[("checkpoint", "torn_journal")] == 1


def test_a_journal_of_another_base_is_not_applied(archive: Path, tmp_path: Path) -> None:
    """A kill between a base's rename and its journal's unlink leaves the old journal beside the new
    base: its records carry the old generation and are not applied (nor counted as torn)."""
    live, ck, ing = watching(archive, tmp_path)
    ing.books.counted.count("x/1.0", 1.0)
    ing.save_checkpoint(journal=True)
    journal = Path(f"{ck}{checkpoint.JOURNAL_SUFFIX}")
    old = journal.read_bytes()
    ing.books.counted.seen.pop("x/1.0")  # by hand: the new base no longer has it
    ing.save_checkpoint()
    assert not journal.exists()
    journal.write_bytes(old)
    fresh = Ingest(IngestConfig(factory_dir=str(live), checkpoint=str(ck), settle_seconds=0.0))
    assert "x/1.0" not in fresh.seen and not fresh.errors.counts
    assert json.loads(checkpoint.dumps(fresh.state())) == whole(ing)


def test_a_version_3_checkpoint_loads(archive: Path, tmp_path: Path) -> None:
    """A checkpoint written before the journal (version 3: no generation) loads as it was; a journal
    file beside it is not its own and is ignored."""
    live = tmp_path / "live"
    shutil.copytree(archive, live)
    ck = tmp_path / "checkpoint.json"
    ing = Ingest(IngestConfig(factory_dir=str(live), checkpoint=str(ck), settle_seconds=0.0))
    ing.scan()
    state = whole(ing)
    assert state["version"] == checkpoint.VERSION == 4
    ck.write_text(json.dumps({**state, "version": 3}))  # as version 3 wrote it: no generation
    Path(f"{ck}{checkpoint.JOURNAL_SUFFIX}").write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x00junk!")
    fresh = Ingest(IngestConfig(factory_dir=str(live), checkpoint=str(ck), settle_seconds=0.0))
    assert json.loads(checkpoint.dumps(fresh.state())) == state
    assert not fresh.errors.counts
    assert fresh.scan().pilots == 0  # nothing counted again


def test_a_full_disk_mid_append_leaves_the_last_record_and_a_base_comes_next(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC after half a record: the save fails (the daemon's next scan retries), the load has the
    record before; the next save writes a base (no record may follow a torn one), and loads whole."""
    live, ck, ing = watching(archive, tmp_path)
    ing.books.counted.count("x/1.0", 1.0)
    ing.save_checkpoint(journal=True)
    before = whole(ing)
    ing.books.counted.count("x/2.0", 2.0)
    write = os.write

    def full(fd: int, data: bytes) -> int:
        write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        ing.save_checkpoint(journal=True)
    monkeypatch.setattr(os, "write", write)
    torn: list[str] = []
    assert checkpoint.load(str(ck), str(live), lambda p, at, why: torn.append(why)) == before
    assert len(torn) == 1
    journal = Path(f"{ck}{checkpoint.JOURNAL_SUFFIX}")
    mtime = ck.stat().st_mtime_ns
    ing.save_checkpoint(journal=True)
    assert ck.stat().st_mtime_ns != mtime and not journal.exists()  # a base, the torn journal gone
    assert loaded(ing) == whole(ing) and "x/2.0" in whole(ing)["seen"]


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["count", "forget", "save"]), st.integers(0, 12)), max_size=40))
def test_pilots_counted_and_forgotten_journal_as_the_whole(steps: list[tuple[str, int]]) -> None:
    """Counted's journal part over counts (again, after a forget too), forgets (a full scan's prune,
    which no longer needs a base) and saves: the saved state plus its operations is the live one."""
    c = Counted()
    c.saved()
    on_disk = json.loads(json.dumps(c.state()))
    for i, (what, k) in enumerate(steps, 1):
        if what == "count":
            c.count(f"e/{k}.0", float(i))
        elif what == "forget":
            c.forget(float(i - k), present=())  # those counted before i - k
        else:
            ops = c.changes()
            assert ops is not None
            for op in json.loads(json.dumps(ops)):
                checkpoint.apply(on_disk, (op[0], op[1], op[2]))
            c.saved()
            assert on_disk == json.loads(json.dumps(c.state()))
