"""One pilot's account: join what the sources say about it and partition it.

Three ways in, from best to worst information:
* :func:`from_glidein` — the .out (and .err) came back;
* :func:`from_completed_job` — only the factory's completed_jobs line is left;
* :func:`from_event_log` — the pilot is known only from the HTCondor-G event log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalogue import Accuracy, Category, Outcome, Overused
from ..model import CompletedJob, GlideinErr, GlideinOut, PilotTimes, StatsFormat
from .overuse import Overuse
from .partition import (
    DEFAULT_RULES,
    JobTotals,
    Partition,
    PilotUsage,
    Rules,
    partition,
    partition_and_overuse,
    partition_from_totals,
    unknown_lifetime,
)

UNKNOWN_LABEL = "unknown"


@dataclass(slots=True)
class EntryDefaults:
    """What the entry's configuration says, for pilots that do not say it themselves."""

    site: str | None = None
    cpus: int | None = None  # GLIDEIN_CPUS when numeric (else GLIDEIN_ESTIMATED_CPUS)
    cpus_fixed: bool = False  # GLIDEIN_CPUS is a number: every pilot of the entry has that many
    memory_mb: int | None = None  # GLIDEIN_MaxMemMBs
    gpus: int | None = None  # the GPUs of GLIDEIN_Resource_Slots
    max_idle: int | None = None  # GLIDEIN_Max_Idle: an unmatched pilot's HTCondor stops after this
    max_walltime: int | None = None  # GLIDEIN_Max_Walltime: no pilot of the entry lives longer (plus shutdown)


# HTCondor's own shutdown after GLIDEIN_Max_Idle takes a little longer than it.
MAX_IDLE_MARGIN = 300.0


def line_total_is_raw(line: CompletedJob, cpus: int | None) -> bool | None:
    """What one completed_jobs line itself shows of its ``user/@duration``: raw sum (True),
    normalized (False), or nothing (None).

    Raw (v3.10.12+): user time above HTCondor's time is impossible when normalized.
    Normalized: the raw sum of all jobs is at least N × the normalized time of
    those that exited (``user/@terminated``), so a smaller duration is not raw.
    """
    if line.half_normalized:
        return True
    n = cpus or 0
    if n > 1 and line.user_terminated > 0 and line.user_duration + n < line.user_terminated * n:
        return False
    return None


@dataclass(slots=True)
class PilotAccount:
    entry: str
    client: str
    site: str
    cluster: int | None
    proc: int | None
    outcome: Outcome
    start: float
    end: float
    cpus: int
    memory_mb: int | None
    gpus: int
    validation_duration: float | None
    partition: Partition
    condor_started: bool = False
    condor_duration: float | None = None
    activations_claims: int | None = None
    jobs: int = 0
    warnings: list[str] = field(default_factory=list)
    # Jobs over their slot, per resource the jobs' ads measured (accounting/overuse.py).
    overuse: dict[Overused, Overuse] = field(default_factory=dict)

    @property
    def lifetime(self) -> float:
        return max(0.0, self.end - self.start)

    @property
    def key(self) -> tuple[str, int, int] | None:
        if self.cluster is None or self.proc is None:
            return None
        return (self.entry, self.cluster, self.proc)


def _outcome(p: Partition, condor_started: bool) -> Outcome:
    if not condor_started:
        return Outcome.VALIDATION_FAILED
    if Category.DECISION_PROBLEM in p.cpu or Category.DECISION_PROBLEM in p.gpu:
        return Outcome.NO_MATCH
    return Outcome.RAN_JOBS


