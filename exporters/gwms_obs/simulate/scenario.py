"""The simulated factory's scenario: who submits, to which entries, and how each entry behaves.

The fixed cast of the simulation (factory identity, frontend clients, entries
with their misbehaviours, the validation scripts a glidein runs) and the knobs
of an entry (``EntrySpec``). Nothing here is random: ``plan`` draws each
pilot's fate from these.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

DEFAULT_START = 1_781_000_000  # 2026-06-09T10:13:20Z: fixed so output is reproducible
FACTORY = "OSG"
GLIDEIN_NAME = "gfactory_instance"
SCHEDD = "schedd_glideins3@gfactory-2.opensciencegrid.org"
SCHEDD_ADDR = (
    "<129.79.53.61:9615?addrs=129.79.53.61-9615&alias=gfactory-2.opensciencegrid.org&noUDP&sock=schedd_2061_7d1f>"
)
FIRST_CLUSTER = 10_176_593
VALIDATION_FAIL_SLEEP = 1199  # glidein_startup.sh sleep_time after a failed script
MAX_IDLE = 1200  # GLIDEIN_Max_Idle: an unmatched glidein shuts down after this
OS_RELEASE = "AlmaLinux release 9.4 (Seafoam Ocelot)"  # of every worker node
MEMORY_SETUP = "main/glidein_memory_setup.sh"  # the validation scripts that set the slot's memory and CPUs
CPUS_SETUP = "main/glidein_cpus_setup.sh"


@dataclass(frozen=True, slots=True)
class Client:
    """A frontend client of the factory (one security class of one frontend)."""

    username: str  # factory-side credential user: user_<username>/
    client_name: str  # client int name: .out client_name, event-log file name
    group: str
    log_name: str  # client_log_name: completed_jobs client="...", monitor frontend name
    owners: tuple[str, ...]  # user-job owners in the VO pool
    submit_host: str  # the VO schedd of the user jobs (GlobalJobId)


CLIENTS: dict[str, Client] = {
    "cms": Client(
        "fecmsglobal",
        "CMSG-v1_0.main-token",
        "main-token",
        "CMSG-v1_0_cmspilot",
        ("cmsprod", "cmsdataops", "cmsuser_ab"),
        "vocms0253.cern.ch",
    ),
    "fermilab": Client(
        "fefermilab",
        "fermilab_okd_gpfe01.main",
        "main",
        "fermilab_okd_gpfe01_frontend",
        ("novapro", "dunepro", "mu2epro"),
        "jobsub02.fnal.gov",
    ),
    "osg": Client(
        "feosgflock",
        "OSG_Flock-v1_0.main",
        "main",
        "OSG_Flock_frontend",
        ("osguser1", "icecube", "ligo"),
        "ap20.uc.osg-htc.org",
    ),
}


@dataclass(frozen=True, slots=True)
class EntrySpec:
    """One factory entry (CE queue) and how its pilots behave."""

    name: str
    site: str
    gatekeeper: str  # CE host
    clients: tuple[str, ...]  # keys of CLIENTS
    weight: float = 1.0  # share of the pilots
    cpus: tuple[int, ...] = (8,)  # GLIDEIN_CPUS choices (first is the configured one)
    mem_per_core: int = 2000  # GLIDEIN_MaxMemMBs = cpus * mem_per_core ...
    memory_mb: int | None = None  # ... unless fixed here
    gpus: tuple[int, ...] = (0,)  # GPUs per pilot choices (a real entry requests one number)
    lost: float = 0.02  # no .out/.err: removed or held then removed
    validation_failure: float = 0.01
    no_match: float = 0.02  # condor starts, no job ever matches
    preempt: float = 0.02  # batch system kills the pilot while jobs run
    blackhole: float = 0.0  # pilots on nodes where every job dies within seconds
    lifetime_h: tuple[float, float] = (3.0, 10.0)  # retire (or kill) time after condor start
    job_hours: tuple[float, float] = (0.5, 3.0)
    # Stats block shapes, REAL, LEGACY, EMPTY. EMPTY is per pilot (the node's
    # HTCondor); REAL vs LEGACY is the glidein scripts' version, which the
    # factory stages: the entry is upgraded to v3.10.12 once, at the point of
    # the span that leaves REAL its share.
    stats_shapes: tuple[float, float, float] = (0.5, 0.3, 0.2)
    legacy_eventlog: bool = False  # MM/DD HH:MM:SS event-log timestamps
    py2_ids: bool = False  # completed_jobs id="C.PPP" instead of id="b'C.PPP'"
    memory_hungry: float = 0.05  # share of 1-core jobs asking 6 GB
    idle_jobs: int = 200  # frontend-reported idle user jobs matching the entry
    # Anomalies (issue 12), all off by default: a tree without them is byte-for-byte what it was.
    # One validation script (a name of VALIDATION_SCRIPTS) takes ``slow_script_factor`` times its
    # usual share of the validation time at this entry; the validation phase grows by as much.
    slow_script: str = ""
    slow_script_factor: float = 1.0
    # The validation-failure share rises linearly over the simulated span, from
    # ``validation_failure`` at its start to ``validation_failure + drift`` at its end.
    drift: float = 0.0
    # Share of user jobs that use more than their slot gave them (memory 1.5-3x RequestMemory,
    # and/or CPU time over 1.5x wall time x RequestCpus), seen in their StartdHistoryLog ads.
    hog: float = 0.0
    # The factory operator's day (issue 33), all off by default. ``refuse``: the share of glideins the
    # CE refuses at submission for the factory's credentials (held by the gridmanager with the
    # HTCondor-C GAHP's authentication error, never accepted; the factory removes them hours later).
    refuse: float = 0.0
    # The CE is unreachable this many hours from 45 minutes before the snapshot (outage()): the
    # gridmanager writes 026 for the entry's glideins it holds then and 025 when it is back.
    ce_down_hours: float = 0.0
    # Glideins submitted from ``queue_slow_from`` (a share of the span) on wait this many times
    # longer in the CE's queue than before (the site's batch system full).
    queue_slow: float = 1.0
    queue_slow_from: float = 0.5
    # The share of submissions whose condor_submit the factory's schedd refuses one to three cycles
    # before they go out (the entry's process log, simulate/write/factory_log.py): submit failing.
    submit_fail: float = 0.0
    # No ``leak``: a pilot's own memory over its life is not in any file the factory gets back
    # (the .err returns job ads with one peak MemoryUsage each, and daemon logs without memory
    # samples; MonitorSelfResidentSetSize is in the VO collector's startd ad, not in the factory's
    # logs), so a leaking pilot is not observable from this tree and is not simulated.

    def __post_init__(self) -> None:
        if self.slow_script and self.slow_script not in dict(VALIDATION_SCRIPTS):
            raise ValueError(f"{self.name}: slow_script {self.slow_script!r} is not a validation script")
        if self.slow_script_factor <= 0:
            raise ValueError(f"{self.name}: slow_script_factor must be > 0")
        if not (0.0 <= self.hog <= 1.0) or not (0.0 <= self.validation_failure + self.drift <= 1.0):
            raise ValueError(f"{self.name}: hog and validation_failure + drift must be shares in [0, 1]")
        if not (0.0 <= self.refuse <= 1.0) or self.ce_down_hours < 0 or self.queue_slow <= 0:
            raise ValueError(f"{self.name}: refuse must be a share, ce_down_hours >= 0 and queue_slow > 0")

    @property
    def anomalous(self) -> bool:
        """Whether the entry carries one of the labelled anomalies (a black hole counts)."""
        return bool(self.blackhole or self.slow_script or self.drift or self.hog or self.troubled)

    @property
    def troubled(self) -> bool:
        """Whether the entry carries one of the factory operator's troubles (OPERATOR_ENTRIES)."""
        return bool(self.refuse or self.ce_down_hours or self.queue_slow != 1.0)


