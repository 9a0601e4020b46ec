"""The glidein stderr reader: sections, history ads, GPUs, config, long XML, hostile input."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gwms_obs.model import GlideinErr, Job
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.write import osg_test_result
from gwms_obs.sources.budget import MAX_ADS, MAX_DECODED_BYTES, Budget, BudgetExceeded
from gwms_obs.sources.classad import Expr, iter_ads, parse_value
from gwms_obs.sources.condor_sections import encode
from gwms_obs.sources.glidein_err import HISTORY_SECTION, parse_err, read_err

SRC = "glidein_err"

HISTORY = b"""ClusterId = 40
ProcId = 0
GlobalJobId = "submit.example.org#40.0#1656036400"
JobStatus = 4
JobCurrentStartDate = 1656036500
JobStartDate = 1656036400
CompletionDate = 1656040100
ExitCode = 0
ExitBySignal = false
CpusProvisioned = 8
RequestCpus = 4
MemoryProvisioned = 16000
RequestMemory = ifthenelse(MemoryUsage =!= undefined, MemoryUsage, 2000)
RequestGPUs = 1
*** Offset = 0 ClusterId = 40 ProcId = 0 Owner = "u" CompletionDate = 1656040100
ClusterId = 41
ProcId = 0
JobStatus = 4
JobStartDate = 1656040200
CompletionDate = 1656041000
ExitCode = 1
RequestCpus = 1
RequestMemory = 2000
*** Offset = 900 ClusterId = 41 ProcId = 0 Owner = "u" CompletionDate = 1656041000
ClusterId = 42
ProcId = 3
JobStatus = 3
JobCurrentStartDate = 1656041100
CompletionDate = 0
LastVacateTime = 0
EnteredCurrentStatus = 1656041900
ExitBySignal = true
ExitSignal = 9
RequestCpus = ifthenelse(true, 2, 1)

ClusterId = 43
ProcId = 0
JobStatus = 2
JobCurrentStartDate = 1656042000
RequestCpus = 2

