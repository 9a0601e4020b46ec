"""The glidein stdout reader: real production file, Stats shapes, hostile input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gwms_obs import native
from gwms_obs.model import SlotStat, StatsFormat
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources.budget import Budget
from gwms_obs.sources.glidein_out import parse_out, read_out
from tests.support.reference import reference_file

REAL_OUT = "glideFactoryLogParser_glidein_stdout.out"

FIX = Path(__file__).resolve().parent / "fixtures"
SRC = "glidein_out"


@pytest.fixture(scope="module")
def real() -> bytes:
    return reference_file(REAL_OUT).read_bytes()


def test_real_production_out(real: bytes) -> None:
    errors = ParseErrors()
    out = read_out(str(reference_file(REAL_OUT)), errors)
    assert out is not None
    assert errors.total() == 0
    assert out.condor_started is True
    assert out.validation_duration == 63
    assert out.glidein_duration == 8376
    assert out.condor_duration == 8307
    assert out.activations_claims == 34
    assert out.stats_format is StatsFormat.EMPTY
    assert out.stats == {}
    assert out.stats_real_total is None
    assert out.cpus == 8
    assert out.memory_mb == 20000
    assert (out.cluster, out.proc) == (10176593, 0)
    assert out.entry == "CMSHTPC_T2_AT_Vienna_ce-1"
    assert out.client == "CMSG-v1_0.main-token"
    assert out.client_group == "main-token"
    assert out.schedd == "schedd_glideins9@gfactory-2.opensciencegrid.org"
    assert out.uuid == "3ce9dfca-0e7f-4d69-bfc9-5f58cb266ab7"
    assert out.factory == "OSG"
    assert out.glidein_name == "gfactory_instance"
    assert out.startup_time == 1656036325
    assert out.validation_end == 1656036388
    assert out.condor_start == 1656036390
    assert out.condor_end == 1656044697
    assert out.glidein_end == 1656044701
    assert out.exit_code == 0
    assert out.status == "OK"
    assert out.metrics == {"AutoShutdown": "False", "CondorDuration": "8307", "CondorKilled": "False"}
    assert out.failure is None


def test_stats_real_v3_10_12() -> None:
    errors = ParseErrors()
    out = parse_out((FIX / "glidein_stats_real.out").read_bytes(), "real.out", errors)
    assert errors.total() == 0
    assert out.stats_format is StatsFormat.REAL
    assert out.stats_real_total == SlotStat(2, 5400)
    # The (Normalized) Total, not the (Real) one the factory's regex picks.
    assert out.stats == {
        "Total": SlotStat(1, 675),
        "goodZ": SlotStat(0, 450),
        "goodNZ": SlotStat(0, 0),
        "badSignal": SlotStat(1, 225),
        "badOther": SlotStat(0, 0),
    }
    assert out.normalization == 8
    assert out.cpus == 8  # "(slot cpus - detect_cpus_htcondor)" tail
    assert out.memory_mb == 16000
    assert (out.cluster, out.proc, out.entry) == (40, 3, "TEST_ENTRY_8core")
    assert out.activations_claims == 2
    assert out.metrics["TotalJobsTime"] == "675"


LEGACY = b"""Starting glidein_startup.sh at Fri Jun 24 04:05:25 CEST 2022 (1656036325)
condorg_cluster   = '5'