def stats_totals(out: GlideinOut, cpus: int) -> JobTotals | None:
    """Core-seconds of user jobs from the Stats block (jobs counted as 1 core each).

    The (Normalized) lines are Σ wall / N (N = the normalization factor, i.e.
    GLIDEIN_CPUS) in every format, so × N gives core-seconds. Job counts are
    normalized too (ceil(jobs / N)); the v3.10.12 "(Real) Total" line has the
    true number, which is then split in the normalized counts' proportions.
    Signal kills (``badSignal``) are goodput: without per-job durations the
    early-failure rule cannot apply (docs/accounting.md, one rule for every
    path).
    """
    if out.stats_format in (StatsFormat.ABSENT, StatsFormat.EMPTY) or "Total" not in out.stats:
        return None
    n = out.normalization or out.cpus or cpus or 1

    def secs(name: str) -> float:
        s = out.stats.get(name)
        return float(s.secs * n) if s is not None else 0.0

    def nr(name: str) -> int:
        s = out.stats.get(name)
        return s.jobsnr if s is not None else 0

    t = JobTotals(
        goodput=secs("goodZ") + secs("goodNZ") + secs("badSignal"),
        misconfiguration=secs("badOther"),
    )
    # Per-category counts are normalized too (ceil(jobs/N)); the Real line has the true total.
    good_nr = nr("goodZ") + nr("goodNZ") + nr("badSignal")
    bad_nr = nr("badOther")
    real = out.stats_real_total.jobsnr if out.stats_real_total is not None else None
    if real is not None and real > 0:
        bad_nr = round(real * bad_nr / (good_nr + bad_nr)) if good_nr + bad_nr else 0
        good_nr = real - bad_nr
    if good_nr:
        t.jobs[Category.GOODPUT] = good_nr
    if bad_nr:
        t.jobs[Category.MISCONFIGURATION_BADPUT] = bad_nr
    if t.goodput + t.misconfiguration == 0 and secs("Total") > 0:
        # A Stats block with only a Total line (other lines lost): all of it goodput.
        t.goodput = secs("Total")
    return t


def from_glidein(
    out: GlideinOut,
    err: GlideinErr | None,
    entry_defaults: EntryDefaults | None = None,
    *,
    entry: str | None = None,
    client: str | None = None,
    end_hint: float | None = None,
    rules: Rules = DEFAULT_RULES,
) -> PilotAccount | None:
    """Account a pilot whose stdout came back. None when the .out has no time at all.

    ``entry``/``client`` (from the file's path) fill in a header that did not
    survive; ``end_hint`` (the file's mtime) stands in for a missing end line.
    """
    d = entry_defaults or EntryDefaults()
    warnings: list[str] = []
    start = out.startup_time
    end = out.glidein_end
    if start is None and end is not None and out.glidein_duration is not None:
        start = end - out.glidein_duration
    if start is None:
        return None
    if end is None:
        # Killed before glidein_startup.sh could print its last line.
        end = max(x for x in (out.condor_end, out.validation_end, end_hint, start) if x is not None)
        warnings.append("no_end_line")
    cpus = out.cpus or (err.cpus if err else None) or d.cpus or 1
    memory = out.memory_mb or (err.memory_mb if err else None) or d.memory_mb
    # The .err's GPU discovery is the truth (0 included); without an .err, the entry's configuration.
    gpus = err.gpus if err is not None and err.gpus is not None else (d.gpus or 0)
    condor_end = out.condor_end
    if out.condor_started and condor_end is None:
        condor_end = end  # condor was running when the pilot died
    u = PilotUsage(
        start=start,
        end=end,
        cpus=cpus,
        memory_mb=memory,
        gpus=gpus,
        condor_started=out.condor_started,
        condor_start=out.condor_start,
        condor_end=condor_end,
        jobs=err.jobs if err else None,
    )
    hogs: dict[Overused, Overuse] = {}
    if out.condor_started and err is not None and err.jobs:
        part, hogs = partition_and_overuse(u, rules)  # partition(u, rules), overuse(err.jobs, condor_end)
    elif not out.condor_started or (err is not None and err.jobs is not None):
        part = partition(u, rules) if out.condor_started else partition(u)
    else:
        part = partition_from_totals(u, stats_totals(out, cpus), Accuracy.STATS, out.activations_claims)
    njobs = sum(part.jobs.values()) if err is None or err.jobs is None else len(err.jobs)
    return PilotAccount(
        entry=out.entry or entry or UNKNOWN_LABEL,
        client=out.client or client or UNKNOWN_LABEL,
        # The factory's configuration names the site, never the pilot (its GLIDEIN_Site is
        # only compared with it): a label value a worker node could invent is a new series.
        site=d.site or UNKNOWN_LABEL,
        cluster=out.cluster,
        proc=out.proc,
        outcome=_outcome(part, out.condor_started),
        start=start,
        end=end,
        cpus=cpus,
        memory_mb=memory,
        gpus=gpus,
        validation_duration=out.validation_duration
        if out.validation_duration is not None
        else (end - start if not out.condor_started else None),
        partition=part,
        condor_started=out.condor_started,
        condor_duration=out.condor_duration,
        activations_claims=out.activations_claims,
        jobs=njobs,
        warnings=warnings,
        overuse=hogs,
    )