DEFAULT_ENTRIES: tuple[EntrySpec, ...] = (
    # Healthy 8-core CPU site.
    EntrySpec("CMSHTPC_T2_US_Nebraska_red", "Nebraska", "red-ce1.unl.edu", ("cms", "osg"), weight=3.0),
    # Validation fails often (condor never starts): broken node setup.
    EntrySpec(
        "OSG_US_FAIL_VALIDATION_ce1",
        "FailSite",
        "ce1.failsite.example.edu",
        ("osg", "fermilab"),
        validation_failure=0.6,
        stats_shapes=(0.0, 1.0, 0.0),
    ),
    # Pilots register but never get a match (insufficient demand): decision problem.
    EntrySpec(
        "Fermilab_NOMATCH_ce",
        "NoMatchSite",
        "ce.nomatch.example.org",
        ("fermilab",),
        cpus=(4,),
        no_match=0.9,
        idle_jobs=0,
        legacy_eventlog=True,
        py2_ids=True,
        stats_shapes=(0.0, 1.0, 0.0),
    ),
    # Batch-system walltime kills pilots with jobs still running; GLIDEIN_CPUS auto-detected.
    EntrySpec(
        "CMSHTPC_T1_PREEMPT_ce",
        "PreemptSite",
        "ce.preempt.example.org",
        ("cms",),
        cpus=(8, 4, 16),
        preempt=0.7,
        lifetime_h=(1.0, 6.0),
    ),
    # Black hole: misconfigured nodes where jobs die by signal within seconds.
    EntrySpec(
        "OSG_US_BLACKHOLE_ce",
        "BlackHoleSite",
        "ce.blackhole.example.edu",
        ("osg",),
        cpus=(4,),
        blackhole=0.8,
        lifetime_h=(1.0, 2.0),
    ),
    # GPU pilots (GLIDEIN_Resource_Slots GPUs) running GPU and CPU jobs.
    EntrySpec(
        "OSG_US_GPU_ce",
        "GPUSite",
        "gpu-ce.example.edu",
        ("osg", "fermilab"),
        memory_mb=48000,
        gpus=(2,),
        stats_shapes=(1.0, 0.0, 0.0),
    ),
    # 8 cores but only 8 GB: most cores idle for lack of memory.
    EntrySpec(
        "CMSHTPC_T3_MEMLIMIT_ce",
        "MemLimitSite",
        "ce.memlimit.example.org",
        ("cms",),
        memory_mb=8000,
        memory_hungry=0.0,
    ),
)


