"""The compiled completed_jobs scan (``gwms_obs_native.scan_unseen``) against the Python reader.

It must take exactly the buffers whose every line ``_ALL_SCAN`` matches, and
then answer what ``scan_buffer`` + ``line_keys`` + the "already counted"
filter answer; the stage must behave the same with and without it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gwms_obs import native
from gwms_obs.ingest import completed_jobs as stage_mod
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import completed_jobs as cj

if native.core is None:  # absent or refused (stale ABI, GWMS_OBS_NATIVE=0): nothing to compare
    if os.environ.get("GWMS_OBS_REQUIRE_NATIVE") == "1":  # make test: CI must run these
        raise RuntimeError(f"gwms_obs_native is required here (make native): {native.describe()}")
    pytest.skip(f"native readers off: {native.describe()}", allow_module_level=True)
nm = native.core

FIXTURES = Path(__file__).parent / "fixtures"

Answer = tuple[int, int, list[tuple[str, cj.RawLine]]] | None


def reference(buf: bytes, entry: str, seen: dict[str, float], max_line: int = cj.MAX_LINE) -> Answer:
    """What the Python reader makes of ``buf`` when every line matches; None when it takes another path."""
    end = buf.rfind(b"\n") + 1
    if end == 0 or len(buf) - end > max_line:
        return None
    found = cj._ALL_SCAN.findall(buf, 0, end)
    if len(found) != buf.count(b"\n", 0, end):
        return None
    keys = cj.line_keys(found, entry)
    return end, len(found), [(k, r) for k, r in zip(keys, found, strict=True) if k not in seen]


def compiled(buf: bytes, entry: str, seen: dict[str, float], max_line: int = cj.MAX_LINE) -> Answer:
    got: Answer = nm.scan_unseen(buf, entry, seen, max_line)
    return got


# -- generated lines: the writer's, edge values, and a near miss of one token -------------------


def digits(lo: int, hi: int) -> st.SearchStrategy[bytes]:
    return st.integers(lo, hi).flatmap(
        lambda n: (
            st.text("0123456789", min_size=n, max_size=n).map(str.encode)
            | st.text("0", min_size=n, max_size=n).map(str.encode)
        )  # leading zeros: "000" keys as 0
    )


def text(cap: int) -> st.SearchStrategy[bytes]:
    """A quoted value: short with odd bytes (non-ASCII, \r, quotes' neighbours), or exactly at the cap."""
    chars = st.sampled_from([b"a", b"Z", b"0", b"-", b":", b" ", b"\r", b"\xc3\xa9", b"\xff", b"'", b"<", b"/"])
    return st.lists(chars, max_size=8).map(b"".join) | st.sampled_from([b"x" * cap, b"\xc3\xa9" * (cap // 2)])


OK_SP = st.sampled_from([b" ", b" ", b"  ", b"      "])
BAD_SP = st.sampled_from([b"", b"\t", b" \t"])
OK_NUM = st.tuples(st.sampled_from([b"", b"-"]), digits(1, 18)).map(b"".join)
BAD_NUM = st.sampled_from([b"", b"-", b"+5", b"1.0", b"--1", b"1" * 19, b"-" + b"9" * 19, b" 1", b"1e3"])
OK_ID = st.tuples(
    st.sampled_from([b"", b"b'", b"b", b"'"]), digits(1, 18), st.just(b"."), digits(1, 9), st.sampled_from([b"", b"'"])
).map(b"".join)
BAD_ID = st.sampled_from(
    [
        b"1" * 19 + b".0",
        b"1." + b"0" * 10,
        b"1",
        b"1.",
        b".1",
        b"b''1.0'",
        b"bb'1.0'",
        b"B'1.0'",
        b"1.0''",
        b"1,0",
        b"x",
    ]
)


@st.composite
def job_line(draw: st.DrawFn) -> bytes:
    """A writer's line; with probability ~1/2, one token (space run, value, literal) is broken."""
    broken = draw(st.integers(1, 60))  # which of the 36 tokens breaks: ~60% of lines have one
    n = 0

    def tok(ok: st.SearchStrategy[bytes], bad: st.SearchStrategy[bytes]) -> bytes:
        nonlocal n
        n += 1
        return draw(bad if n == broken else ok)

    def sp() -> bytes:
        return tok(OK_SP, BAD_SP)

    def txt(cap: int) -> bytes:
        return tok(text(cap), st.sampled_from([b"x" * (cap + 1), b'a"b', b"\xc3\xa9" * (cap // 2) + b"x"]))

    def num() -> bytes:
        return tok(OK_NUM, BAD_NUM)

    line = b"".join(
        [
            tok(st.just(b"<job"), st.sampled_from([b"<jobs", b"<Job", b" <job", b"job"])),
            *(sp(), b'terminated="', txt(64), b'"', sp(), b'client="', txt(512), b'"'),
            *(sp(), b'username="', txt(512), b'"', sp(), b'id="', tok(OK_ID, BAD_ID), b'"'),
            *(sp(), b'duration="', num(), b'"', sp(), b'condor_started="'),
            tok(st.sampled_from([b"True", b"False"]), st.sampled_from([b"true", b"", b"TrueFalse", b"1"])),
            *(b'"', sp(), b'condor_duration="', num(), b'"'),
            tok(st.just(b"><user"), st.sampled_from([b"> <user", b"><usr", b">"])),
            *(sp(), b'jobsnr="', num(), b'"', sp(), b'duration="', num(), b'"', sp(), b'goodput="', num(), b'"'),
            *(sp(), b'terminated="', num(), b'"'),
            tok(st.just(b"/><wastemill"), st.sampled_from([b"/> <wastemill", b"><wastemill"])),
            *(sp(), b'validation="', num(), b'"', sp(), b'idle="', num(), b'"', sp(), b'nosuccess="', num(), b'"'),
            *(sp(), b'badput="', num(), b'"'),
            tok(st.just(b"/></job>"), st.sampled_from([b"/></job> ", b"/>", b"/></job>\r", b"/></job></job>"])),
        ]
    )
    return line + tok(st.sampled_from([b"\n", b"\n", b"\r\n"]), st.sampled_from([b"\r\r\n", b" \n", b"\n\r\n"]))


SAMPLE = (FIXTURES / "completed_jobs_sample.log").read_bytes().splitlines(keepends=True)
GOOD = st.sampled_from([ln for ln in SAMPLE if cj._ALL_SCAN.fullmatch(ln)])
GARBAGE = st.one_of(
    st.just(b"\n"), st.just(b"\r\n"), st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"") + b"\n")
)
LINE = st.one_of(GOOD, GOOD, job_line(), job_line(), job_line(), GARBAGE)
ENTRY = st.sampled_from(["bench", "OSG_US_é", "e/x", "\udcff"])  # a lone surrogate: not UTF-8, refused


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(LINE, min_size=0, max_size=6),
    tail=st.sampled_from([b"", b"<job terminated=", b"\r"]),
    entry=ENTRY,
    data=st.data(),
)
def test_same_answer_as_python(lines: list[bytes], tail: bytes, entry: str, data: Any) -> None:
    buf = b"".join(lines) + tail
    everything = reference(buf, entry, {})
    seen: dict[str, float] = {}
    if everything is not None:
        for k, _ in everything[2]:
            if data.draw(st.booleans(), label=f"seen {k}"):
                seen[k] = 0.0
    want = reference(buf, entry, seen)
    got = compiled(buf, entry, seen)
    if entry == "\udcff":
        assert got is None
    else:
        assert got == want  # the same language: None exactly when Python takes another path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(job_line(), min_size=1, max_size=4))
def test_generated_lines_one_by_one(lines: list[bytes]) -> None:
    """Each near miss alone: accepted exactly when the pattern matches it."""
    for ln in lines:
        assert compiled(ln, "e", {}) == reference(ln, "e", {})


VALUES = [
    *(b"x" * n for n in (0, 63, 64, 65, 511, 512, 513)),
    *(b"7" * n for n in (1, 9, 10, 17, 18, 19)),
    *(b"-" + b"7" * n for n in (0, 1, 18, 19)),
    *(b"0" * n + b"1" for n in (0, 8, 9, 17, 18)),
    *(
        p + c + b"." + q + s
        for p in (b"", b"b'", b"'", b"b")
        for c in (b"0", b"0" * 18, b"1" * 19)
        for q in (b"00", b"1" * 9, b"1" * 10)
        for s in (b"", b"'")
    ),
    *(b"\xc3\xa9" * n for n in (32, 33, 256, 257)),
    b"True", b"False", b"true", b"+1", b"1.0", b"1 ", b" 1", b"\r", b"a\rb", b"1'", b"b'1'", b"1.0''",
]  # fmt: skip


def test_every_attribute_at_its_edges() -> None:
    """Each value of a writer's line, and each run of spaces, replaced by an edge case: same answer."""
    import re

    base = SAMPLE[0].rstrip(b"\r\n")
    cases = []
    for m in re.finditer(rb'="([^"]*)"', base):
        cases += [base[: m.start(1)] + v + base[m.end(1) :] for v in VALUES]
    for m in re.finditer(rb" +", base):
        cases += [base[: m.start()] + v + base[m.end() :] for v in (b"", b"\t", b" \t", b"   ")]
    accepted = 0
    for line in cases:
        for eol in (b"\n", b"\r\n", b"\r\r\n"):
            want = reference(line + eol, "e", {})
            assert compiled(line + eol, "e", {}) == want, line + eol
            accepted += want is not None
    assert 0 < accepted < len(cases) * 3


def test_every_simulated_line_taken(tmp_path: Path) -> None:
    simulate(tmp_path, 200, seed=3)
    logs = sorted(tmp_path.glob("server/entry_*/completed_jobs_*.log"))
    assert logs
    for log in logs:
        buf = log.read_bytes()
        entry = cj.entry_from_path(str(log))
        assert entry is not None
        got = compiled(buf, entry, {})
        assert got is not None, log
        assert got == reference(buf, entry, {})
        assert got[1] == buf.count(b"\n") and got[0] == len(buf)
        # Every pilot counted: nothing comes back, the lines are still counted.
        assert compiled(buf, entry, {k: 0.0 for k, _ in got[2]}) == (len(buf), got[1], [])


def test_long_unterminated_tail_is_pythons() -> None:
    line = SAMPLE[0]
    assert compiled(line + b"x" * 10, "e", {}, max_line=10) is not None
    assert compiled(line + b"x" * 11, "e", {}, max_line=10) is None
    assert compiled(b"", "e", {}) is None and compiled(b"<job", "e", {}) is None


def test_key_drops_leading_zeros_and_keeps_the_line_bytes() -> None:
    line = SAMPLE[0].rstrip(b"\r\n")
    assert b'id="6767402.000"' in line
    weird = line.replace(b'id="6767402.000"', b"id=\"b'0006767402.000'\"")
    (k, raw) = compiled(weird + b"\r\n", "e", {})[2][0]  # type: ignore[index]
    assert k == "e/6767402.0"
    assert raw == (weird, b"0006767402", b"000")


def test_not_a_dict_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        nm.scan_unseen(SAMPLE[0], "e", set(), cj.MAX_LINE)


# -- the stage, with and without the compiled scan ------------------------------------------------


def _run(root: Path, monkeypatch: pytest.MonkeyPatch, use_native: bool) -> tuple[Ingest, int]:
    taken = 0
    real = cj.scan_unseen

    def counting(buf: bytes, entry: str, seen: dict[str, float]) -> Answer:
        nonlocal taken
        got = real(buf, entry, seen)
        taken += got is not None
        return got

    with monkeypatch.context() as m:
        if not use_native:
            m.setattr(cj, "native", SimpleNamespace(core=None))
        m.setattr(cj, "scan_unseen", counting)
        ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0.0, lost_after_seconds=1e12))
        ing.scan()
    return ing, taken


def test_stage_same_with_and_without(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "f"
    simulate(root, 120, seed=4)
    # Half the .out are gone: their lines wait in pending, then count the pilot.
    for i, p in enumerate(sorted(root.glob("client/user_*/glidein_*/entry_*/job.*.out"))):
        if i % 2:
            p.unlink()
    logs = sorted(root.glob("server/entry_*/completed_jobs_*.log"))
    with logs[0].open("ab") as f:  # one file the compiled scan refuses: counted errors, careful path
        f.write(b"garbage\n\n" + SAMPLE[0].replace(b"<job", b"<job\xff") + SAMPLE[1] + b"<job terminated=")
    py, taken_py = _run(root, monkeypatch, use_native=False)
    nat, taken = _run(root, monkeypatch, use_native=True)
    assert taken_py == 0 and taken >= len(logs) - 1
    assert nat.health.records == py.health.records
    assert nat.errors.counts == py.errors.counts
    assert nat.ledger.pilots == py.ledger.pilots and nat.ledger.cpu == py.ledger.cpu
    assert dict(nat.books.counted.seen).keys() == dict(py.books.counted.seen).keys()

    def pending(ing: Ingest) -> dict[str, Any]:
        st_ = next(s for s in ing.stages if isinstance(s, stage_mod.CompletedJobsStage))
        return {k: dataclasses.asdict(v) for k, v in st_.holds.lines.items()}

    assert pending(nat) == pending(py)