def from_completed_job(
    line: CompletedJob,
    entry_defaults: EntryDefaults | None = None,
    *,
    client: str | None = None,
    raw_total: bool | None = None,
    end: float | None = None,
) -> PilotAccount | None:
    """Account a pilot from its completed_jobs line alone (its .out is gone).

    ``raw_total``: whether ``user/@duration`` is the raw sum (v3.10.12+) rather
    than normalized; None: only what the line itself shows. ``end``: the
    pilot's end from the event log (the line's ``terminated`` is when the
    factory wrote it, 60 s to 1 h later). The time of jobs that did not exit
    normally is signal kills and "other" ends merged; it goes to goodput, as a
    signal kill does wherever per-job durations are unknown (docs/accounting.md).

    Lines with duration -1/0 (no usable .out at the factory either) return
    None: the event log knows more about those pilots.
    """
    if line.duration <= 0:
        return None
    d = entry_defaults or EntryDefaults()
    cpus = d.cpus or 1
    gpus = d.gpus or 0
    if end is None or end > line.terminated:
        end = line.terminated
    start = end - line.duration
    condor = min(line.condor_duration, line.duration) if line.condor_started else 0
    # No job time on the line: never matched, or every job still running when the
    # pilot was killed (the Stats block cannot see those). An unmatched pilot's
    # HTCondor stops after GLIDEIN_Max_Idle; one that ran far longer had claims.
    claimed = d.max_idle is not None and condor > d.max_idle + MAX_IDLE_MARGIN
    u = PilotUsage(
        start=start,
        end=end,
        cpus=cpus,
        memory_mb=d.memory_mb,
        gpus=gpus,
        condor_started=line.condor_started and condor >= 5,
        # The line does not say when condor ran; validation comes first, so put it last.
        condor_start=end - condor,
        condor_end=end,
    )
    # terminated (exit-code jobs) is normalized (÷ GLIDEIN_CPUS) in every version;
    # user duration is too, except on v3.10.12+ lines where it is the raw sum.
    raw = line.half_normalized or bool(raw_total)
    exited = float(line.user_terminated * cpus)
    total = float(line.user_duration if raw else line.user_duration * cpus)
    # Signal kills and other ends, merged by the line: the signal rule for both. A split
    # learned from the entry's other pilots would depend on the order files arrive in,
    # and the daemon and the report must agree.
    rest = max(0.0, total - exited)
    totals = JobTotals(goodput=exited + rest)
    if line.jobsnr:
        # Raw count on v3.10.12+ lines, ceil(jobs / N) before.
        totals.jobs[Category.GOODPUT] = line.jobsnr
    part = partition_from_totals(u, totals, Accuracy.COMPLETED_LOG, 1 if claimed else None)
    return PilotAccount(
        entry=line.entry or UNKNOWN_LABEL,
        client=client or line.client,
        site=d.site or UNKNOWN_LABEL,
        cluster=line.cluster,
        proc=line.proc,
        outcome=_outcome(part, u.condor_started),
        start=start,
        end=end,
        cpus=cpus,
        memory_mb=d.memory_mb,
        gpus=gpus,
        validation_duration=round(line.waste_validation / 1000 * line.duration)
        if line.condor_started
        else line.duration,
        partition=part,
        condor_started=u.condor_started,
        condor_duration=condor,
        jobs=line.jobsnr,
    )


def from_event_log(times: PilotTimes, entry_defaults: EntryDefaults | None = None) -> PilotAccount | None:
    """Account a pilot that never returned its .out: the CE-level lifetime, all ``unknown``."""
    if times.started is None or times.ended is None:
        return None
    d = entry_defaults or EntryDefaults()
    cpus = d.cpus or 1
    gpus = d.gpus or 0
    u = PilotUsage(start=times.started, end=times.ended, cpus=cpus, memory_mb=d.memory_mb, gpus=gpus)
    return PilotAccount(
        entry=times.entry or UNKNOWN_LABEL,
        client=times.client or UNKNOWN_LABEL,
        site=d.site or UNKNOWN_LABEL,
        cluster=times.cluster,
        proc=times.proc,
        outcome=Outcome.LOST,
        start=times.started,
        end=times.ended,
        cpus=cpus,
        memory_mb=d.memory_mb,
        gpus=gpus,
        validation_duration=None,
        partition=unknown_lifetime(u),
    )