=== Condor starting Fri Jun 24 04:06:30 CEST 2022 (1656036390) ===
=== Condor ended Fri Jun 24 06:24:57 CEST 2022 (1656044697) after 8307 ===
=== Stats of main1 ===
Total jobs 9 utilization 9999
=== End Stats of main1 ===
=== Stats of main ===
Total jobs 1 utilization 675
Total goodZ jobs 0  (50%) utilization 450 (66.6667%)
Total goodNZ jobs 0  (0%) utilization 0 (0%)
Total badSignal jobs 1  (50%) utilization 225 (33.3333%)
Total badOther jobs 0  (0%) utilization 0 (0%)
=== End Stats of main ===
=== Stats of other ===
Total jobs 7 utilization 7
Total bogus jobs 1 utilization 1
=== End Stats of other ===
Total number of activations/claims: 3
=== Glidein ending Fri Jun 24 06:25:01 CEST 2022 (1656044701) with code 0 after 8376 ===
"""


def test_stats_legacy_first_match_wins_and_slot1_ignored() -> None:
    errors = ParseErrors()
    out = parse_out(LEGACY, "legacy.out", errors)
    assert errors.total() == 0
    assert out.stats_format is StatsFormat.LEGACY
    assert out.stats_real_total is None
    assert out.normalization is None
    assert out.stats == {
        "Total": SlotStat(1, 675),
        "goodZ": SlotStat(0, 450),
        "goodNZ": SlotStat(0, 0),
        "badSignal": SlotStat(1, 225),
        "badOther": SlotStat(0, 0),
    }
    assert out.activations_claims == 3
    assert out.glidein_duration == 8376


def test_stats_absent_when_condor_killed() -> None:
    data = LEGACY.split(b"=== Condor ended")[0]
    errors = ParseErrors()
    out = parse_out(data, "killed.out", errors)
    assert out.condor_started and out.condor_end is None and out.condor_duration is None
    assert out.stats_format is StatsFormat.ABSENT
    assert out.glidein_end is None
    assert errors.total() == 0


def test_early_failure_tail() -> None:
    errors = ParseErrors()
    out = parse_out((FIX / "glidein_early_failure.out").read_bytes(), "early.out", errors)
    assert errors.total() == 0
    assert out.condor_started is False
    assert out.stats_format is StatsFormat.ABSENT
    assert out.exit_code == 1
    assert out.glidein_duration == 1200
    assert out.glidein_end == 1656037525
    assert out.status == "ERROR"
    assert out.failure == "WN_RESOURCE"
    assert out.metrics == {"failure": "WN_RESOURCE"}
    assert (out.cluster, out.proc) == (77, 1)
    assert out.detail == "Cannot create work dir: disk full"  # the failing test's own words, for its trace


def test_the_detail_is_read_alike_with_and_without_the_compiled_reader(real: bytes) -> None:
    """The compiled reader has no field for <detail>: it is read in Python for failed pilots alone,
    as the Python reader reads it, and a pilot that did not fail keeps none."""
    data = (FIX / "glidein_early_failure.out").read_bytes()
    core = native.core
    got = []
    try:
        for c in (core, None):
            native.core = c
            got.append((parse_out(data, "x.out", ParseErrors()).detail, parse_out(real, "r.out", ParseErrors()).detail))
    finally:
        native.core = core
    assert got[0] == got[1] == ("Cannot create work dir: disk full", None)


# --- hostile input -----------------------------------------------------------


def _check_real_fields(out_cluster: int | None, out_duration: int | None, out_claims: int | None) -> None:
    assert out_cluster == 10176593
    assert out_duration == 8307
    assert out_claims == 34


def test_invalid_utf8_is_harmless(real: bytes) -> None:
    bad = real.replace(b"Running on clip", b"Running on \xff\xfe\xc3(clip", 1)
    bad = bad.replace(b"client_group      = 'main-token'", b"client_group      = 'main\xff-token'")
    errors = ParseErrors()
    out = parse_out(bad, "utf8.out", errors)
    assert errors.total() == 0
    assert out.client_group == "main\ufffd-token"
    _check_real_fields(out.cluster, out.condor_duration, out.activations_claims)
    assert out.metrics["CondorKilled"] == "False"


def test_invalid_utf8_inside_xml_falls_back(real: bytes) -> None:
    bad = real.replace(b'<env name="arch">x86_64', b'<env name="arch">\xff\xfe', 1)
    errors = ParseErrors()
    out = parse_out(bad, "utf8xml.out", errors)
    assert errors.counts[(SRC, "bad_xml")] == 1
    # Salvaged by the regex fallback.
    assert out.status == "OK"
    assert out.metrics["CondorDuration"] == "8307"
    _check_real_fields(out.cluster, out.condor_duration, out.activations_claims)


@pytest.mark.slow
def test_50mb_line(real: bytes) -> None:
    cut = real.index(b"=== Last script starting")
    # A huge line full of markers, so that a quadratic scan would not finish.
    line = (b"=== Condor ended (1) after " * (50 * (1 << 20) // 27)) + b"\n"
    data = real[:cut] + line + real[cut:]
    errors = ParseErrors()
    out = parse_out(data, "long.out", errors)
    assert errors.counts[(SRC, "line_too_long")] >= 1
    assert out.cpus == 8
    assert out.validation_duration == 63
    _check_real_fields(out.cluster, out.condor_duration, out.activations_claims)
    assert out.glidein_duration == 8376


BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY xxe SYSTEM "file:///etc/passwd">
]>
<OSGTestResult id="glidein_startup.sh" version="4.3.1">
  <result><status>&lol4;</status>
  <metric name="failure" ts="x" uri="local">&xxe;</metric></result>
</OSGTestResult>
"""


