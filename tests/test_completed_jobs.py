"""completed_jobs_YYYYMMDD.log reader: real lines, increments, hostile input."""

from __future__ import annotations

import shutil
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.model import CompletedJob
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources import completed_jobs as cj
from tests.support.readers import completed_jobs_file, parse_completed

FIXTURE = Path(__file__).parent / "fixtures" / "completed_jobs_sample.log"
PATH = "/var/log/gwms-factory/server/entry_CMSHTPC_T2_AT_Vienna/completed_jobs_20221122.log"
SAMPLE = FIXTURE.read_bytes()
LINES = SAMPLE.splitlines(keepends=True)
SRC = "completed_jobs"


def parse(buf: bytes) -> tuple[list[CompletedJob], int, ParseErrors]:
    errors = ParseErrors()
    recs, used = parse_completed(buf, PATH, 0, errors)
    return recs, used, errors


def test_real_lines_both_id_forms() -> None:
    recs, used, errors = parse(SAMPLE)
    assert used == len(SAMPLE) and not errors.counts
    assert len(recs) == 5
    r = recs[0]
    assert r.terminated == 1644414938.0  # 2022-02-09T05:55:38-08:00
    assert (r.client, r.username, r.cluster, r.proc) == ("fermilab_okd_gpfe01_frontend", "fefermilab", 6767402, 0)
    assert (r.duration, r.condor_started, r.condor_duration) == (1359, True, 1266)
    assert (r.jobsnr, r.user_duration, r.goodput, r.user_terminated) == (0, 0, 0, 0)
    assert (r.waste_validation, r.waste_idle, r.waste_nosuccess, r.waste_badput) == (66, 1000, 0, 1000)
    assert r.entry == "CMSHTPC_T2_AT_Vienna" and not r.half_normalized
    b = recs[1]
    assert (b.cluster, b.proc, b.jobsnr, b.user_duration, b.waste_idle) == (10176593, 0, 2, 7200, 133)
    assert not recs[2].condor_started and recs[2].condor_duration == 0
    assert recs[3].proc == 1 and recs[3].half_normalized and recs[3].waste_idle == -5933
    assert recs[4].duration == -1  # sentinel kept as is


def test_careful_path_accepts_reordered_and_crlf_line() -> None:
    line = (
        b'<job id="b\'7.002\'" client=\'c\' username="u" terminated="2022-02-09T05:55:38-08:00" '
        b'duration="10.0" condor_started="True" condor_duration="5">'
        b'<user jobsnr="1" duration="4" goodput="4" terminated="4"/>'
        b'<wastemill validation="0" idle="200" nosuccess="0" badput="600"/></job>\r\n'
    )
    recs, _, errors = parse(LINES[0] + line + LINES[1])
    assert [r.cluster for r in recs] == [6767402, 7, 10176593] and not errors.counts
    assert (recs[1].proc, recs[1].duration, recs[1].client) == (2, 10, "c")


def test_incomplete_last_line_is_left() -> None:
    buf = LINES[0] + LINES[1][:50]
    recs, used, errors = parse(buf)
    assert len(recs) == 1 and used == len(LINES[0]) and not errors.counts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(SAMPLE)), max_size=6))
def test_any_split_gives_same_records(cuts: list[int]) -> None:
    whole, _, _ = parse(SAMPLE)
    errors = ParseErrors()
    got: list[CompletedJob] = []
    pending, offset = b"", 0
    for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(SAMPLE)], strict=True):
        buf = pending + SAMPLE[a:b]
        recs, used = parse_completed(buf, PATH, offset, errors)
        got += recs
        offset += used
        pending = buf[used:]
    assert got == whole and pending == b"" and not errors.counts


def test_hostile_lines_counted_and_neighbours_survive() -> None:
    bad = [
        b'<job terminated="2022-02-09T05:55:38-08:00" client="x\xff\xfe" username="u"\n',  # bad UTF-8, cut
        LINES[1][:120] + b"\n",  # truncated by a crash
        b"\x00\x01garbage \xc3\x28\n",
        b'<job terminated="yesterday" client="c" username="u" id="1.0"/>\n',
        b'<!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]><job>&b;</job>\n',  # entity bomb
        b"\n",  # blank: ignored, not counted
    ]
    buf = LINES[0] + b"".join(bad) + LINES[2]
    recs, used, errors = parse(buf)
    assert [r.cluster for r in recs] == [6767402, 10176594]
    assert used == len(buf)
    assert errors.counts[(SRC, "bad_encoding")] == 2
    assert errors.counts[(SRC, "bad_line")] == 3
    assert errors.total() == 5


def test_huge_line_skipped() -> None:
    huge = b"<job " + b"A" * (50 << 20) + b"\n"
    recs, used, errors = parse(LINES[0] + huge + LINES[1])
    assert len(recs) == 2 and errors.counts == {(SRC, "line_too_long"): 1}
    # Unterminated and already too long: consumed so the reader never stalls.
    recs, used, errors = parse(LINES[0] + b"B" * (cj.MAX_LINE + 10))
    assert len(recs) == 1 and used == len(LINES[0]) + cj.MAX_LINE + 10
    assert errors.counts == {(SRC, "line_too_long"): 1}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000), st.binary(max_size=300))
def test_parse_buffer_never_raises(junk: bytes, more: bytes) -> None:
    buf = junk + LINES[0] + more
    recs, used, _ = parse(buf)
    assert 0 <= used <= len(buf)
    assert all(isinstance(r, CompletedJob) for r in recs)


def test_read_file(tmp_path: Path) -> None:
    d = tmp_path / "server" / "entry_E1"
    d.mkdir(parents=True)
    p = d / "completed_jobs_20221122.log"
    shutil.copy(FIXTURE, p)
    with p.open("ab") as f:
        f.write(LINES[0].rstrip(b"\n"))  # complete last line missing its newline
    errors = ParseErrors()
    recs = completed_jobs_file(str(p), errors)
    assert len(recs) == 6 and {r.entry for r in recs} == {"E1"} and not errors.counts
    with p.open("ab") as f:
        f.write(b"\n" + LINES[1][:40])  # cut last line
    recs = completed_jobs_file(str(p), errors)
    assert len(recs) == 6 and errors.counts == {(SRC, "truncated_line"): 1}
    assert completed_jobs_file(str(tmp_path / "missing.log"), errors) == []
    assert errors.counts[(SRC, "unreadable")] == 1
