"""The factory's own statistics of a pilot, re-implemented: what the simulated files must agree with.

``starter_stats`` is parse_starterlog.awk's Stats block (the .out), the
metrics condor_startup.sh derives from it (the result XML) and what
glideFactoryLogParser reads back from it; ``completed_stats`` is
get_completed_stats() on that parse (the completed_jobs line), KeyError
included. Pure functions of a planned pilot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..model import StatsFormat
from .formats import awk_num, starterlog_time
from .plan import SimPilot

# parse_starterlog.awk's job classes, in the order the Stats block prints them.
JOB_CLASSES = ("goodZ", "goodNZ", "badSignal", "badOther")


@dataclass(frozen=True, slots=True)
class StarterStats:
    """The Stats block of one pilot: its lines, condor_startup.sh's metrics, the factory's parse."""

    lines: list[str] = field(default_factory=list)
    metrics: list[tuple[str, int]] = field(default_factory=list)
    parsed: dict[str, tuple[int, int]] = field(default_factory=dict)  # class or "Total" -> (jobs, seconds)


def starter_stats(p: SimPilot, shadow: str) -> StarterStats:
    """parse_starterlog.awk output, the metrics condor_startup.sh derives and the factory's parse."""
    fmt = p.stats_format
    if fmt is StatsFormat.EMPTY or fmt is None:
        return StarterStats()
    lines: list[str] = []
    n = dict.fromkeys(JOB_CLASSES, 0)
    secs = dict.fromkeys(n, 0)
    for j in sorted(p.jobs, key=lambda j: (j.start, j.cluster, j.proc)):
        jid = f"{j.cluster}.{j.proc}"
        lines.append(f"{starterlog_time(j.start)} Starting job {jid} from {shadow}")
        if j.end is None:
            lines.append(f"Termination event for job {jid} from {shadow} not found")
            continue
        dur = j.end - j.start
        if j.kind == "badOther":
            reason = " "  # awk prints two empty fields
        elif j.exit_signal is not None:
            reason = f"signal {j.exit_signal}"
        else:
            reason = f"status {j.exit_code}"
        lines.append(f"{starterlog_time(j.end)} Terminated job {jid} from {shadow} {reason} duration {dur}")
        n[j.kind] += 1
        secs[j.kind] += dur
    par = p.cpus
    ended = sum(n.values())
    used = sum(secs.values())

    def updiv(x: int) -> int:
        return int(x / par + 0.99)

    normalized_total = updiv(ended)
    normalized: dict[str, int] = {}
    counted = 0
    for k in ("goodNZ", "badSignal", "badOther", "goodZ"):  # awk's order: failures keep their share
        v = updiv(n[k])
        counted += v
        if counted > normalized_total:
            v -= counted - normalized_total
            counted = normalized_total
        normalized[k] = v

    def pct(a: int, b: int) -> str:
        return awk_num(a * 100 / b if b else 0)

    lines.append("=================")
    parsed: dict[str, tuple[int, int]] = {}
    metrics: list[tuple[str, int]] = [("TotalJobsNr", normalized_total), ("TotalJobsTime", int(used / par))]
    if fmt is StatsFormat.REAL:
        lines.append(f"Normalization [parallelism] factor {par}")
        lines.append(f"(Real) Total jobs {ended} utilization {used}")
        lines.append(f"(Normalized) Total jobs {normalized_total} utilization {int(used / par)}")
        parsed["Total"] = (ended, used)  # first match wins: the raw line
    else:
        lines.append(f"Total jobs {normalized_total} utilization {int(used / par)}")
        parsed["Total"] = (normalized_total, int(used / par))
    for k in JOB_CLASSES:
        u = int(secs[k] / par)
        share = f"({pct(n[k], ended)}%) utilization {u} ({pct(secs[k], used)}%)"
        if fmt is StatsFormat.REAL:
            lines.append(f"(Normalized) Total {k} jobs {normalized[k]} {share}")
        else:
            lines.append(f"Total {k} jobs {normalized[k]}  {share}")
        parsed[k] = (normalized[k], u)
        metrics += [(f"{k}JobsNr", normalized[k]), (f"{k}JobsTime", u)]
    return StarterStats(lines, metrics, parsed)


class CompletedStats(NamedTuple):
    """get_completed_stats() of one pilot, in the order of a completed_jobs line's fields."""

    duration: float
    condor_started: float
    condor_duration: float
    jobsnr: float
    user_duration: float
    goodput: float
    user_terminated: float
    wastemill_validation: float
    wastemill_idle: float
    wastemill_nosuccess: float
    wastemill_badput: float


def completed_stats(p: SimPilot, parsed: dict[str, tuple[int, int]]) -> CompletedStats | None:
    """get_completed_stats() on this pilot; None where the factory raises KeyError (#60)."""
    assert p.glidein_end is not None and p.startup is not None
    duration: float = p.glidein_end - p.startup
    if p.condor_start is None or p.condor_end is None:
        return CompletedStats(duration, 0, 0, 0, 0, 0, 0, 1000, 0, 0, 1000)
    condor_duration = p.condor_end - p.condor_start
    duration = max(duration, condor_duration)
    if condor_duration < 5:
        return CompletedStats(duration, 1, condor_duration, 0, 0, 0, 0, 1000, 0, 0, 1000)
    if "Total" not in parsed:
        return None
    assert p.validation_end is not None
    jobsnr, job_seconds = parsed["Total"]
    goodput = min(parsed["goodZ"][1], job_seconds)
    terminated = min(goodput + parsed["goodNZ"][1], job_seconds)
    validation = 1000.0 * (p.validation_end - p.startup) / duration
    idle = 1000.0 * (condor_duration - job_seconds) / condor_duration
    nosuccess = 1000.0 * (job_seconds - goodput) / job_seconds if job_seconds > 0 else 0
    badput = 1000.0 * (duration - terminated) / duration
    return CompletedStats(
        duration, 1, condor_duration, jobsnr, job_seconds, goodput, terminated, validation, idle, nosuccess, badput
    )