def test_xml_bomb(real: bytes) -> None:
    a = real.index(b"=== XML description of glidein activity ===") + 44
    b = real.index(b"=== End XML description of glidein activity ===")
    data = real[:a] + BOMB + real[b:]
    errors = ParseErrors()
    out = parse_out(data, "bomb.out", errors)
    assert errors.counts[(SRC, "xml_forbidden")] == 1
    assert out.metrics == {} and out.status is None and out.failure is None
    _check_real_fields(out.cluster, out.condor_duration, out.activations_claims)
    assert out.exit_code == 0


def test_truncated(real: bytes) -> None:
    cut = real.index(b'<metric name="CondorDuration"')
    errors = ParseErrors()
    out = parse_out(real[:cut], "trunc.out", errors)
    assert errors.counts[(SRC, "truncated")] == 1
    assert out.metrics == {}
    _check_real_fields(out.cluster, out.condor_duration, out.activations_claims)
    assert out.glidein_duration == 8376

    errors = ParseErrors()
    out = parse_out(real[: real.index(b"=== End Stats of main")], "trunc2.out", errors)
    assert errors.counts[(SRC, "truncated")] >= 1
    assert out.condor_duration == 8307 and out.glidein_end is None


def test_garbage_and_bad_numbers(real: bytes) -> None:
    errors = ParseErrors()
    out = parse_out(b"\x00\x01garbage\xff" * 100 + b"\n", "g.out", errors)
    assert errors.counts[(SRC, "garbage")] == 1
    assert out.condor_started is False and out.cluster is None

    huge = b"9" * 5000
    bad = real.replace(b"after 8376 ===", b"after " + huge + b" ===").replace(b"'10176593'", b"'1017x6593'")
    errors = ParseErrors()
    out = parse_out(bad, "n.out", errors)
    assert errors.counts[(SRC, "bad_number")] == 2
    assert out.glidein_duration is None and out.cluster is None
    assert out.exit_code == 0 and out.glidein_end == 1656044701
    assert out.condor_duration == 8307

    assert parse_out(b"", "empty.out", ParseErrors()).condor_started is False


def test_read_out_missing_and_too_large(tmp_path: Path, real: bytes) -> None:
    errors = ParseErrors()
    assert read_out(str(tmp_path / "nope.out"), errors) is None
    assert errors.counts[(SRC, "unreadable")] == 1

    p = tmp_path / "big.out"
    cut = real.index(b"=== Last script starting")
    p.write_bytes(real[:cut] + (b"x" * 100 + b"\n") * 20_000 + real[cut:])
    errors = ParseErrors()
    out = read_out(str(p), errors, max_bytes=1 << 20)
    assert out is not None
    assert errors.counts[(SRC, "too_large")] == 1
    # The head (header, CPUs) and the tail (condor, stats, XML) both survive.
    assert out.cpus == 8 and out.cluster == 10176593
    assert out.glidein_duration == 8376 and out.metrics["CondorKilled"] == "False"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    parse_out(data, "fuzz.out", ParseErrors())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_never_raises_on_mutated_real(real: bytes, data: st.DataObject) -> None:
    buf = bytearray(real)
    for _ in range(data.draw(st.integers(1, 20))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "dup"]))
        i = data.draw(st.integers(0, len(buf)))
        if op == "flip" and i < len(buf):
            buf[i] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del buf[i : i + data.draw(st.integers(1, 2000))]
        elif op == "insert":
            buf[i:i] = data.draw(st.binary(max_size=64))
        else:
            j = data.draw(st.integers(0, len(buf)))
            buf[i:i] = buf[min(i, j) : max(i, j)][:4096]
    parse_out(bytes(buf), "mut.out", ParseErrors())


def test_budget_overrun_is_counted_and_the_out_not_used(tmp_path: Path, real: bytes) -> None:
    """A .out parsed only in part would be mis-accounted: read_out returns None, the budget says why."""
    p = tmp_path / "job.1.0.out"
    p.write_bytes(real)
    errors = ParseErrors()
    budget = Budget(max_cpu_seconds=-1)  # a CPU clock never goes back: fails at the first check
    assert read_out(str(p), errors, budget=budget) is None
    assert budget.exceeded == "cpu" and errors.counts == {(SRC, "budget"): 1}
    # parse_out keeps what it found before the check that failed (nothing, here) and never raises.
    out = parse_out(real, "x.out", errors, budget=Budget(max_cpu_seconds=-1))
    assert out.condor_started is False and errors.counts[(SRC, "budget")] == 2
    # The default budget does not touch a real file.
    errors = ParseErrors()
    budget = Budget()
    out = read_out(str(p), errors, root=str(tmp_path), budget=budget)
    assert out is not None and out.glidein_duration == 8376 and budget.exceeded is None and errors.total() == 0
