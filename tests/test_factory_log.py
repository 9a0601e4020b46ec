"""The factory's own entry logs: submissions, condor_submit failures and removals, as GlideinWMS writes them.

The fixture (tests/fixtures/glideinwms_factory_log/) was written by GlideinWMS's own code
(tools/glideinwms_factory_log_fixture.py, glideinWMS/glideinwms @ efdc530a5): the entry
logger of lib/logSupport.py L541-576 with the RPM's ``info`` and ``err`` process logs, and
factory/glideFactoryLib.py's

* ``submitGlideins``: INFO ``Submitted %i glideins to %s: %s`` (L2010-2011, in a finally);
* ``executeSubmit``: ERROR ``condor_submit failed: %s`` (L1890-1897), after condorExe's
  ``Failed condor command ...`` (lib/condorExe.py L182-185) and before keepIdleGlideins's
  WARNING of the same text (L989-991);
* ``sanitizeGlideins``: WARNING ``Found %i stale glideins`` (L1158), ``Found %i stale (>%ih)
  running glideins`` (L1166), ``Found %i unrecoverable held glideins that have been held for
  over 20 iterations`` (L1175), ``But removing only %i (unrecoverable held - ...)`` (L1189);
* ``clean_glidein_queue``: INFO ``Removing %i unsubmitted idle|idle|running|unrecoverable
  held|held glideins`` (L1055, L1073, L1091, L1101, L1107);

and glideFactoryEntry.py L1115-1118's ``Checking downtime for frontend %s security class: %s
(entry %s).``, which names the client of the submissions after it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.catalogue import RemovalReason
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.factory_log import process_logs
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest
from gwms_obs.sources import factory_log as fl

FIXTURE = Path(__file__).parent / "fixtures" / "glideinwms_factory_log"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
ENTRY = EXPECTED["entry"]
LOGS = FIXTURE / f"entry_{ENTRY}"
INFO = (LOGS / f"{ENTRY}.info.log").read_bytes()
ERR = (LOGS / f"{ENTRY}.err.log").read_bytes()
SRC = "factory_log"


def records(buf: bytes, path: str = "x.log") -> tuple[list[fl.Record], int, ParseErrors]:
    errors = ParseErrors()
    recs, used = fl.scan_buffer(buf, path, 0, errors)
    return recs, used, errors


def totals(recs: list[fl.Record]) -> dict[str, object]:
    """What the lines say, counted as the stage counts them (a submission's client: its file's newest)."""
    submitted: Counter[str] = Counter()
    removed: Counter[str] = Counter()
    failures = 0
    client = "unknown"
    for r in recs:
        if r.kind is fl.Kind.CLIENT:
            client = r.client
        elif r.kind is fl.Kind.SUBMITTED:
            submitted[client] += r.n
        elif r.kind is fl.Kind.SUBMIT_FAILED:
            failures += 1
        elif r.reason is not None:
            removed[r.reason.value] += r.n
    return {"submitted": dict(submitted), "submit_failures": failures, "removed": dict(removed)}


def test_the_lines_glideinwms_wrote_read_as_what_it_was_told() -> None:
    info, used_info, e1 = records(INFO)
    err, used_err, e2 = records(ERR)
    assert used_info == len(INFO) and used_err == len(ERR)
    assert e1.total() == 0 and e2.total() == 0
    got = totals(info + err)
    assert got == {k: EXPECTED[k] for k in ("submitted", "submit_failures", "removed")}
    # "Submitted 0 glideins to ..." after a refused condor_submit is read, and adds nothing
    assert [r.n for r in info if r.kind is fl.Kind.SUBMITTED] == [12, 3, 0, 10]


def test_a_failure_is_counted_once_from_the_error_not_the_warning_that_repeats_it() -> None:
    err, _, _ = records(ERR)
    assert ERR.count(b"condor_submit failed: ") == 4  # executeSubmit's ERROR and keepIdleGlideins's WARNING
    failed = [r for r in err if r.kind is fl.Kind.SUBMIT_FAILED]
    assert len(failed) == 2
    # condorExe's own "Failed condor command" ERROR is not a second failure
    assert ERR.count(b"ERROR: condorExe:185: Failed condor command") == 2
    assert failed[0].text.startswith("Failed condor command 'condor_submit -name schedd_glideins3@")
    assert "\n" not in failed[0].text  # the stderr's continuation lines are not part of it


def test_the_debug_handler_prefix_and_time() -> None:
    line = b"[2026-05-28 20:43:14,329] WARNING: glideFactoryLib:1158: Found 2 stale glideins\n"
    (r,), _, _ = records(line)
    assert (r.kind, r.n, r.reason) == (fl.Kind.REMOVED, 2, RemovalReason.STALE_IDLE)
    assert r.t == datetime(2026, 5, 28, 20, 43, 14, 329000).timestamp()  # the factory's local time
    # the same record from a handler without DEBUG (no "module:lineno: ") reads the same
    (r2,), _, _ = records(b"[2026-05-28 20:43:14,329] WARNING: Found 2 stale glideins\n")
    assert r2 == r and r.level == "WARNING"


def test_only_the_entry_level_counts_and_other_lines_are_not_errors() -> None:
    buf = (
        b"[2026-05-28 20:00:00,000] INFO: Submitted 5 glideins\n"  # glideFactoryEntry L1747: the same glideins
        b"[2026-05-28 20:00:00,001] DEBUG: glideFactoryLib:1995: Submitting 5 glideins\n"
        b"[2026-05-28 20:00:00,002] WARNING: Found 3 held glideins, 1 within limits\n"  # a release
        b"[2026-05-28 20:00:00,003] INFO: Removed 5 glideins on s: [(1, 0)]\n"  # no reason: the intent counts
        b"[2026-05-28 20:00:00,004] WARNING: Removing 5 idle glideins\n"  # not the level clean_glidein_queue uses
        b"a continuation line of condor_submit's stderr: Submitted 7 glideins to x: []\n"
    )
    recs, used, errors = records(buf)
    assert recs == [] and used == len(buf) and errors.total() == 0


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"[2026-05-28 20:00:00,000] INFO: Submitted many glideins to s: []\n", "malformed_line"),
        (b"[2026-05-28 20:00:00,000] INFO: Removing 3 excellent glideins\n", "malformed_line"),
        (b"[2026-05-28 20:00:00,000] WARNING: Found 3 stale glideins now\n", "malformed_line"),
        (b"[2026-05-28 20:00:00,000] INFO: Checking downtime for frontend x\n", "malformed_line"),
        (b"[2026-02-30 20:00:00,000] INFO: Submitted 3 glideins to s: []\n", "bad_timestamp"),
        (b"[2026-05-28 20:00:00,000] INFO: Submitted 9999999999 glideins to s: []\n", "malformed_line"),
    ],
)
def test_a_bad_line_is_counted_with_its_place_and_the_good_lines_around_it_kept(line: bytes, reason: str) -> None:
    good = b"[2026-05-28 19:59:00,000] INFO: Submitted 2 glideins to s: [(1, 0), (1, 1)]\n"
    buf = good + line + good
    recs, used, errors = records(buf, "/f/server/entry_E/E.info.log")
    assert [r.n for r in recs] == [2, 2] and used == len(buf)
    assert errors.counts == Counter({(SRC, reason): 1})


def test_bounded_lines_and_a_half_written_last_line_waits() -> None:
    long = b"[2026-05-28 20:00:00,000] INFO: " + b"x" * (fl.MAX_LINE + 10) + b"\n"
    good = b"[2026-05-28 20:00:01,000] INFO: Submitted 1 glideins to s: [(1, 0)]\n"
    recs, used, errors = records(long + good + good[:30])
    assert [r.n for r in recs] == [1] and used == len(long + good)
    assert errors.counts == Counter({(SRC, "line_too_long"): 1})
    _, used, errors = records(b"x" * (fl.MAX_LINE + 1))  # unterminated and already too long: passed, counted
    assert used == fl.MAX_LINE + 1 and errors.total() == 1


def test_a_failure_text_is_redacted_and_bounded() -> None:
    token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJmYWN0b3J5In0.c2lnbmF0dXJl"
    line = f"[2026-05-28 20:00:00,000] ERROR: condor_submit failed: Stderr: token {token} refused {'y' * 2000}\n"
    (r,), _, _ = records(line.encode())
    assert token not in r.text and "****" in r.text and len(r.text) <= fl.MAX_TEXT


# --- the stage: the logs in a factory tree, followed --------------------------------------------


def factory(tmp_path: Path) -> Path:
    d = tmp_path / "server" / f"entry_{ENTRY}"
    d.mkdir(parents=True)
    for f in LOGS.iterdir():
        shutil.copy(f, d / f.name)
    return tmp_path


def scan(root: Path, checkpoint: Path | None = None) -> Ingest:
    ing = Ingest(IngestConfig(factory_dir=str(root), checkpoint=str(checkpoint) if checkpoint else None))
    ing.scan()
    return ing


def ledger_totals(ing: Ingest) -> dict[str, Any]:
    led = ing.ledger
    return {
        "submitted": {k[1]: v for k, v in led.submitted.items()},
        "submit_failures": sum(led.submit_failures.values()),
        "removed": {k[2]: v for k, v in led.removed.items()},
    }


def test_the_stage_counts_the_fixture_once_across_scans_and_restarts(tmp_path: Path) -> None:
    root = factory(tmp_path / "f")
    ck = tmp_path / "ck.json"
    ing = scan(root, ck)
    want = {k: EXPECTED[k] for k in ("submitted", "submit_failures", "removed")}
    assert ledger_totals(ing) == want
    assert ing.errors.total() == 0
    assert ing.health.files["factory_log"] == 2
    ing.scan()  # nothing new
    assert ledger_totals(ing) == want
    again = scan(root, ck)  # a restart: the checkpoint's ledger, and nothing read again
    assert ledger_totals(again) == want


def test_appended_lines_count_and_the_client_carries_over(tmp_path: Path) -> None:
    root = factory(tmp_path)
    ing = scan(root)
    info = root / "server" / f"entry_{ENTRY}" / f"{ENTRY}.info.log"
    with info.open("ab") as f:  # the file's newest request was CMS's
        f.write(b"[2026-05-28 21:10:00,000] INFO: Submitted 4 glideins to s: [(1, 0)]\n[2026-05-28 21:1")
    ing.scan()
    assert ledger_totals(ing)["submitted"] == {"CMSG-v1_0_cmspilot": 26, "OSG_Flock_frontend": 3}
    with info.open("ab") as f:  # the half line, finished
        f.write(b"0:01,000] INFO: Submitted 1 glideins to s: [(2, 0)]\n")
    ing.scan()
    assert ledger_totals(ing)["submitted"]["CMSG-v1_0_cmspilot"] == 27


def test_rotation_by_glideinhandler_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """GlideinHandler.doRollover (lib/logSupport.py L249-311) renames the file to
    <file>.YYYY-MM-DD_HH-MM and opens a new one; lines written before the rename that the
    last scan did not see are read from the renamed copy under the old cursor."""
    root = factory(tmp_path)
    ing = scan(root)
    d = root / "server" / f"entry_{ENTRY}"
    info = d / f"{ENTRY}.info.log"
    with info.open("ab") as f:
        f.write(b"[2026-05-28 21:10:00,000] INFO: Submitted 4 glideins to s: []\n")
    os.rename(info, d / f"{ENTRY}.info.log.2026-05-28_21-10")
    info.write_bytes(
        b"[2026-05-28 21:11:00,000] INFO: Checking downtime for frontend OSG_Flock security class: frontend"
        b" (entry CMS_T2_US_Example_ce01).\n[2026-05-28 21:11:01,000] INFO: Submitted 2 glideins to s: []\n"
    )
    assert [p for _, _, p in process_logs(str(root))] == [
        str(d / f"{ENTRY}.err.log"),
        str(d / f"{ENTRY}.info.log.2026-05-28_21-10"),
        str(info),
    ]
    ing.scan()
    assert ledger_totals(ing)["submitted"] == {"CMSG-v1_0_cmspilot": 26, "OSG_Flock_frontend": 5}
    ing.scan()
    assert ledger_totals(ing)["submitted"] == {"CMSG-v1_0_cmspilot": 26, "OSG_Flock_frontend": 5}


def test_two_files_that_keep_the_same_level_count_each_record_once(tmp_path: Path) -> None:
    """An ``all`` process log beside ``info`` (both keep INFO) holds every INFO record twice."""
    root = factory(tmp_path)
    d = root / "server" / f"entry_{ENTRY}"
    (d / f"{ENTRY}.all.log").write_bytes(INFO)
    (d / f"{ENTRY}admin.all.log").write_bytes(INFO)  # an ADMIN handler's file: not read
    (d / f"{ENTRY}.info.log.2026-05-28_20-00.gz").write_bytes(b"\x1f\x8b")  # compressed: not read
    ing = scan(root)
    assert ing.health.files["factory_log"] == 3
    assert ledger_totals(ing) == {k: EXPECTED[k] for k in ("submitted", "submit_failures", "removed")}
    # The all log goes (a reconfig): the info log's new lines count from the next read on.
    (d / f"{ENTRY}.all.log").unlink()
    with (d / f"{ENTRY}.info.log").open("ab") as f:
        f.write(b"[2026-05-28 21:10:00,000] INFO: Submitted 4 glideins to s: []\n")
    ing.scan()
    assert ledger_totals(ing)["submitted"] == {"CMSG-v1_0_cmspilot": 26, "OSG_Flock_frontend": 3}


def test_the_site_label_comes_from_the_entry_description(tmp_path: Path) -> None:
    root = factory(tmp_path)
    monitor = root / "monitor" / f"entry_{ENTRY}"
    monitor.mkdir(parents=True)
    # GlideinWMS's descript.xml of a test entry (GLIDEIN_Site="el6_osg34"), named as ours
    xml = (Path(__file__).parent / "fixtures" / "descript_entry_el6_osg34.xml").read_bytes()
    (monitor / "descript.xml").write_bytes(xml.replace(b'<entry name="el6_osg34">', f'<entry name="{ENTRY}">'.encode()))
    led = scan(root).ledger
    assert {k[2] for k in led.submitted} == {k[1] for k in led.submit_failures} == {"el6_osg34"}
    assert {k[1] for k in led.removed} == {"el6_osg34"}


def test_the_simulated_factory_logs_read_as_its_plan(tmp_path: Path) -> None:
    """The simulator's entry logs (simulate/write/factory_log.py) against its ground truth: every
    cluster submitted by its client, condor_submit refused only at the entry that has it, the held
    glideins removed as unrecoverable held and the aborted ones as excess running."""
    from gwms_obs.simulate.factory import simulate
    from gwms_obs.simulate.scenario import OPERATOR_ENTRIES
    from gwms_obs.simulate.write import factory_log as sim_log

    s = simulate(tmp_path, 1500, seed=7, anomalies=True, ground_truth=True)
    assert s.ground_truth is not None
    ing = scan(tmp_path)
    assert ing.errors.total("factory_log") == 0
    led = ing.ledger
    now = s.snapshot
    want_submitted: Counter[tuple[str, str]] = Counter()
    want_removed: Counter[tuple[str, str]] = Counter()
    for p in s.ground_truth:
        if p.submitted - 3 <= now:
            want_submitted[(p.entry, p.client)] += 1
        if p.kind == "lost" and p.ended is not None and p.ended <= now:
            want_removed[(p.entry, "unrecoverable_held" if p.end_event == "held" else "excess_running")] += 1
    assert Counter({(e, c): n for (e, c, _), n in led.submitted.items()}) == want_submitted
    # HTCondor's count of the same glideins: the 000 events of the event logs, per entry and client.
    assert Counter({(e, c): n for (e, c, _), n in led.submit_events.items()}) == want_submitted
    assert Counter({(e, r): n for (e, _, r), n in led.removed.items()}) == want_removed
    # The event log corroborates: every glidein the factory removed has its 009 (aborted via condor_rm).
    aborted: Counter[str] = Counter()
    for log in tmp_path.glob("client/*/*/entry_*/condor_activity_*.log"):
        text = b"\n" + log.read_bytes()
        aborted[log.parent.name.removeprefix("entry_")] += text.count(b"\n009 (")
    removed_by_entry: Counter[str] = Counter()
    for (e, _, _), n in led.removed.items():
        removed_by_entry[e] += n
    assert +removed_by_entry == +aborted
    failing = {e for (e, _), n in led.submit_failures.items() if n}
    assert failing == {e.name for e in OPERATOR_ENTRIES if e.submit_fail} == {"OSG_US_AUTHFAIL_ce"}
    spec = next(e for e in OPERATOR_ENTRIES if e.submit_fail)
    clusters = {p.cluster: p.submitted - 3 for p in s.ground_truth if p.entry == spec.name}
    refused = [(t, sim_log._failures(spec, c)) for c, t in clusters.items()]
    want = sum(1 for t, k in refused for i in range(1, k + 1) if t - i * sim_log.CYCLE <= now)
    assert sum(led.submit_failures.values()) == want > 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096), st.integers(min_value=0, max_value=3))
def test_any_bytes_are_read_without_an_exception_and_keep_the_good_lines(junk: bytes, where: int) -> None:
    good = b"[2026-05-28 20:00:00,000] INFO: Submitted 2 glideins to s: [(1, 0), (1, 1)]\n"
    parts = [good, good, good]
    parts.insert(where, junk.replace(b"\n", b" ") + b"\n")  # one line of anything, among good ones
    buf = b"".join(parts)
    recs, used, errors = records(buf)
    assert used == len(buf)
    assert sum(r.n for r in recs if r.kind is fl.Kind.SUBMITTED) >= 6  # the junk line may itself read as one
    assert errors.total() <= 1


def test_a_log_that_is_not_a_regular_file_inside_the_tree_is_refused_and_counted(tmp_path: Path) -> None:
    root = factory(tmp_path / "f")
    d = root / "server" / f"entry_{ENTRY}"
    outside = tmp_path / "secret.log"
    outside.write_bytes(b"[2026-05-28 20:00:00,000] INFO: Submitted 99 glideins to s: []\n")
    (d / f"{ENTRY}.all.log").symlink_to(outside)
    os.mkfifo(d / f"{ENTRY}.debug.log")  # a FIFO would block a reader that opened it blindly
    ing = scan(root)
    assert ledger_totals(ing) == {k: EXPECTED[k] for k in ("submitted", "submit_failures", "removed")}
    refused = {reason: n for (src, reason), n in ing.errors.counts.items() if src == SRC}
    assert sum(refused.values()) == 2, refused
    ing.scan()  # listed again: not counted again
    assert sum(n for (src, _), n in ing.errors.counts.items() if src == SRC) == 2


def test_the_whole_buffer_search_finds_what_the_line_by_line_read_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A buffer with no line over MAX_LINE is searched for candidate lines at once; one with such a
    line is read line by line: the same records and errors either way."""
    hostile = (
        b"[2026-05-28 20:00:00,000] INFO: Submitted many glideins to s: []\n"
        b"[2026-02-30 20:00:00,000] INFO: Removing 1 idle glideins\n"
    )
    buf = INFO + ERR + hostile + INFO[:50]
    fast = records(buf)
    monkeypatch.setattr(fl, "_may_have_long_line", lambda buf, end: True)
    slow = records(buf)
    assert fast[0] == slow[0] and fast[1] == slow[1] and fast[2].counts == slow[2].counts
    assert fast[2].counts == Counter({(SRC, "malformed_line"): 1, (SRC, "bad_timestamp"): 1})


def test_a_long_history_in_two_files_of_one_level_counts_once(tmp_path: Path) -> None:
    """A first read of days of an entry whose ``all`` and ``info`` logs both keep INFO: each
    submission once, however many lines come before the other file is read."""
    d = tmp_path / "server" / "entry_E"
    d.mkdir(parents=True)
    lines = b"".join(
        b"[2026-05-%02d %02d:%02d:00,000] INFO: Submitted 1 glideins to s: [(%d, 0)]\n"
        % (1 + i // 1440, i // 60 % 24, i % 60, i)
        for i in range(5000)
    )
    for ext in ("all", "info"):
        (d / f"E.{ext}.log").write_bytes(lines)
    assert sum(scan(tmp_path).ledger.submitted.values()) == 5000