ClusterId = 44
Note = "no start at all"
"""


def _script(name: str, start: str, end: str, ok: bool, failure: str | None = None) -> str:
    metrics: list[tuple[str, object, osg_test_result.Time]] = [("failure", failure, end)] if failure else []
    outcome = osg_test_result.result("OK" if ok else "ERROR", [*metrics, ("NrAttributes", 12, end)])
    return osg_test_result.script_result(
        name, "/tmp/glide_x", f"/tmp/glide_x/{name} glidein_config", start, end, outcome
    )


def long_xml(scripts: list[str]) -> bytes:
    env = [("client_name", "fe.main"), ("glidein_entry", "TEST_ENTRY")]
    end = "2022-06-24T04:06:35+02:00"
    outcome = osg_test_result.result("ERROR", [("failure", "VO_Config", end)])
    return (
        osg_test_result.glidein_result(env, "2022-06-24T04:05:25+02:00", end, outcome, scripts=scripts) + "\n"
    ).encode()


TWO_SCRIPTS = [
    _script("main/setup_script.sh", "2022-06-24T04:05:30+02:00", "2022-06-24T04:05:31+02:00", True),
    _script("client/validate.sh", "2022-06-24T04:06:00+02:00", "2022-06-24T04:06:30+00:00", False, "VO_Config"),
]


CONFIG = b"""Removed condor variables CONDOR_CONFIG
-------- glidein_config in condor_startup.sh ----------
ADD_CONFIG_LINE_SOURCE /tmp/glide_x/add_config_line.source
GLIDEIN_Site Hephy-Vienna
GLIDEIN_CPUS 8
MEMORY 20000
GLIDEIN_Resource_Slots GPUs,1,type=main
GLIDECLIENT_Start ifthenelse(a == "b", true, false)
EMPTY_VALUE
MEMORY 24000
-----------------------------------------------------
--- condor_config ---
NUM_CPUS = $(GLIDEIN_CPUS)
--- ============= ---
"""


def synthetic_err(history: bytes = HISTORY, scripts: list[str] = TWO_SCRIPTS) -> bytes:
    return (
        b"=== validation OK in main/setup_script.sh (1) ===\n"
        + CONFIG
        + b'condor_gpu_discovery found 2 GPUs: DetectedGPUs="GPU-aa, GPU-bb"\n'
        + b"=== Exit messages left by periodic scripts ===\n"
        + encode("MasterLog", b"06/24/22 04:06:30 ** condor_master (CONDOR_MASTER) STARTING UP\n" * 50)
        + b"\n"
        + encode("StartdHistoryLog", history)
        + b"\n"
        + encode("GWMSTraceSpool", b'{"resourceSpans": []}\n')
        + b"\n"
        + osg_test_result.encoded(long_xml(scripts))
    )


def test_synthetic_err() -> None:
    errors = ParseErrors()
    err = parse_err(synthetic_err(), "job.1.0.err", errors)
    assert errors.counts == {(SRC, "no_start"): 1}
    assert err.jobs == [
        Job(1656036500.0, 1656040100.0, 8, 16000, 1, True, 0, False, None, 4, "submit.example.org#40.0#1656036400"),
        Job(1656040200.0, 1656041000.0, 1, 2000, 0, True, 1, False, None, 4, None),
        # Not a literal RequestCpus → 1; no end but JobStatus 3 → EnteredCurrentStatus.
        Job(1656041100.0, 1656041900.0, 1, 0, 0, True, None, True, 9, 3, None),
        Job(1656042000.0, None, 2, 0, 0, False, None, False, None, 2, None),
    ]
    assert err.gpus == 2
    assert err.cpus == 8 and err.memory_mb == 24000 and err.site == "Hephy-Vienna"
    assert err.config["GLIDEIN_Resource_Slots"] == "GPUs,1,type=main"
    assert err.config["GLIDECLIENT_Start"] == 'ifthenelse(a == "b", true, false)'
    assert err.config["EMPTY_VALUE"] == ""
    assert "NUM_CPUS" not in err.config
    assert err.trace_spool == b'{"resourceSpans": []}\n'
    assert [(s.name, s.ok, s.failure) for s in err.scripts] == [
        ("main/setup_script.sh", True, None),
        ("client/validate.sh", False, "VO_Config"),
    ]
    assert err.scripts[0].start == 1656036330.0 and err.scripts[0].end == 1656036331.0
    assert err.scripts[1].end == 1656043590.0  # +00:00 offset honoured


def test_no_gpus_and_no_sections() -> None:
    errors = ParseErrors()
    err = parse_err(b"No GPUs found with condor_gpu_discovery, setting them to 0\n", "e", errors)
    assert err.gpus == 0 and err.jobs is None and err.scripts == [] and err.trace_spool is None
    assert errors.total() == 0


def test_empty_history_gives_empty_list() -> None:
    err = parse_err(encode("StartdHistoryLog", b""), "e", ParseErrors())
    assert err.jobs == []


def test_bad_base64_then_good_section() -> None:
    bad = b"StartdHistoryLog\n======== gzip | uuencode =============\nbegin-base64 644 -\n!!!@@@###\n====\n"
    data = bad + synthetic_err()
    errors = ParseErrors()
    err = parse_err(data, "e", errors)
    assert errors.counts[(SRC, "bad_base64")] + errors.counts[(SRC, "bad_gzip")] == 1
    assert err.jobs is not None and len(err.jobs) == 4
    assert err.gpus == 2 and err.cpus == 8 and len(err.scripts) == 2


def test_undecodable_history_only() -> None:
    bad = b"StartdHistoryLog\n======== gzip | uuencode =============\nbegin-base64 644 -\nAAAA\n====\n"
    errors = ParseErrors()
    err = parse_err(bad + CONFIG, "e", errors)
    assert err.jobs is None
    assert errors.counts[(SRC, "bad_gzip")] == 1
    assert err.cpus == 8


def test_gzip_bomb() -> None:
    bomb = encode("StartdHistoryLog", b"\0" * (8 << 20))
    assert len(bomb) < 20_000
    errors = ParseErrors()
    err = parse_err(bomb + synthetic_err(history=b""), "e", errors, max_section_bytes=1 << 20)
    assert errors.counts[(SRC, "too_large")] == 1
    assert err.jobs == []  # the second, good (empty) history section
    assert err.gpus == 2 and len(err.scripts) == 2

    trace_bomb = encode("GWMSTraceSpool", b"\0" * (20 << 20))
    errors = ParseErrors()
    err = parse_err(trace_bomb, "e", errors)
    assert errors.counts[("trace_spool", "too_large")] == 1
    assert err.trace_spool is None


def test_truncated_sections_and_garbage() -> None:
    full = synthetic_err()
    cut = full.index(b"GWMSTraceSpool") + 100
    errors = ParseErrors()
    err = parse_err(full[:cut], "e", errors)
    assert errors.counts[("trace_spool", "truncated")] == 1
    assert err.jobs is not None and len(err.jobs) == 4 and err.gpus == 2

    errors = ParseErrors()
    err = parse_err(b"\xff\xfe garbage \x00" * 1000, "e", errors)
    assert err.jobs is None and err.config == {}


def test_malformed_long_xml_is_salvaged() -> None:
    broken = [s.replace("glidein_config</cmd>", "a&b</cmd>") for s in TWO_SCRIPTS]
    errors = ParseErrors()
    err = parse_err(synthetic_err(scripts=broken), "e", errors)
    assert errors.counts[(SRC, "bad_xml")] == 1
    assert [(s.name, s.ok, s.failure) for s in err.scripts] == [
        ("main/setup_script.sh", True, None),
        ("client/validate.sh", False, "VO_Config"),
    ]
    assert err.scripts[0].start == 1656036330.0


def test_xml_bomb_in_long_xml() -> None:
    xml = long_xml(TWO_SCRIPTS).replace(
        b'<OSGTestResult id="glidein_startup.sh"',
        b'<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
        b'<OSGTestResult id="glidein_startup.sh"',
        1,
    )
    data = synthetic_err().split(b"\n=== Encoded XML")[0] + osg_test_result.encoded(xml)
    errors = ParseErrors()
    err = parse_err(data, "e", errors)
    assert errors.counts[(SRC, "xml_forbidden")] == 1
    assert err.scripts == []
    assert err.jobs is not None and len(err.jobs) == 4


def test_read_err(tmp_path: Path) -> None:
    p = tmp_path / "job.1.0.err"
    p.write_bytes(synthetic_err())
    errors = ParseErrors()
    err = read_err(str(p), errors)
    assert err is not None and err.gpus == 2
    assert read_err(str(tmp_path / "missing.err"), errors) is None
    assert errors.counts[(SRC, "unreadable")] == 1


def test_classad_values() -> None:
    assert parse_value("42") == 42 and parse_value("-3") == -3
    assert parse_value("3.5") == 3.5 and parse_value("1e3") == 1000.0
    assert parse_value('"a \\"q\\" b\\\\c"') == 'a "q" b\\c'
    assert parse_value('"C:\\dir"') == "C:\\dir"
    assert parse_value("TRUE") is True and parse_value("false") is False
    assert parse_value("undefined") is None
    e = parse_value('"a" + "b"')
    assert isinstance(e, Expr) and e == '"a" + "b"'
    assert isinstance(parse_value("MY.Cpus * 2"), Expr)
    ads = list(iter_ads(HISTORY))
    assert len(ads) == 5
    assert ads[0].attrs()["GlobalJobId"] == "submit.example.org#40.0#1656036400"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    parse_err(data, "fuzz.err", ParseErrors())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_never_raises_on_mutated_err(data: st.DataObject) -> None:
    buf = bytearray(synthetic_err())
    for _ in range(data.draw(st.integers(1, 10))):
        i = data.draw(st.integers(0, len(buf)))
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip" and i < len(buf):
            buf[i] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del buf[i : i + data.draw(st.integers(1, 500))]
        else:
            buf[i:i] = data.draw(st.binary(max_size=64))
    parse_err(bytes(buf), "mut.err", ParseErrors())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_history_never_raises(text: str) -> None:
    parse_err(encode("StartdHistoryLog", text.encode("utf-8", "surrogatepass")), "h.err", ParseErrors())


def test_utf16_xml_bomb_in_long_xml() -> None:
    # A UTF-16 document hides "<!DOCTYPE" from a byte search; its NULs give it away.
    xml = (
        '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE r [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
        '<OSGTestResult id="glidein_startup.sh"><subtestlist><OSGTestResults>'
        '<OSGTestResult id="x.sh"><result><status>&b;</status></result></OSGTestResult>'
        "</OSGTestResults></subtestlist></OSGTestResult>"
    ).encode("utf-16")
    errors = ParseErrors()
    err = parse_err(osg_test_result.encoded(xml), "e", errors)
    assert errors.counts[(SRC, "xml_forbidden")] == 1
    assert err.scripts == []


def test_fast_path_keeps_what_the_accounting_reads() -> None:
    """detail=False (the exporter's path) gives the same accounting inputs, without the long XML."""
    data = synthetic_err()
    full = parse_err(data, "x.err", ParseErrors())
    fast = parse_err(data, "x.err", ParseErrors(), detail=False)
    assert (fast.jobs, fast.gpus, fast.cpus, fast.memory_mb, fast.site, fast.trace_spool) == (
        full.jobs,
        full.gpus,
        full.cpus,
        full.memory_mb,
        full.site,
        full.trace_spool,
    )
    assert fast.scripts == [] and full.scripts
    assert fast.config == {
        k: full.config[k] for k in ("GLIDEIN_CPUS", "MEMORY", "GLIDEIN_Site", "GLIDEIN_Resource_Slots")
    }


# --- bounded work per file (issue 16, item 2) ---------------------------------------------------
# Measured on one core (2 vCPU CI class): 150 sections of tiny ads stop at the
# ads budget in 0.5-0.9 CPU-s with a 21 MB peak (before: MemoryError at a 6 GB
# cap after 319 s); 50 sections of 57 MB stop at the decoded-bytes budget in
# ~0.9 CPU-s with a 123 MB peak (before: 31 CPU-s). The bounds asserted below
# leave ~5x room for slower machines and still fail on the old behaviour.
MAX_CPU = 5.0


def _measure(data: bytes, budget: Budget) -> tuple[GlideinErr, ParseErrors, float, int]:
    """(result, errors, CPU seconds of an untraced run, peak traced bytes of a second run)."""
    errors = ParseErrors()
    t0 = time.thread_time()
    err = parse_err(data, "x.err", errors, budget=budget)
    cpu = time.thread_time() - t0
    tracemalloc.start()
    try:
        parse_err(data, "x.err", ParseErrors(), budget=Budget())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return err, errors, cpu, peak


@pytest.mark.slow
def test_budget_stops_150_sections_of_tiny_ads() -> None:
    section = encode(HISTORY_SECTION, b"JobStartDate = 1\n\n" * (MAX_ADS - 1))  # just under the per-section limit
    data = synthetic_err().split(b"=== Exit messages")[0] + section * 150
    assert len(data) < 1 << 20
    budget = Budget()
    err, errors, cpu, peak = _measure(data, budget)
    assert budget.exceeded == "ads" and budget.ads == MAX_ADS + 1
    assert errors.counts[(SRC, "budget")] == 1
    # A subset of the pilot's jobs is not kept: the accounting falls back to the Stats block.
    assert err.jobs is None and err.trace_spool is None
    assert err.cpus == 8 and err.gpus == 2  # read before the sections, complete: kept
    assert cpu < MAX_CPU
    assert peak < 64 << 20  # ~100,000 Job records and one section's text


@pytest.mark.slow
def test_budget_stops_many_large_gzip_sections() -> None:
    ad = b'JobStartDate = 1656036400\nCompletionDate = 1656040100\nExitCode = 0\nFiller = "' + b"x" * 6000 + b'"\n\n'
    content = ad * ((60 << 20) // len(ad))
    section = encode(HISTORY_SECTION, content)  # ~110 KB of base64 for 60 MB of ads
    data = section * 50
    budget = Budget()
    err, errors, cpu, peak = _measure(data, budget)
    assert budget.exceeded == "decoded_bytes"
    assert budget.decoded_bytes == 2 * len(content) <= MAX_DECODED_BYTES  # the third section is refused undecoded
    assert errors.counts == {(SRC, "budget"): 1}
    assert err.jobs is None
    assert cpu < MAX_CPU
    # Two copies of one section at most (the decoded text and the ad scanner's framed copy).
    assert peak < 2 * (64 << 20) + (16 << 20)


def test_budget_limits_each_stop_the_file() -> None:
    one = encode(HISTORY_SECTION, HISTORY)
    for budget, which in (
        (Budget(max_sections=2), "sections"),
        (Budget(max_ads=5), "ads"),  # HISTORY has 4 jobs with a start and 1 without: 5 ads a section
        (Budget(max_decoded_bytes=len(HISTORY) + 10), "decoded_bytes"),
        (Budget(max_cpu_seconds=-1), "cpu"),  # a CPU clock never goes back: fails at the first check
    ):
        errors = ParseErrors()
        err = parse_err(one * 3, "x.err", errors, budget=budget)
        assert budget.exceeded == which, which
        assert errors.counts[(SRC, "budget")] == 1, which
        assert err.jobs is None, which
    # Within the limits the same file is read whole.
    errors = ParseErrors()
    err = parse_err(one * 3, "x.err", errors, budget=Budget(max_sections=3, max_ads=15))
    assert err.jobs is not None and len(err.jobs) == 12 and errors.counts[(SRC, "budget")] == 0


def test_spent_budget_stops_the_next_file(tmp_path: Path) -> None:
    """One budget may be shared by a pilot's .out and .err: once spent, the next read stops too."""
    p = tmp_path / "job.1.0.err"
    p.write_bytes(synthetic_err())
    budget = Budget(max_ads=1)
    with pytest.raises(BudgetExceeded):
        for _ in range(2):
            budget.ad()
    errors = ParseErrors()
    err = read_err(str(p), errors, budget=budget)
    assert err is not None and err.jobs is None and err.gpus == 2
    assert errors.counts[(SRC, "budget")] == 1 and budget.exceeded == "ads"


def test_trace_spool_sections_are_joined_not_concatenated_per_section() -> None:
    data = encode("GWMSTraceSpool", b"a\n") + encode("GWMSTraceSpool", b"b\n") + encode(HISTORY_SECTION, HISTORY) * 2
    err = parse_err(data, "x.err", errors := ParseErrors())
    assert err.trace_spool == b"a\nb\n" and err.jobs is not None and len(err.jobs) == 8
    assert errors.counts[(SRC, "budget")] == 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.booleans())
def test_config_values_of_any_text_never_raise(cpus: str, memory: str, detail: bool) -> None:
    # str.isdigit() accepts "²", which int() refuses: it raised out of parse_err.
    body = f"GLIDEIN_CPUS {cpus}\nMEMORY {memory}\n".replace("\r", "").encode("utf-8", "surrogatepass")
    data = b"-------- glidein_config in condor_startup.sh ----------\n" + body + b"----\n"
    err = parse_err(data, "c.err", ParseErrors(), detail=detail)
    for got in (err.cpus, err.memory_mb):
        assert got is None or (got >= 0 and str(got).encode() in body)  # only plain ASCII decimals are read


def test_unicode_digits_are_not_numbers() -> None:
    data = b"-------- glidein_config in condor_startup.sh ----------\nGLIDEIN_CPUS \xc2\xb2\nMEMORY \xd9\xa1\n----\n"
    for detail in (True, False):
        err = parse_err(data, "c.err", ParseErrors(), detail=detail)
        assert err.cpus is None and err.memory_mb is None
    assert isinstance(parse_value("\u0661\u0662"), Expr)  # Arabic-Indic "12" is not the ClassAd integer 12