# Validation scripts in the order glidein_startup.sh runs them: (id/name, weight of the validation time).
VALIDATION_SCRIPTS: tuple[tuple[str, float], ...] = (
    ("main/setup_script.sh", 1),
    ("main/cat_consts.sh", 1),
    ("main/condor_platform_select.sh", 1),
    ("main/singularity_wrapper.sh", 1),
    ("main/collector_setup.sh", 1),
    ("main/create_temp_mapfile.sh", 1),
    ("main/gwms-python", 1),
    ("main/setup_x509.sh", 2),
    ("main/check_wn_drainstate.sh", 1),
    ("main/mjf_setparams.sh", 1),
    ("client/cat_consts.sh", 1),
    ("client_group/cat_consts.sh", 1),
    ("entry/cat_consts.sh", 1),
    ("main/singularity_setup.sh", 8),
    ("main/condor_chirp", 1),
    ("main/test_os.sh", 1),
    ("main/smart_partitionable_rc.sh", 1),
    ("main/check_proxy.sh", 1),
    ("main/create_mapfile.sh", 1),
    ("main/validate_node.sh", 3),
    ("main/setup_network.sh", 1),
    ("main/java_setup.sh", 1),
    ("main/glidein_memory_setup.sh", 1),
    ("main/glidein_cpus_setup.sh", 1),
    ("main/glidein_sitewms_setup.sh", 1),
    ("main/script_wrapper.sh", 1),
    ("main/smart_partitionable.sh", 1),
    ("main/cvmfs_setup.sh", 6),
)


class ScriptFailure(NamedTuple):
    """How a validation script fails: its failure category, the detail it prints, one extra metric."""

    category: str
    detail: str
    metric: tuple[str, str]


# The scripts that fail on a broken node, and how.
SCRIPT_FAILURES: dict[str, ScriptFailure] = {
    "main/validate_node.sh": ScriptFailure(
        "WN_Resource",
        "Not enough space in the work dir (1024 MB free, 2048 required).",
        ("WorkDirFreeKb", "1048576"),
    ),
    "main/singularity_setup.sh": ScriptFailure(
        "VO_Config",
        "Singularity is REQUIRED but no working image was found.",
        ("use_singularity", "False"),
    ),
    "main/check_proxy.sh": ScriptFailure("VO_Proxy", "Proxy/token expired or about to expire.", ("proxy", "expired")),
    "main/cvmfs_setup.sh": ScriptFailure(
        "WN_Resource",
        "CVMFS repositories not available on the node.",
        ("msg", "cvmfs_config probe failed"),
    ),
}
# What a script that succeeds reports (error_gen.sh metrics), besides the memory and CPU settings.
SCRIPT_METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    "main/cat_consts.sh": (("NrAttributes", "42"),),
    "main/condor_platform_select.sh": (("Condor_platform", "23.0.8-x86_64-default"),),
    "main/collector_setup.sh": (("Collector", "cmsgwms-collector-global.cern.ch:9620-9660"),),
    "main/singularity_setup.sh": (("use_singularity", "True"),),
    "main/setup_network.sh": (("UseCCB", "True"), ("UseSharedPort", "True")),
    "main/java_setup.sh": (("Java_check", "False"),),
    "main/smart_partitionable.sh": (("Action", "None"),),
}


