"""Plain data records passed from the readers (``gwms_obs.sources``) to the
accounting (``gwms_obs.accounting``). Readers only fill these; they never
decide categories. Times are Unix epochs (float seconds), durations seconds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple


class StatsFormat(enum.StrEnum):
    """Which variant of the ``=== Stats of main ===`` block a .out carried."""

    ABSENT = "absent"  # no block at all (condor never started, or killed)
    EMPTY = "empty"  # block present, nothing in it (HTCondor >= 8.9.13, GWMS < 3.10.12)
    LEGACY = "legacy"  # "Total jobs N utilization S" (GWMS <= 3.10.11), normalized
    REAL = "real"  # "(Real)" + "(Normalized)" lines (GWMS >= 3.10.12)


@dataclass(slots=True)
class SlotStat:
    """One ``Total <name> jobs N ... utilization S`` line of the Stats block."""

    jobsnr: int
    secs: int


@dataclass(slots=True)
class ScriptTiming:
    """One validation/setup script from the long XML in the .err."""

    name: str  # e.g. "main/setup_script.sh"
    start: float | None
    end: float | None
    ok: bool
    failure: str | None = None  # the script's ``failure`` metric, if any


@dataclass(slots=True)
class GlideinOut:
    """What a glidein stdout (``job.C.P.out``) tells. Unknown stays None."""

    path: str
    cluster: int | None = None
    proc: int | None = None
    schedd: str | None = None
    uuid: str | None = None
    factory: str | None = None
    glidein_name: str | None = None
    entry: str | None = None
    client: str | None = None  # client_name, e.g. "CMSG-v1_0.main-token"
    client_group: str | None = None
    startup_time: float | None = None  # "Starting glidein_startup.sh at ... (epoch)"
    validation_end: float | None = None  # "Last script starting ... (epoch)"
    validation_duration: int | None = None  # "... after validating for N"
    condor_started: bool = False
    condor_start: float | None = None
    condor_end: float | None = None
    condor_duration: int | None = None
    glidein_end: float | None = None
    glidein_duration: int | None = None
    exit_code: int | None = None
    activations_claims: int | None = None
    stats_format: StatsFormat = StatsFormat.ABSENT
    # Normalized values (÷ GLIDEIN_CPUS) keyed Total/goodZ/goodNZ/badSignal/badOther.
    stats: dict[str, SlotStat] = field(default_factory=dict)
    stats_real_total: SlotStat | None = None  # the "(Real) Total" line, GWMS >= 3.10.12
    normalization: int | None = None  # "Normalization [parallelism] factor N"
    cpus: int | None = None  # "Setting GLIDEIN_CPUS=N"
    memory_mb: int | None = None  # "Setting GLIDEIN_MaxMemMBs=N"
    metrics: dict[str, str] = field(default_factory=dict)  # <OSGTestResult> <metric>s
    status: str | None = None  # <result><status>
    failure: str | None = None  # the "failure" metric (WN_RESOURCE, Config, ...)
    detail: str | None = None  # <detail> of a failed validation: the failing test's own words (hostile)


@dataclass(slots=True)
class Job:
    """One user job that ran in a pilot (a StartdHistoryLog ClassAd)."""

    start: float
    end: float | None  # None: no end recorded (still running when the log was cut)
    cpus: int
    memory_mb: int
    gpus: int
    exited: bool  # the job exited on its own (ExitCode or ExitBySignal known, status 4)
    exit_code: int | None = None
    exit_by_signal: bool = False
    exit_signal: int | None = None
    job_status: int | None = None  # HTCondor JobStatus in the ad
    global_job_id: str | None = None
    # What the job used, from its ad (None: not in the ad, or refused as a parse error):
    memory_usage_mb: int | None = None  # peak MemoryUsage (MiB), else ResidentSetSize / 1024
    cpu_seconds: float | None = None  # RemoteUserCpu + RemoteSysCpu


@dataclass(slots=True)
class GlideinErr:
    """What a glidein stderr (``job.C.P.err``) tells."""

    path: str
    jobs: list[Job] | None = None  # None: no decodable StartdHistoryLog section
    gpus: int | None = None  # condor_gpu_discovery line
    memory_mb: int | None = None  # glidein_config MEMORY
    cpus: int | None = None  # glidein_config GLIDEIN_CPUS
    site: str | None = None  # glidein_config GLIDEIN_Site
    config: dict[str, str] = field(default_factory=dict)  # glidein_config dump
    scripts: list[ScriptTiming] = field(default_factory=list)  # long XML
    trace_spool: bytes | None = None  # OTLP/JSON spans returned by gwms-trace.sh
    size: int | None = None  # the file's size when read_err opened it (None: parsed from bytes)


@dataclass(slots=True)
class CompletedJob:
    """One line of ``completed_jobs_YYYYMMDD.log``."""

    terminated: float  # when the factory wrote the line (not the pilot end)
    client: str  # client_log_name, e.g. "fermilab_okd_gpfe01_frontend"
    username: str
    cluster: int
    proc: int
    duration: int  # -1 unknown, 0 no .out
    condor_started: bool
    condor_duration: int
    jobsnr: int
    user_duration: int
    goodput: int
    user_terminated: int
    waste_validation: int  # per-mille
    waste_idle: int
    waste_nosuccess: int
    waste_badput: int
    half_normalized: bool = False  # v3.10.12+ line: Total raw, others normalized
    entry: str | None = None  # from the file's directory, server/entry_<entry>/


class HoldInterval(NamedTuple):
    """One hold of a glidein: its 012 and the 013 that released it (None: never released)."""

    held: float
    released: float | None
    code: int | None  # HoldReasonCode ("Code N Subcode M"); None when the 012 had no codes line
    subcode: int | None  # HoldReasonSubCode
    reason: str | None  # the hold reason as the CE or HTCondor wrote it (hostile), at most 500 characters


@dataclass(slots=True)
class PilotTimes:
    """A glidein's life as the HTCondor-G event log saw it."""

    cluster: int
    proc: int
    submitted: float | None = None  # 000
    grid_submitted: float | None = None  # 027
    started: float | None = None  # last 001
    ended: float | None = None  # 005 / 009 / 012
    end_event: str | None = None  # "terminated" | "aborted" | "held"
    return_value: int | None = None
    held_reason: str | None = None  # the last hold's reason
    entry: str | None = None
    client: str | None = None  # GLIDEIN_CLIENT from the file name
    # Every hold, oldest first, at most condor_event_log.MAX_HOLDS; the rest only counted. Tuples:
    # most pilots have none, and the empty tuple costs an open pilot nothing.
    holds: tuple[HoldInterval, ...] = ()
    holds_dropped: int = 0
    evictions: tuple[float, ...] = ()  # 004 times, at most condor_event_log.MAX_EVICTIONS
    evictions_dropped: int = 0
    first_started: float | None = None  # first 001: the end of the queue (``started`` is the last run's)

    def __post_init__(self) -> None:
        # A checkpoint (asdict, JSON, then PilotTimes(**saved)) gives these back as lists.
        if type(self.holds) is not tuple or (self.holds and type(self.holds[0]) is not HoldInterval):
            self.holds = tuple(HoldInterval(*h) for h in self.holds)
        if type(self.evictions) is not tuple:
            self.evictions = tuple(self.evictions)


