"""The OSGTestResult XML: what each validation script and glidein_startup.sh report about themselves.

error_gen.sh writes a script's result (``otrx_output.xml``), error_augment.sh
-concat appends each to the glidein's list, and glidein_startup.sh prints its
own result twice: plain in the .out, and, with every script's under
<subtestlist>, gzip+base64 at the end of the .err (cat_XMLResult.py's shape,
shared/reference/glideinwms-formats.md). The one writer of this XML, used by
the simulator, the tests and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...sources.condor_sections import encode
from ...sources.glidein_err import XML_BEGIN, XML_END
from ..factory_stats import StarterStats
from ..formats import iso_local
from ..plan import SimPilot, WorkerNode, script_times
from ..scenario import CPUS_SETUP, MEMORY_SETUP, OS_RELEASE, SCRIPT_FAILURES, SCRIPT_METRICS, Client

VERSION = "4.3.1"
GLIDEIN = "glidein_startup.sh"  # id of the glidein's own result

# A time in the XML: epoch seconds (printed in UTC, as the simulated nodes run)
# or an ISO 8601 string as printed by a node in another zone.
Time = int | str


def _iso(t: Time) -> str:
    return t if isinstance(t, str) else iso_local(t)


def metric(name: str, value: object, ts: Time) -> str:
    """One ``error_gen.sh`` metric line (4-space indent, as in otrb_output.xml)."""
    return f'    <metric name="{name}" ts="{_iso(ts)}" uri="local">{value}</metric>'


def result(status: str, metrics: Iterable[tuple[str, object, Time]], detail: Sequence[str] = ()) -> list[str]:
    """The <result> block (status OK or ERROR, then the metrics) and, after a failure, its <detail> lines."""
    lines = ["  <result>", f"    <status>{status}</status>", *(metric(*m) for m in metrics), "  </result>"]
    if detail:
        lines += ["  <detail>", *(f"     {d}" if d else "" for d in detail), "  </detail>"]
    return lines


def script_result(name: str, cwd: str, cmd: str, start: Time, end: Time, outcome: Sequence[str]) -> str:
    """One script's otrx_output.xml as error_augment.sh -concat appends it (no <?xml line)."""
    return "\n".join(
        [
            f'<OSGTestResult id="{name}" version="{VERSION}">',
            "  <operatingenvironment>",
            f'    <env name="cwd">{cwd}</env>',
            "  </operatingenvironment>",
            "  <test>",
            f"      <cmd>{cmd}</cmd>",
            f"      <tStart>{_iso(start)}</tStart>",
            f"      <tEnd>{_iso(end)}</tEnd>",
            "  </test>",
            *outcome,
            "</OSGTestResult>",
        ]
    )


def glidein_result(
    env: Iterable[tuple[str, object]],
    start: Time,
    end: Time,
    outcome: Sequence[str],
    *,
    scripts: Sequence[str] = (),
    cmd: str | None = None,
) -> str:
    """glidein_startup.sh's own result; with ``scripts`` (script_result texts) the long form of the .err."""
    lines = ['<?xml version="1.0"?>', f'<OSGTestResult id="{GLIDEIN}" version="{VERSION}">']
    if scripts:
        lines += [
            "  <subtestlist>",
            "    <OSGTestResults>",
            *("\n".join("      " + ln for ln in s.split("\n")) for s in scripts),
            "    </OSGTestResults>",
            "  </subtestlist>",
        ]
    lines += [
        "  <operatingenvironment>",
        *(f'    <env name="{k}">{v}</env>' for k, v in env),
        "  </operatingenvironment>",
        "  <test>",
        *([f"    <cmd>{cmd}</cmd>"] if cmd is not None else []),
        f"    <tStart>{_iso(start)}</tStart>",
        f"    <tEnd>{_iso(end)}</tEnd>",
        "  </test>",
        *outcome,
        "</OSGTestResult>",
    ]
    return "\n".join(lines)


def encoded(xml: bytes) -> bytes:
    """The .err's last section: print_tail's gzip | b64uuencode of the long XML, with no section name."""
    framed = encode("x", xml)
    return XML_BEGIN + b"\n" + framed[framed.index(b"begin-base64") :] + XML_END + b"\n"


# --- what a simulated pilot reports ------------------------------------------------------------
def script_metrics(name: str, p: SimPilot) -> list[tuple[str, str]]:
    """The metrics a validation script that succeeded reports (the memory and CPU setups: what they set)."""
    metrics = list(SCRIPT_METRICS.get(name, ()))
    if name == MEMORY_SETUP:
        metrics.append(("MaxMemMBs", str(p.memory_mb)))
    elif name == CPUS_SETUP:
        metrics.append(("GLIDEIN_CPUS", str(p.cpus)))
    return metrics


def script_outcome(name: str, p: SimPilot, end: int) -> list[str]:
    """One validation script's <result> (and <detail> if it is the one that failed)."""
    if name != p.failed_script:
        return result("OK", ((k, v, end) for k, v in script_metrics(name, p)))
    failure = SCRIPT_FAILURES[name]
    return result("ERROR", [("failure", failure.category, end), (*failure.metric, end)], [failure.detail])


def condor_metrics(p: SimPilot, stats: StarterStats) -> list[tuple[str, object]]:
    """What condor_startup.sh reports: how condor ended and the Stats block's counts."""
    assert p.condor_start is not None and p.condor_end is not None
    return [
        ("AutoShutdown", not p.condor_killed),
        ("CondorDuration", p.condor_end - p.condor_start),
        *stats.metrics,
        ("CondorKilled", p.condor_killed),
    ]


def glidein_outcome(p: SimPilot, node: WorkerNode, stats: StarterStats) -> list[str]:
    """glidein_startup.sh's own <result>: condor_startup.sh's, or the validation failure's."""
    if p.failed_script is None:
        return result("OK", ((k, v, node.result_end) for k, v in condor_metrics(p, stats)))
    failed_at = script_times(p)[-1][2]
    failure = SCRIPT_FAILURES[p.failed_script]
    return result(
        "ERROR",
        [
            ("TestID", p.failed_script, node.result_end),
            ("failure", failure.category, failed_at),
            (*failure.metric, failed_at),
        ],
        [f"Validation failed in {p.failed_script}.", "", failure.detail],
    )


def node_env(client: Client, node: WorkerNode) -> list[tuple[str, object]]:
    """The <operatingenvironment> glidein_startup.sh reports in both its results."""
    return [
        ("client_name", client.client_name),
        ("client_group", client.group),
        ("user", client.username),
        ("arch", "x86_64"),
        ("os", OS_RELEASE),
        ("hostname", node.host),
        ("cwd", node.start_dir),
    ]