# The labelled cast (``simulate(..., anomalies=True)`` adds it): one anomaly per entry, each at a
# site of its own, the rest of the entry healthy. The black hole of DEFAULT_ENTRIES
# (OSG_US_BLACKHOLE_ce) is labelled too. ``factory.anomaly_labels`` writes what each one is.
ANOMALY_ENTRIES: tuple[EntrySpec, ...] = (
    # One slow validation script: CVMFS mounts slowly on every node of the site.
    EntrySpec(
        "OSG_US_SLOWCVMFS_ce",
        "SlowCvmfsSite",
        "ce.slowcvmfs.example.edu",
        ("osg", "cms"),
        slow_script="main/cvmfs_setup.sh",
        slow_script_factor=6.0,
    ),
    # Resource hogs: a third of the jobs use more memory or CPU than their slot gave them.
    EntrySpec("CMSHTPC_T2_HOG_ce", "HogSite", "ce.hog.example.org", ("cms",), hog=0.3),
    # A site getting worse over the span: validation failures from 2 % to 62 %.
    EntrySpec(
        "Fermilab_DRIFT_ce",
        "DriftSite",
        "ce.drift.example.org",
        ("fermilab", "osg"),
        validation_failure=0.02,
        drift=0.6,
    ),
)


# The CE goes down this long before the snapshot: the tree shows it down for over GwmsEntryCeUnreachable's
# 30 minutes, as a factory would be seen while it is happening (its 025 falls after the snapshot).
OUTAGE_BEFORE_SNAPSHOT = 45 * 60


def outage(spec: EntrySpec, snapshot: int) -> tuple[int, int]:
    """When an entry with ``ce_down_hours`` has its CE down: (026, 025) times."""
    down = snapshot - OUTAGE_BEFORE_SNAPSHOT
    return down, down + int(spec.ce_down_hours * 3600)


# The factory operator's troubles (issue 33), labelled held, ce_unreachable and queue_slow.
OPERATOR_ENTRIES: tuple[EntrySpec, ...] = (
    # The CE refuses the factory's token: nine glideins in ten held at submission, auth_failed.
    # Its credentials are refused by the factory's schedd too: a third of the submissions fail first.
    EntrySpec("OSG_US_AUTHFAIL_ce", "AuthFailSite", "ce.authfail.example.edu", ("osg",), refuse=0.9, submit_fail=0.35),
    # The CE is unreachable for an hour.
    EntrySpec("CMSHTPC_T2_CEDOWN_ce", "CeDownSite", "ce.down.example.org", ("cms",), ce_down_hours=1.0),
    # The site's batch system fills up half-way: glideins wait 8 times longer in its queue.
    EntrySpec("Fermilab_LONGQUEUE_ce", "LongQueueSite", "ce.longqueue.example.org", ("fermilab",), queue_slow=8.0),
)


def client_of(spec: EntrySpec, log_name: str) -> tuple[str, Client]:
    """The entry's client (key, record) whose client_log_name is ``log_name``."""
    key = next(k for k in spec.clients if CLIENTS[k].log_name == log_name)
    return key, CLIENTS[key]


def fleet(n: int, sites_per_entry: int = 5, *, anomalies: bool = False) -> tuple[EntrySpec, ...]:
    """``n`` entries for scale tests: the default cast repeated, each copy its own entry and CE.

    Entry ``i`` behaves like ``DEFAULT_ENTRIES[i % 7]`` (so every kind of trouble
    is spread over the fleet), is named after it with ``_{i:03d}``, and shares its
    site with ``sites_per_entry - 1`` neighbours: 500 entries make 100 sites, the
    shape of a large production factory. With ``anomalies`` the cast repeated is
    DEFAULT_ENTRIES then ANOMALY_ENTRIES (entry ``i`` is ``cast[i % 10]``), so
    every tenth entry or so carries each labelled anomaly.
    """
    if n < 1 or sites_per_entry < 1:
        raise ValueError(f"fleet({n}, {sites_per_entry}): both must be >= 1")
    cast = DEFAULT_ENTRIES + ANOMALY_ENTRIES if anomalies else DEFAULT_ENTRIES
    out = []
    for i in range(n):
        spec = cast[i % len(cast)]
        out.append(
            replace(
                spec,
                name=f"{spec.name}_{i:03d}",
                site=f"FleetSite{i // sites_per_entry:03d}",
                gatekeeper=f"ce{i:03d}.{spec.gatekeeper}",
                weight=1.0,
            )
        )
    return tuple(out)