@dataclass(slots=True)
class FrontendStatus:
    """One ``<frontend>`` (or ``<total>``) of an entry's schedd_status.xml."""

    # Status: glideins in the factory queue. idle == wait+pending+stagein+idleother.
    status: dict[str, int] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    client_monitor: dict[str, int] = field(default_factory=dict)
    downtime: bool = False


@dataclass(slots=True)
class EntryStatus:
    entry: str
    updated: float | None
    downtime: bool
    frontends: dict[str, FrontendStatus]
    total: FrontendStatus


@dataclass(slots=True)
class FrontendMatch:
    """One ``<factory>`` (an entry, as the frontend names it) or ``<state>`` of a group's
    frontend_status.xml (``groupStats``): raw attributes of each class, by GlideinWMS's names."""

    down: bool | None  # Down="Down"/"Up"; None when absent
    matched_jobs: dict[str, int] = field(default_factory=dict)  # Idle, EffIdle, OldIdle, Running, RunningHere
    matched_glideins: dict[str, int] = field(default_factory=dict)  # Total, Idle, Running, Failed
    matched_cores: dict[str, int] = field(default_factory=dict)  # Total, Idle, Running
    requested: dict[str, int] = field(default_factory=dict)  # Idle, MaxRun


@dataclass(slots=True)
class FrontendGroupStatus:
    """A frontend group's ``group_<group>/frontend_status.xml`` (``VOFrontendGroupStats``)."""

    group: str
    updated: float | None
    jobs: dict[str, int]  # <total><Jobs>: the schedds' user jobs (Idle, OldIdle, Idle_3600, Running, Total)
    glideins: dict[str, int]  # <total><Glideins>: the VO pool's glideins (Idle, Running, Total)
    # By (entry, factory_instance): the frontend's name <entry>@<glidein>@<factory>@<pool node>, split at its first @.
    factories: dict[tuple[str, str], FrontendMatch]
    states: dict[str, FrontendMatch]  # MatchedUp, MatchedDown, Unmatched


@dataclass(slots=True)
class EntryDescript:
    entry: str
    site: str | None  # GLIDEIN_Site
    attributes: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    descript: dict[str, str] = field(default_factory=dict)
