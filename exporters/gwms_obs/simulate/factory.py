"""Synthetic GlideinWMS factory log tree: the load generator and test oracle.

``simulate()`` writes, for a seeded population of pilots, exactly the files a
factory holds (paths and shapes from shared/reference/glideinwms-formats.md):

* ``client/user_<u>/glidein_gfactory_instance/entry_<e>/job.C.P.out|.err``
* ``.../entry_<e>/condor_activity_<submit YYYYMMDD>_<client_int_name>.log``
* ``server/entry_<e>/completed_jobs_<YYYYMMDD>.log``
* ``monitor/entry_<e>/{schedd_status.xml,descript.xml}`` and ``monitor/descript.xml``

Everything is UTC and a pure function of ``seed`` and the arguments. The tree
is a snapshot taken at ``summary.snapshot``: pilots still queued or running
then have only their first event-log events and no .out/.err.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gwms_obs.model import StatsFormat
from gwms_obs.simulate import formats as F
from gwms_obs.simulate import traces as T
from gwms_obs.sources.condor_sections import encode
from gwms_obs.sources.glidein_err import TRACE_SECTION

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
CONFIG_DASHES = "-" * 53  # closing line of condor_startup.sh's glidein_config dump (HEAD)


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


@dataclass(slots=True)
class SimJob:
    """Ground truth of one user job (one StartdHistoryLog ad)."""

    cluster: int
    proc: int
    owner: str
    start: int
    end: int | None  # None: still running when condor ended (preempted)
    cpus: int
    memory_mb: int  # RequestMemory
    gpus: int
    memory_provisioned: int
    kind: str  # goodZ | goodNZ | badSignal | badOther | preempted
    exit_code: int | None = None
    exit_signal: int | None = None


@dataclass(slots=True)
class SimPilot:
    """Ground truth of one glidein."""

    entry: str
    client: str  # client_log_name
    client_name: str
    username: str
    cluster: int
    proc: int
    kind: str = "ran_jobs"  # ran_jobs | no_match | validation_failed | lost | in_queue
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0
    blackhole: bool = False
    submitted: int = 0
    grid_submitted: int = 0
    executing: int | None = None  # 001 event
    startup: int | None = None
    validation_end: int | None = None
    condor_start: int | None = None
    condor_end: int | None = None
    last_script_end: int | None = None
    glidein_end: int | None = None
    held: int | None = None  # 012 event of a lost pilot
    ended: int | None = None  # 005 / 009 event
    end_event: str | None = None  # terminated | aborted | held
    exit_code: int | None = None
    condor_killed: bool = False
    stats_format: StatsFormat | None = None
    failed_script: str | None = None
    has_out: bool = False
    completed_line: bool = False
    jobs: list[SimJob] = field(default_factory=list)


@dataclass(slots=True)
class SimulationSummary:
    out: Path
    seed: int
    start: int
    snapshot: int  # the moment the tree represents
    pilots: int
    by_entry: dict[str, Counter[str]]  # kind counts plus out_files, completed_lines, jobs
    by_kind: Counter[str]
    files: int
    bytes: int
    ground_truth: list[SimPilot] | None = None

    def describe(self) -> list[str]:
        """Human summary lines (the CLI prints them)."""
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        lines = [
            f"{self.pilots} pilots ({kinds}); {self.files} files, {self.bytes / 1e6:.1f} MB",
            f"snapshot at {F.iso_local(self.snapshot)} (seed {self.seed})",
        ]
        for entry, c in self.by_entry.items():
            lines.append(f"{entry}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
        return lines


# Validation scripts in the order glidein_startup.sh runs them: (id/name, weight of the validation time).
_SCRIPTS: tuple[tuple[str, float], ...] = (
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
# Failing script -> (failure category, detail, extra metric).
_FAILURES: dict[str, tuple[str, str, tuple[str, str]]] = {
    "main/validate_node.sh": (
        "WN_Resource",
        "Not enough space in the work dir (1024 MB free, 2048 required).",
        ("WorkDirFreeKb", "1048576"),
    ),
    "main/singularity_setup.sh": (
        "VO_Config",
        "Singularity is REQUIRED but no working image was found.",
        ("use_singularity", "False"),
    ),
    "main/check_proxy.sh": ("VO_Proxy", "Proxy/token expired or about to expire.", ("proxy", "expired")),
    "main/cvmfs_setup.sh": (
        "WN_Resource",
        "CVMFS repositories not available on the node.",
        ("msg", "cvmfs_config probe failed"),
    ),
}
_SCRIPT_METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    "main/cat_consts.sh": (("NrAttributes", "42"),),
    "main/condor_platform_select.sh": (("Condor_platform", "23.0.8-x86_64-default"),),
    "main/collector_setup.sh": (("Collector", "cmsgwms-collector-global.cern.ch:9620-9660"),),
    "main/singularity_setup.sh": (("use_singularity", "True"),),
    "main/setup_network.sh": (("UseCCB", "True"), ("UseSharedPort", "True")),
    "main/java_setup.sh": (("Java_check", "False"),),
    "main/smart_partitionable.sh": (("Action", "None"),),
}
_MASTER_LOG = (
    "06/09/26 10:15:01 ******************************************************\n"
    "06/09/26 10:15:01 ** condor_master (CONDOR_MASTER) STARTING UP\n"
    "06/09/26 10:15:01 ** $CondorVersion: 23.0.8 2024-05-08 BuildID: 733000 PackageID: 23.0.8-1 $\n"
    "06/09/26 10:15:01 ** PID = 9315\n"
    '06/09/26 10:15:02 Started DaemonCore process "condor_startd", pid and pgroup = 9330\n'
    "06/09/26 10:15:02 All daemons are gone.  Exiting.\n"
)
_STARTD_LOG = (
    "06/09/26 10:15:02 ******************************************************\n"
    "06/09/26 10:15:02 ** condor_startd (CONDOR_STARTD) STARTING UP\n"
    "06/09/26 10:15:03 slot1: New machine resource of type -1 allocated\n"
    "06/09/26 10:15:04 Initial update sent to collector(s)\n"
    "06/09/26 10:20:11 slot1_1: Got activate_claim request from shadow\n"
)


_GPU_JOB_CPUS = (1, 1, 2, 4)
_MB_PER_CORE = (2000, 2000, 1900, 2500)


def _alloc(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` pilots by weights with largest-remainder rounding."""
    s = sum(weights)
    raw = [total * w / s for w in weights]
    out = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - out[i], reverse=True)[: total - sum(out)]:
        out[i] += 1
    return out


def _quantize_mem(mb: int) -> int:
    """Partitionable slots round RequestMemory up to 128 MB (MODIFY_REQUEST_EXPR_REQUESTMEMORY)."""
    return -(-mb // 128) * 128


class _EntryStatic:
    """Per-entry text that does not change between pilots (rendered once)."""

    def __init__(self, spec: EntrySpec, base: Path) -> None:
        self.spec = spec
        self.ce_host = spec.gatekeeper
        self.grid_resource = f"condor {spec.gatekeeper} {spec.gatekeeper}:9619"
        self.master = encode("MasterLog", _MASTER_LOG.encode())
        self.startd = encode("StartdLog", (_STARTD_LOG + f"06/09/26 10:15:03 Entry {spec.name}\n").encode())
        self.dirs: dict[str, Path] = {}
        for key in spec.clients:
            c = CLIENTS[key]
            d = base / "client" / f"user_{c.username}" / f"glidein_{GLIDEIN_NAME}" / f"entry_{spec.name}"
            d.mkdir(parents=True, exist_ok=True)
            self.dirs[key] = d
        self.server = base / "server" / f"entry_{spec.name}"
        self.server.mkdir(parents=True, exist_ok=True)
        self.monitor = base / "monitor" / f"entry_{spec.name}"
        self.monitor.mkdir(parents=True, exist_ok=True)


class _Sim:
    def __init__(self, out: Path, seed: int, start: int, span: int, entries: Sequence[EntrySpec]) -> None:
        self.out = out
        self.rng = random.Random(seed)
        self.seed = seed
        self.start = start
        self.span = span
        self.snapshot = start + span + 3 * 3600  # submissions stop 3 h before
        self.entries = entries
        self.files = 0
        self.bytes = 0

    # ------------------------------------------------------------------ pilots
    def skeleton(self, pilots: int) -> list[SimPilot]:
        """Submission clusters per entry, then factory-wide cluster ids in submit order."""
        rng = self.rng
        clusters: list[tuple[int, int, int, str, int]] = []  # (t, entry idx, n, client key, order)
        counts = _alloc(pilots, [e.weight for e in self.entries])
        for ei, (spec, n) in enumerate(zip(self.entries, counts, strict=True)):
            left = n
            while left > 0:
                k = min(left, rng.choice((1, 1, 2, 3, 5, 10)))
                t = self.start + int(rng.random() * self.span)
                clusters.append((t, ei, k, rng.choice(spec.clients), len(clusters)))
                left -= k
        clusters.sort()
        out: list[SimPilot] = []
        for cid, (t, ei, k, ckey, _) in enumerate(clusters):
            c = CLIENTS[ckey]
            for proc in range(k):
                p = SimPilot(self.entries[ei].name, c.log_name, c.client_name, c.username, FIRST_CLUSTER + cid, proc)
                p.submitted = t
                out.append(p)
        return out

    def plan(self, p: SimPilot, spec: EntrySpec) -> None:
        """Decide the pilot's fate and timeline (ground truth)."""
        rng = self.rng
        p.grid_submitted = p.submitted + rng.randint(2, 40)
        p.cpus = rng.choice(spec.cpus)
        p.memory_mb = spec.memory_mb if spec.memory_mb is not None else p.cpus * spec.mem_per_core
        p.gpus = rng.choice(spec.gpus)
        queue = int(rng.expovariate(1 / 1800)) + 30
        p.startup = p.grid_submitted + queue
        p.executing = p.startup + rng.randint(5, 90)  # gridmanager polls the CE
        r = rng.random()
        if r < spec.lost:
            p.kind = "lost"
            life = rng.randint(600, 30000)
            p.ended = p.startup + life
            p.end_event = rng.choice(("aborted", "held"))
            if p.end_event == "held":
                p.held = p.ended
                p.ended += rng.randint(600, 3600)  # the factory removes held glideins later
            return
        validation = rng.randint(35, 150)
        r = rng.random()
        if r < spec.validation_failure:
            p.kind = "validation_failed"
            names = list(_FAILURES)
            p.failed_script = rng.choice(names)
            p.validation_end = p.startup + validation
            p.glidein_end = p.validation_end + VALIDATION_FAIL_SLEEP + rng.randint(1, 6)
            p.exit_code = 1
        else:
            p.validation_end = p.startup + validation
            p.condor_start = p.validation_end + rng.randint(1, 3)
            shapes = (StatsFormat.REAL, StatsFormat.LEGACY, StatsFormat.EMPTY)
            p.stats_format = rng.choices(shapes, weights=spec.stats_shapes)[0]
            if p.stats_format is not StatsFormat.EMPTY:
                real, legacy, _ = spec.stats_shapes
                upgrade = self.start + self.span * legacy / (real + legacy)
                p.stats_format = StatsFormat.REAL if p.submitted >= upgrade else StatsFormat.LEGACY
            p.blackhole = rng.random() < spec.blackhole
            if rng.random() < spec.no_match:
                p.kind = "no_match"
                p.condor_end = p.condor_start + MAX_IDLE + rng.randint(5, 120)
            else:
                killed = rng.random() < spec.preempt
                life = int(rng.uniform(*spec.lifetime_h) * 3600)
                self.run_jobs(p, spec, p.condor_start + life, killed)
                if not p.jobs:
                    p.kind = "no_match"
            p.exit_code = 0
            assert p.condor_end is not None
            p.last_script_end = p.condor_end + rng.randint(1, 3)
            p.glidein_end = p.last_script_end + rng.randint(2, 8)
        p.ended = p.glidein_end + rng.randint(30, 300)  # stage-out + gridmanager poll
        p.end_event = "terminated"

    def run_jobs(self, p: SimPilot, spec: EntrySpec, until: int, killed: bool) -> None:
        """Fill the pilot's slot with jobs; never oversubscribe cores, memory or GPUs."""
        rng = self.rng
        assert p.condor_start is not None
        owners = CLIENTS[next(k for k in spec.clients if CLIENTS[k].log_name == p.client)].owners
        free_c, free_m, free_g = p.cpus, p.memory_mb, p.gpus
        running: list[tuple[int, int, int, int, int]] = []  # (end, seq, cpus, mem, gpus)
        t = p.condor_start + rng.randint(20, 180)  # first negotiation cycle
        user_cluster = rng.randint(100_000, 9_000_000)
        last_end = t
        while t < until:
            while running and running[0][0] <= t:
                _, _, c, m, g = heapq.heappop(running)
                free_c, free_m, free_g = free_c + c, free_m + m, free_g + g
            placed = False
            for _ in range(3):  # the negotiator finds some fitting job, or gives up this cycle
                cpus, mem, gpus = self.draw_job_size(p, spec)
                prov = _quantize_mem(mem)
                if cpus <= free_c and prov <= free_m and gpus <= free_g:
                    placed = True
                    break
            if placed:
                job = self.draw_job_end(
                    p,
                    spec,
                    t,
                    cpus=cpus,
                    mem=mem,
                    gpus=gpus,
                    prov=prov,
                    owners=owners,
                    user_cluster=user_cluster,
                    until=until,
                    killed=killed,
                )
                user_cluster += rng.randint(1, 3)
                p.jobs.append(job)
                end = job.end if job.end is not None else until
                last_end = max(last_end, end)
                heapq.heappush(running, (end, len(p.jobs), cpus, prov, gpus))
                free_c, free_m, free_g = free_c - cpus, free_m - prov, free_g - gpus
                t += rng.randint(120, 600) if p.blackhole else rng.randint(1, 15)
            elif running:
                # Next negotiation cycle after a slot frees; black holes get re-matched slower
                # (the frontend's failed-job throttling), which also bounds their ad count.
                t = running[0][0] + (rng.randint(120, 600) if p.blackhole else rng.randint(10, 90))
            else:
                t += 300
        if killed and any(j.end is None for j in p.jobs):
            p.condor_killed = True
            p.condor_end = until + rng.randint(3, 30)
        else:
            # Retired: running jobs finish, then DAEMON_SHUTDOWN once idle.
            p.condor_end = max(until, last_end) + rng.randint(30, 300)

    def draw_job_size(self, p: SimPilot, spec: EntrySpec) -> tuple[int, int, int]:
        rng = self.rng
        r = rng.random()
        if p.gpus and r < 0.7:
            return _GPU_JOB_CPUS[int(r * 10) % 4], 8000, 1
        r = rng.random()
        if r < spec.memory_hungry:
            return 1, 6000, 0
        cpus = 1 if r < 0.6 else 2 if r < 0.72 else 4 if r < 0.88 else 8
        return cpus, cpus * _MB_PER_CORE[int(r * 1000) % 4], 0

    def draw_job_end(
        self,
        p: SimPilot,
        spec: EntrySpec,
        t: int,
        *,
        cpus: int,
        mem: int,
        gpus: int,
        prov: int,
        owners: tuple[str, ...],
        user_cluster: int,
        until: int,
        killed: bool,
    ) -> SimJob:
        rng = self.rng
        job = SimJob(
            user_cluster, rng.choice((0, 0, 0, 1, 2)), rng.choice(owners), t, None, cpus, mem, gpus, prov, "goodZ"
        )
        if p.blackhole:
            job.end = t + rng.randint(2, 60)
            if rng.random() < 0.7:
                job.kind, job.exit_signal = "badSignal", rng.choice((6, 11))
            else:
                job.kind = "badOther"
            return job
        dur = int(rng.uniform(*spec.job_hours) * 3600)
        if killed and t + dur > until:
            job.kind = "preempted"
            return job
        job.end = t + dur
        r = rng.random()
        if r < 0.88:
            job.exit_code = 0
        elif r < 0.96:
            job.kind, job.exit_code = "goodNZ", rng.choice((1, 2, 84, 137))
            job.end = t + max(5, dur // rng.randint(1, 10))
        else:
            job.kind, job.exit_signal = "badSignal", rng.choice((9, 15))
            job.end = t + max(5, dur // rng.randint(1, 4))
        return job

    # ------------------------------------------------------------------ texts
    def stats_block(
        self, p: SimPilot, shadow: str
    ) -> tuple[list[str], list[tuple[str, int]], dict[str, tuple[int, int]]]:
        """parse_starterlog.awk output, the metrics condor_startup.sh derives and the factory's parse."""
        fmt = p.stats_format
        if fmt is StatsFormat.EMPTY or fmt is None:
            return [], [], {}
        lines: list[str] = []
        n = {"goodZ": 0, "goodNZ": 0, "badSignal": 0, "badOther": 0}
        secs = dict.fromkeys(n, 0)
        for j in sorted(p.jobs, key=lambda j: (j.start, j.cluster, j.proc)):
            jid = f"{j.cluster}.{j.proc}"
            lines.append(f"{F.starterlog_time(j.start)} Starting job {jid} from {shadow}")
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
            lines.append(f"{F.starterlog_time(j.end)} Terminated job {jid} from {shadow} {reason} duration {dur}")
            n[j.kind] += 1
            secs[j.kind] += dur
        par = p.cpus
        ended = sum(n.values())
        used = sum(secs.values())

        def updiv(x: int) -> int:
            return int(x / par + 0.99)

        tj = updiv(ended)
        norm: dict[str, int] = {}
        tcnt = 0
        for k in ("goodNZ", "badSignal", "badOther", "goodZ"):  # awk's order: failures keep their share
            v = updiv(n[k])
            tcnt += v
            if tcnt > tj:
                v -= tcnt - tj
                tcnt = tj
            norm[k] = v

        def pct(a: int, b: int) -> str:
            return F.awk_num(a * 100 / b if b else 0)

        lines.append("=================")
        parsed: dict[str, tuple[int, int]] = {}
        metrics: list[tuple[str, int]] = [("TotalJobsNr", tj), ("TotalJobsTime", int(used / par))]
        if fmt is StatsFormat.REAL:
            lines.append(f"Normalization [parallelism] factor {par}")
            lines.append(f"(Real) Total jobs {ended} utilization {used}")
            lines.append(f"(Normalized) Total jobs {tj} utilization {int(used / par)}")
            parsed["Total"] = (ended, used)  # first match wins: the raw line
        else:
            lines.append(f"Total jobs {tj} utilization {int(used / par)}")
            parsed["Total"] = (tj, int(used / par))
        for k in ("goodZ", "goodNZ", "badSignal", "badOther"):
            u = int(secs[k] / par)
            if fmt is StatsFormat.REAL:
                lines.append(
                    f"(Normalized) Total {k} jobs {norm[k]} ({pct(n[k], ended)}%) utilization {u} "
                    f"({pct(secs[k], used)}%)"
                )
            else:
                lines.append(f"Total {k} jobs {norm[k]}  ({pct(n[k], ended)}%) utilization {u} ({pct(secs[k], used)}%)")
            parsed[k] = (norm[k], u)
            metrics += [(f"{k}JobsNr", norm[k]), (f"{k}JobsTime", u)]
        return lines, metrics, parsed

    def history(self, p: SimPilot, c: Client) -> bytes:
        """StartdHistoryLog: one ClassAd per job, each followed by its ``*** Offset`` banner."""
        assert p.condor_end is not None
        parts: list[str] = []
        offset = 0
        for j in sorted(p.jobs, key=lambda j: (j.start, j.cluster, j.proc)):
            status = 2 if j.end is None else 4
            completion = 0 if j.end is None else j.end
            wall = (p.condor_end if j.end is None else j.end) - j.start
            qdate = j.start - 3600
            ad = [
                f"BlockReadKbytes = {j.cpus * 1024}",
                f'GlobalJobId = "{c.submit_host}#{j.cluster}.{j.proc}#{qdate}"',
                f"ClusterId = {j.cluster}",
                f"ProcId = {j.proc}",
                f'Owner = "{j.owner}"',
                f"QDate = {qdate}",
                f"JobStatus = {status}",
                f"JobStartDate = {j.start}",
                f"JobCurrentStartDate = {j.start}",
                f"CompletionDate = {completion}",
                f"EnteredCurrentStatus = {j.start if j.end is None else j.end}",
                f"RequestCpus = {j.cpus}",
                f"RequestMemory = {j.memory_mb}",
                f"RequestGPUs = {j.gpus}",
                f"CpusProvisioned = {j.cpus}",
                f"MemoryProvisioned = {j.memory_provisioned}",
                f"GPUsProvisioned = {j.gpus}",
                f"RemoteWallClockTime = {wall}.0",
            ]
            if j.end is None:
                ad.append(f"LastVacateTime = {p.condor_end}")
            elif j.kind == "badOther":
                # Neither an exit code nor a signal: the starter lost the job (badOther).
                ad.append("ExitBySignal = false")
            elif j.exit_signal is not None:
                ad += ["ExitBySignal = true", f"ExitSignal = {j.exit_signal}"]
            else:
                ad += ["ExitBySignal = false", f"ExitCode = {j.exit_code}"]
            text = "\n".join(ad) + "\n"
            banner = (
                f'*** Offset = {offset} ClusterId = {j.cluster} ProcId = {j.proc} Owner = "{j.owner}" '
                f"CompletionDate = {completion}\n"
            )
            parts.append(text + banner)
            offset += len(text) + len(banner)
        return "".join(parts).encode()

    def script_times(self, p: SimPilot) -> list[tuple[str, int, int]]:
        """Per-script (name, start, end) covering the validation phase."""
        assert p.startup is not None and p.validation_end is not None
        scripts = list(_SCRIPTS)
        if p.failed_script is not None:
            idx = next(i for i, (n, _) in enumerate(scripts) if n == p.failed_script)
            scripts = scripts[: idx + 1]
        t0 = p.startup + 3  # descriptor and signature downloads
        span = p.validation_end - t0
        wsum = sum(w for _, w in scripts)
        out: list[tuple[str, int, int]] = []
        acc = 0.0
        for name, w in scripts:
            s = t0 + int(acc)
            acc += span * w / wsum
            out.append((name, s, t0 + int(acc)))
        return out

    def render(self, p: SimPilot, st: _EntryStatic, c: Client) -> tuple[bytes, bytes, dict[str, tuple[int, int]]]:
        """The .out and .err of a pilot whose output came back, and the stats the factory parses."""
        rng = self.rng
        spec = st.spec
        assert p.startup is not None and p.glidein_end is not None and p.validation_end is not None
        u = uuid.UUID(int=rng.getrandbits(128), version=4)
        host = f"wn{rng.randint(1, 999):03d}.{spec.site.lower()}.example.net"
        start_dir = (
            f"/var/lib/condor/execute/dir_{rng.randint(1000, 999999)}/{spec.gatekeeper}_9619_"
            f"{rng.randint(100000, 9999999)}.0_{p.startup - 60}"
        )
        work = f"{start_dir}/glide_{''.join(rng.choice('abcdefghijkLMNOPQRSTuvwxyz') for _ in range(6))}"
        cred = 400000 + rng.randint(0, 99999)
        o: list[str] = [
            f"Starting glidein_startup.sh at {F.date_cmd(p.startup)} ({p.startup})",
            f"script_checksum   = '1cda5e9ab12734279b46cb55a6e8d668  {start_dir}/glidein_startup.sh'",
            "debug_mode        = 'std'",
            f"condorg_cluster   = '{p.cluster}'",
            f"condorg_subcluster= '{p.proc}'",
            f"condorg_schedd    = '{SCHEDD}'",
            f"glidein_uuid      = '{u}'",
            f"glidein_credential_id = '{cred}'",
            f"glidein_factory   = '{FACTORY}'",
            f"glidein_name      = '{GLIDEIN_NAME}'",
            f"glidein_entry     = '{spec.name}'",
            f"client_name       = '{c.client_name}'",
            f"client_group      = '{c.group}'",
            "multi_glidein/restart = ''/''",
            "work_dir          = 'Condor'",
            "web_dir           = 'http://gfactory-2.opensciencegrid.org/factory/stage'",
            "sign_type         = 'sha1'",
            "proxy_url         = 'None'",
            "descript_fname    = 'description.q6a1b2.cfg'",
            "descript_entry_fname = 'description.q6a1b2.cfg'",
            "",
            f"Running on {host}",
            f"System: Linux {host} 5.14.0-427.el9.x86_64 #1 SMP x86_64 x86_64 x86_64 GNU/Linux",
            "Release: AlmaLinux release 9.4 (Seafoam Ocelot)",
            f"As: uid=43700({c.username}) gid=43700({c.username})",
            f"PID: {rng.randint(1000, 99999)}",
            "",
            f"Started in {start_dir}",
            f"Running in {work}",
            "PARAM_LIST GLIDEIN_Client,GLIDEIN_Collector,USE_MATCH_AUTH,CONDOR_OS,GLIDEIN_Max_Idle,CONDOR_VERSION",
            f"{F.date_cmd(p.startup + 1)}: Started logging stdout on file too",
            "Downloading files from Factory and Frontend",
        ]
        e: list[str] = []
        long_subtests: list[str] = []
        failed = p.failed_script
        for name, s, t in self.script_times(p):
            rel = name.replace("client_group/", f"client_group_{c.group}/").replace("entry/", f"entry_{spec.name}/")
            path = f"{work}/{rel}"
            o.append(f"Executing (flags:) {path}")
            metrics: list[tuple[str, str]] = list(_SCRIPT_METRICS.get(name, ()))
            if name == "main/glidein_memory_setup.sh":
                o.append(f"{F.date_cmd(t)} Setting GLIDEIN_MaxMemMBs={p.memory_mb}")
                metrics.append(("MaxMemMBs", str(p.memory_mb)))
            elif name == "main/glidein_cpus_setup.sh":
                o.append(f"{F.date_cmd(t)} Setting GLIDEIN_CPUS={p.cpus}")
                metrics.append(("GLIDEIN_CPUS", str(p.cpus)))
            is_fail = name == failed
            res = ["  <result>", f"    <status>{'ERROR' if is_fail else 'OK'}</status>"]
            if is_fail:
                cat, detail, extra = _FAILURES[name]
                res.append(F.metric("failure", cat, t))
                res.append(F.metric(extra[0], extra[1], t))
                res += ["  </result>", "  <detail>", f"     {detail}", "  </detail>"]
            else:
                res += [F.metric(k, v, t) for k, v in metrics]
                res.append("  </result>")
            long_subtests.append(self.otrx(name, work, f"{path} glidein_config", s, t, result=res))
            if is_fail:
                e.append(f"=== Validation error in {path} ===")
                e.append(f"{F.date_cmd(t)} Error running '{path}'")
                e.append(f"     {_FAILURES[name][1]}")
            else:
                e.append(f"=== validation OK in {path} (0) ===")
        parsed: dict[str, tuple[int, int]] = {}
        if failed is None:
            assert p.condor_start is not None and p.condor_end is not None
            cs, ce = p.condor_start, p.condor_end
            last_end = p.last_script_end
            assert last_end is not None
            o += [
                "Condor tarball does not need to be fixed",
                f"=== Last script starting {F.date_cmd(p.validation_end)} ({p.validation_end}) after validating "
                f"for {p.validation_end - p.startup} ===",
                "",
                f"=== Condor starting {F.date_cmd(cs)} ({cs}) ===",
                f"=== Condor started in background, now waiting on process {rng.randint(1000, 99999)} ===",
                f"=== Condor ended {F.date_cmd(ce)} ({ce}) after {ce - cs} ===",
                "",
                "Total jobs/goodZ jobs/goodNZ jobs/badSignal jobs/badOther jobs below are normalized to 1 Core",
                "=== Stats of main ===",
            ]
            shadow = f"{c.submit_host}:9618?addrs=188.184.0.10-9618&noUDP&sock=shadow_{rng.randint(100, 9999)}"
            stat_lines, stat_metrics, parsed = self.stats_block(p, shadow)
            o += stat_lines
            o += [
                "=== End Stats of main ===",
                f"Total number of activations/claims: {len(p.jobs)}",
                "",
                f"=== Last script ended {F.date_cmd(last_end)} ({last_end}) with code 0 after "
                f"{last_end - p.validation_end} ===",
                "",
            ]
            auto = not p.condor_killed
            cond_metrics: list[tuple[str, object]] = [("AutoShutdown", auto), ("CondorDuration", ce - cs)]
            cond_metrics += stat_metrics
            cond_metrics.append(("CondorKilled", p.condor_killed))
            res = [
                "  <result>",
                "    <status>OK</status>",
                *(F.metric(k, v, last_end) for k, v in cond_metrics),
                "  </result>",
            ]
            long_subtests.append(
                self.otrx(
                    "condor_startup.sh",
                    work,
                    f"{work}/main/condor_startup.sh glidein_config",
                    p.validation_end,
                    last_end,
                    result=res,
                )
            )
            top_result = [
                "  <result>",
                "    <status>OK</status>",
                *(F.metric(k, v, last_end) for k, v in cond_metrics),
                "  </result>",
            ]
            t_end = last_end
            e += self.condor_err(p, st, c, u, work)
        else:
            fail_t = self.script_times(p)[-1][2]
            t_end = p.glidein_end - rng.randint(1, 3)
            cat, detail, extra = _FAILURES[failed]
            top_result = [
                "  <result>",
                "    <status>ERROR</status>",
                F.metric("TestID", failed, t_end),
                F.metric("failure", cat, fail_t),
                F.metric(extra[0], extra[1], fail_t),
                "  </result>",
                "  <detail>",
                f"     Validation failed in {failed}.",
                "",
                f"     {detail}",
                "  </detail>",
            ]
            t = fail_t
            while t < p.glidein_end - 5:
                ds = min(250 + rng.randint(0, 99), p.glidein_end - 5 - t)
                e.append(f"{F.date_cmd(t)} Sleeping {ds}")
                t += ds
        o.append(
            f"=== Glidein ending {F.date_cmd(p.glidein_end)} ({p.glidein_end}) with code {p.exit_code} after "
            f"{p.glidein_end - p.startup} ==="
        )
        o.append("")
        envs = [
            f'    <env name="client_name">{c.client_name}</env>',
            f'    <env name="client_group">{c.group}</env>',
            f'    <env name="user">{c.username}</env>',
            '    <env name="arch">x86_64</env>',
            '    <env name="os">AlmaLinux release 9.4 (Seafoam Ocelot)</env>',
            f'    <env name="hostname">{host}</env>',
            f'    <env name="cwd">{start_dir}</env>',
        ]
        test = [
            "  <test>",
            f"    <tStart>{F.iso_local(p.startup)}</tStart>",
            f"    <tEnd>{F.iso_local(t_end)}</tEnd>",
            "  </test>",
        ]
        head = ['<?xml version="1.0"?>', '<OSGTestResult id="glidein_startup.sh" version="4.3.1">']
        simple = [
            *head,
            "  <operatingenvironment>",
            *envs,
            "  </operatingenvironment>",
            *test,
            *top_result,
            "</OSGTestResult>",
        ]
        o += ["=== XML description of glidein activity ===", *simple, "=== End XML description of glidein activity ==="]
        cmd = (
            f"    <cmd>{start_dir}/glidein_startup.sh -v std -name {GLIDEIN_NAME} -entry {spec.name} "
            f"-clientname {c.client_name} -schedd {SCHEDD} -cluster {p.cluster} -subcluster {p.proc}</cmd>"
        )
        long_xml = [
            *head,
            "  <subtestlist>",
            "    <OSGTestResults>",
            *("\n".join("      " + ln for ln in s.split("\n")) for s in long_subtests),
            "    </OSGTestResults>",
            "  </subtestlist>",
            "  <operatingenvironment>",
            f'    <env name="glidein_factory">{FACTORY}</env>',
            f'    <env name="glidein_name">{GLIDEIN_NAME}</env>',
            f'    <env name="glidein_entry">{spec.name}</env>',
            f'    <env name="condorg_cluster">{p.cluster}</env>',
            f'    <env name="condorg_subcluster">{p.proc}</env>',
            f'    <env name="glidein_credential_id">{cred}</env>',
            f'    <env name="condorg_schedd">{SCHEDD}</env>',
            *envs,
            "  </operatingenvironment>",
            test[0],
            cmd,
            *test[1:],
            *top_result,
            "</OSGTestResult>",
        ]
        # print_tail: gzip | b64uuencode with no section-name/frame line (cat_XMLResult.py's shape).
        framed = encode("x", ("\n".join(long_xml) + "\n").encode())
        body = framed[framed.index(b"begin-base64") :]
        err = ("\n".join(e) + "\n=== Exit messages left by periodic scripts ===\n\n").encode()
        if T.returns_spool(self.seed, p.cluster, p.proc):  # gwms_trace_flush in glidein_exit, before print_tail
            err += encode(TRACE_SECTION, self.trace_spool(p, st, c, u, host))
        err += b"=== Encoded XML description of glidein activity ===\n"
        err += body + b"=== End encoded XML description of glidein activity ===\n"
        return ("\n".join(o) + "\n").encode(), err, parsed

    def trace_spool(self, p: SimPilot, st: _EntryStatic, c: Client, u: uuid.UUID, host: str) -> bytes:
        """The gwms-trace.sh spool of a pilot that could not reach the collector (simulate/traces.py)."""
        assert p.startup is not None and p.glidein_end is not None and p.exit_code is not None
        main = None
        if p.failed_script is None:
            assert p.validation_end is not None and p.last_script_end is not None
            main = (p.validation_end, p.last_script_end)
        resource: dict[str, str | int] = {
            "service.name": "glidein", "gwms.conventions": "1", "host.name": host, "gwms.factory": FACTORY,
            "gwms.entry": st.spec.name, "gwms.client": c.client_name, "gwms.site": st.spec.site,
            "gwms.glidein.uuid": str(u), "gwms.condor.cluster": p.cluster, "gwms.condor.proc": p.proc,
        }  # fmt: skip
        return T.spool(
            seed=self.seed, cluster=p.cluster, proc=p.proc, resource=resource, startup=p.startup,
            glidein_end=p.glidein_end, scripts=self.script_times(p), failed=p.failed_script, main=main,
            exit_code=p.exit_code,
        )  # fmt: skip

    @staticmethod
    def otrx(name: str, cwd: str, cmd: str, s: int, t: int, *, result: list[str]) -> str:
        """One script's otrx_output.xml as error_augment.sh -concat appends it (no <?xml line)."""
        return "\n".join(
            [
                f'<OSGTestResult id="{name}" version="4.3.1">',
                "  <operatingenvironment>",
                f'    <env name="cwd">{cwd}</env>',
                "  </operatingenvironment>",
                "  <test>",
                f"      <cmd>{cmd}</cmd>",
                f"      <tStart>{F.iso_local(s)}</tStart>",
                f"      <tEnd>{F.iso_local(t)}</tEnd>",
                "  </test>",
                *result,
                "</OSGTestResult>",
            ]
        )

    def condor_err(self, p: SimPilot, st: _EntryStatic, c: Client, u: uuid.UUID, work: str) -> list[str]:
        """condor_startup.sh's stderr: config dump, GPU discovery, framed HTCondor logs."""
        spec = st.spec
        cfg = [
            f"GLIDEIN_Factory {FACTORY}",
            f"GLIDEIN_Name {GLIDEIN_NAME}",
            f"GLIDEIN_Entry_Name {spec.name}",
            f"GLIDECLIENT_Name {c.client_name}",
            f"GLIDECLIENT_Group {c.group}",
            f"CONDORG_CLUSTER {p.cluster}",
            f"CONDORG_SUBCLUSTER {p.proc}",
            f"CONDORG_SCHEDD {SCHEDD}",
            "DEBUG_MODE 1",
            f"GLIDEIN_UUID {u}",
            f"GLIDEIN_WORK_DIR {work}/main",
            f"GLIDEIN_Site {spec.site}",
            f"GLIDEIN_ResourceName {spec.site}",
            f"GLIDEIN_Gatekeeper {spec.gatekeeper} {spec.gatekeeper}:9619",
            "GLIDEIN_Report_Failed NEVER",
            f"GLIDEIN_Max_Idle {MAX_IDLE}",
            "CONDOR_VERSION 23.0.8",
            "GLIDEIN_ESTIMATED_CPUS 1",
            f"GLIDEIN_CPUS {p.cpus}",
            f"GLIDEIN_MaxMemMBs {p.memory_mb}",
            f"MEMORY {p.memory_mb}",
        ]
        if p.gpus:
            cfg.append(f"GLIDEIN_Resource_Slots GPUs,{p.gpus},type=main")
        cfg += ["GLIDEIN_INITIALIZED 1", "# --- Last Script values ---"]
        e = ["-------- glidein_config in condor_startup.sh ----------", *cfg, CONFIG_DASHES]
        if p.gpus:
            ids = ", ".join(f"GPU-{self.rng.getrandbits(32):08x}" for _ in range(p.gpus))
            e.append(f'condor_gpu_discovery found {p.gpus} GPUs: DetectedGPUs="{ids}"')
        else:
            e.append("No GPUs found with condor_gpu_discovery, setting them to 0")
        if p.stats_format is StatsFormat.EMPTY:
            e.append("One/more HTCondor starter logs missing; skipping calculation of metrics")
            e.append("Proceeding with rest of the condor shutdown process...")
        sections = st.master + st.startd
        if p.jobs:
            sections += encode("StartdHistoryLog", self.history(p, c))
        e.append(sections.decode().rstrip("\n"))
        return e

    # ------------------------------------------------------------------ completed_jobs
    @staticmethod
    def completed(p: SimPilot, parsed: dict[str, tuple[int, int]]) -> tuple[float, ...] | None:
        """get_completed_stats() on this pilot; None where the factory raises KeyError (#60)."""
        assert p.glidein_end is not None and p.startup is not None
        duration: float = p.glidein_end - p.startup
        if p.condor_start is None or p.condor_end is None:
            return (duration, 0, 0, 0, 0, 0, 0, 1000, 0, 0, 1000)
        cdur = p.condor_end - p.condor_start
        duration = max(duration, cdur)
        if cdur < 5:
            return (duration, 1, cdur, 0, 0, 0, 0, 1000, 0, 0, 1000)
        if "Total" not in parsed:
            return None
        assert p.validation_end is not None
        jobsnr, jdur = parsed["Total"]
        goodput = min(parsed["goodZ"][1], jdur)
        term = min(goodput + parsed["goodNZ"][1], jdur)
        val = 1000.0 * (p.validation_end - p.startup) / duration
        idle = 1000.0 * (cdur - jdur) / cdur
        nos = 1000.0 * (jdur - goodput) / jdur if jdur > 0 else 0
        bad = 1000.0 * (duration - term) / duration
        return (duration, 1, cdur, jobsnr, jdur, goodput, term, val, idle, nos, bad)

    # ------------------------------------------------------------------ event log
    def events(self, p: SimPilot, st: _EntryStatic) -> list[tuple[int, str]]:
        legacy = st.spec.legacy_eventlog
        jid = f"({p.cluster}.{p.proc:03d}.000)"
        rng = self.rng

        def ev(code: str, t: int, body: str) -> tuple[int, str]:
            return t, f"{code} {jid} {F.eventlog_time(t, legacy)} {body}...\n"

        out = [
            ev("000", p.submitted, f"Job submitted from host: {SCHEDD_ADDR}\n"),
            ev(
                "027",
                p.grid_submitted,
                f"Job submitted to grid resource\n    GridResource: {st.grid_resource}\n"
                f"    GridJobId: {st.grid_resource} {rng.randint(100000, 9999999)}.0\n",
            ),
        ]
        assert p.executing is not None and p.ended is not None
        out.append(ev("001", p.executing, f"Job executing on host: {st.grid_resource}\n"))
        if p.end_event == "terminated":
            usage = "Usr 0 00:00:00, Sys 0 00:00:00"
            out.append(
                ev(
                    "005",
                    p.ended,
                    (
                        f"Job terminated.\n\t(1) Normal termination (return value {p.exit_code})\n"
                        f"\t\t{usage}  -  Run Remote Usage\n\t\t{usage}  -  Run Local Usage\n"
                        f"\t\t{usage}  -  Total Remote Usage\n\t\t{usage}  -  Total Local Usage\n"
                        "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
                        "\t0  -  Total Bytes Sent By Job\n\t0  -  Total Bytes Received By Job\n"
                    ),
                )
            )
        else:
            if p.held is not None:
                held = "Job was held.\n\tThe job's remote status is unknown\n\tCode 0 Subcode 0\n"
                out.append(ev("012", p.held, held))
            out.append(ev("009", p.ended, f"Job was aborted.\n\tvia condor_rm (by user {p.username})\n"))
        return out


def _kind_of_running(p: SimPilot, now: int) -> str:
    """Factory queue state of a pilot at ``now`` (schedd_status.xml Status attribute)."""
    if p.executing is not None and p.executing <= now:
        return "Running"
    return "Pending" if p.grid_submitted <= now else "Wait"


def simulate(
    out: Path,
    pilots: int,
    seed: int,
    *,
    start: float | None = None,
    entries: Sequence[EntrySpec] = DEFAULT_ENTRIES,
    progress: Callable[[int], None] | None = None,
    span_hours: float = 48.0,
    ground_truth: bool = False,
) -> SimulationSummary:
    """Write a factory log tree for ``pilots`` glideins submitted over ``span_hours``.

    ``progress`` receives increments (pilots done since the last call), so
    ``tqdm.update`` fits. ``ground_truth=True`` keeps every ``SimPilot`` (with
    its jobs) in the summary; leave it off for big benchmark runs.
    """
    t0 = DEFAULT_START if start is None else int(start)
    sim = _Sim(Path(out), seed, t0, int(span_hours * 3600), entries)
    base = sim.out
    base.mkdir(parents=True, exist_ok=True)
    all_pilots = sim.skeleton(pilots)
    by_entry_pilots: dict[str, list[SimPilot]] = defaultdict(list)
    for p in all_pilots:
        by_entry_pilots[p.entry].append(p)
    by_entry: dict[str, Counter[str]] = {}
    by_kind: Counter[str] = Counter()
    now = sim.snapshot
    done_since = 0
    kept: list[SimPilot] = []
    for spec in entries:
        st = _EntryStatic(spec, base)
        counts: Counter[str] = Counter()
        evlogs: dict[Path, list[tuple[int, int, str]]] = defaultdict(list)
        completed: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
        queue: dict[str, Counter[str]] = defaultdict(Counter)
        client_keys = {CLIENTS[k].log_name: k for k in spec.clients}
        for seq, p in enumerate(by_entry_pilots[spec.name]):
            sim.plan(p, spec)
            ckey = client_keys[p.client]
            c = CLIENTS[ckey]
            assert p.ended is not None
            evs = sim.events(p, st)
            if p.ended > now:  # still queued or running at the snapshot
                p.kind = "in_queue"
                state = _kind_of_running(p, now)
                queue[p.client][state] += 1
                if state == "Running" and p.condor_start is not None and p.condor_start <= now:
                    queue[p.client]["GlideTotal"] += 1
                    busy = any(j.start <= now and (j.end is None or j.end > now) for j in p.jobs)
                    queue[p.client]["GlideRunning" if busy else "GlideIdle"] += 1
                    queue[p.client]["CoresTotal"] += p.cpus
                    queue[p.client]["JobsRunHere"] += sum(
                        1 for j in p.jobs if j.start <= now and (j.end is None or j.end > now)
                    )
                    queue[p.client]["CoresRunning"] += sum(
                        j.cpus for j in p.jobs if j.start <= now and (j.end is None or j.end > now)
                    )
            fname = st.dirs[ckey] / f"condor_activity_{F.day_stamp(p.submitted)}_{c.client_name}.log"
            for t, text in evs:
                if t <= now:
                    evlogs[fname].append((t, seq, text))
            if p.kind not in ("lost", "in_queue"):
                out_b, err_b, parsed = sim.render(p, st, c)
                stem = st.dirs[ckey] / f"job.{p.cluster}.{p.proc}"
                with open(f"{stem}.out", "wb") as f:
                    f.write(out_b)
                with open(f"{stem}.err", "wb") as f:
                    f.write(err_b)
                sim.files += 2
                sim.bytes += len(out_b) + len(err_b)
                p.has_out = True
                counts["out_files"] += 1
                vals = sim.completed(p, parsed)
                if vals is not None:
                    term = min(p.ended + sim.rng.randint(60, 900), now)
                    jid = f"{p.cluster}.{p.proc:03d}" if spec.py2_ids else f"b'{p.cluster}.{p.proc:03d}'"
                    line = F.completed_line(term, p.client, p.username, jid, vals)
                    completed[F.day_stamp(term)].append((term, seq, line))
                    p.completed_line = True
                    counts["completed_lines"] += 1
            counts[p.kind] += 1
            counts["pilots"] += 1
            counts["jobs"] += len(p.jobs)
            if p.blackhole and p.kind == "ran_jobs":
                counts["blackhole"] += 1
            by_kind[p.kind] += 1
            if ground_truth:
                kept.append(p)
            else:
                p.jobs = []
            done_since += 1
            if progress is not None and done_since >= 1000:
                progress(done_since)
                done_since = 0
        for path, items in evlogs.items():
            items.sort()
            data = "".join(text for _, _, text in items).encode()
            path.write_bytes(data)
            sim.files += 1
            sim.bytes += len(data)
        for day, items in completed.items():
            items.sort()
            data = "".join(text for _, _, text in items).encode()
            (st.server / f"completed_jobs_{day}.log").write_bytes(data)
            sim.files += 1
            sim.bytes += len(data)
        sim.bytes += _write_monitor(st, now, queue, sim.rng)
        sim.files += 2
        by_entry[spec.name] = counts
    sim.bytes += _write_factory_descript(base, entries, now)
    sim.files += 1
    if progress is not None and done_since:
        progress(done_since)
    return SimulationSummary(
        base, seed, t0, now, len(all_pilots), by_entry, by_kind, sim.files, sim.bytes, kept if ground_truth else None
    )


# ---------------------------------------------------------------------- monitor XML
def _entry_xml_parts(spec: EntrySpec) -> tuple[str, str, str]:
    cpus = spec.cpus[0] if len(spec.cpus) == 1 else "auto"
    mem = spec.memory_mb if spec.memory_mb is not None else spec.cpus[0] * spec.mem_per_core
    attrs: list[tuple[str, object]] = [
        ("GLIDEIN_Site", spec.site),
        ("GLIDEIN_ResourceName", spec.site),
        ("GLIDEIN_CPUS", cpus),
        ("GLIDEIN_ESTIMATED_CPUS", spec.cpus[0]),
        ("GLIDEIN_MaxMemMBs", mem),
        # GLIDEIN_ToDie = start + this: no pilot of the entry outlives it (plus its shutdown)
        ("GLIDEIN_Max_Walltime", int((spec.lifetime_h[1] + 2) * 3600)),
        ("GLIDEIN_Gatekeeper", f"{spec.gatekeeper} {spec.gatekeeper}:9619"),
        ("GLIDEIN_GridType", "condor"),
        ("GLIDEIN_SlotsLayout", "partitionable"),
        ("GLIDEIN_Supported_VOs", "CMS,Fermilab,OSGVO"),
        ("GLIDEIN_TrustDomain", "grid"),
        ("GLIDEIN_Verbosity", "std"),
        ("GLIDEIN_WorkDir", "Condor"),
        ("USE_CCB", "True"),
    ]
    if spec.gpus != (0,):
        attrs.append(("GLIDEIN_Resource_Slots", f"GPUs,{max(spec.gpus)},type=main"))
    descript: list[tuple[str, object]] = [
        ("AuthMethod", "scitoken"),
        ("DefaultPerFrontendMaxGlideins", 5000),
        ("DefaultPerFrontendMaxHeld", 50),
        ("DefaultPerFrontendMaxIdle", 100),
        ("Gatekeeper", f"{spec.gatekeeper} {spec.gatekeeper}:9619"),
        ("GridType", "condor"),
        ("PerEntryMaxGlideins", 10000),
        ("PerEntryMaxHeld", 1000),
        ("PerEntryMaxIdle", 2000),
        ("StartupDir", "Condor"),
        ("SubmitCluster", 10),
        ("SubmitSlotsLayout", "partitionable"),
        ("TrustDomain", "grid"),
        ("Verbosity", "std"),
    ]
    params: list[tuple[str, object]] = [
        ("CONDOR_ARCH", "default"),
        ("CONDOR_OS", "auto"),
        ("CONDOR_VERSION", "23.0.8"),
        ("GLIDEIN_Max_Idle", MAX_IDLE),
        ("GLIDEIN_Report_Failed", "NEVER"),
    ]
    return F.xml_attrs(attrs), F.xml_attrs(descript), F.xml_attrs(params)


def _write_monitor(st: _EntryStatic, now: int, queue: dict[str, Counter[str]], rng: random.Random) -> int:
    """Entry schedd_status.xml (queue at the snapshot) and descript.xml."""
    spec = st.spec
    a, d, pr = _entry_xml_parts(spec)
    descript = (
        '<?xml version="1.0" encoding="ISO-8859-1"?>\n\n<glideFactoryEntryDescript>\n'
        f"{F.updated_block(now)}\n"
        f'   <entry name="{spec.name}">\n      <attributes {a}/>\n      <descript {d}/>\n      <params {pr}/>\n'
        "   </entry>\n</glideFactoryEntryDescript>"
    )
    exp_cores = spec.cpus[0]
    fe_xml: list[str] = []
    tot_status: Counter[str] = Counter()
    tot_req: Counter[str] = Counter()
    tot_cm: Counter[str] = Counter()
    for key in spec.clients:
        c = CLIENTS[key]
        q = queue.get(c.log_name, Counter())
        status = {
            "Wait": q["Wait"],
            "Pending": q["Pending"],
            "StageIn": 0,
            "IdleOther": 0,
            "Running": q["Running"],
            "StageOut": 0,
            "Held": 0,
        }
        status["Idle"] = status["Wait"] + status["Pending"] + status["StageIn"] + status["IdleOther"]
        status["RunningCores"] = status["Running"] * exp_cores
        req_idle = rng.randint(0, 50) if spec.idle_jobs else 0
        req = {
            "Idle": req_idle,
            "AdjustedIdle": req_idle,
            "MaxGlideins": 300,
            "IdleCores": req_idle * exp_cores,
            "MaxCores": 300 * exp_cores,
        }
        jobs_idle = rng.randint(spec.idle_jobs // 2, spec.idle_jobs) if spec.idle_jobs else 0
        cm = {
            "CoresIdle": q["CoresTotal"] - q["CoresRunning"],
            "CoresRunning": q["CoresRunning"],
            "CoresTotal": q["CoresTotal"],
            "GlideIdle": q["GlideIdle"],
            "GlideRunning": q["GlideRunning"],
            "GlideTotal": q["GlideTotal"],
            "InfoAge": rng.randint(20, 300),
            "JobsIdle": jobs_idle,
            "JobsRunHere": q["JobsRunHere"],
            "JobsRunning": q["JobsRunHere"] + rng.randint(0, 50),
        }
        tot_status.update(status)
        tot_req.update(req)
        tot_cm.update({k: v for k, v in cm.items() if k != "InfoAge"})
        tot_cm["InfoAge"] = max(tot_cm["InfoAge"], cm["InfoAge"])
        fe_xml.append(
            f'      <frontend name="{c.log_name}">\n'
            f"         <ClientMonitor {F.xml_attrs(cm.items())}/>\n"
            '         <Downtime status="False"/>\n'
            f"         <Requested {F.xml_attrs(req.items())}>\n            <Parameters>\n            </Parameters>\n"
            "         </Requested>\n"
            f"         <Status {F.xml_attrs(status.items())}/>\n"
            "         <StatusEntries/>\n"
            "      </frontend>\n"
        )
    schedd = (
        '<?xml version="1.0" encoding="ISO-8859-1"?>\n\n<glideFactoryEntryQStats>\n'
        f"{F.updated_block(now)}\n"
        '   <downtime status="False">\n   </downtime>\n'
        "   <frontends>\n" + "".join(fe_xml) + "   </frontends>\n"
        "   <total>\n"
        f"      <ClientMonitor {F.xml_attrs(tot_cm.items())}/>\n"
        f"      <Requested {F.xml_attrs(tot_req.items())}/>\n"
        f"      <Status {F.xml_attrs(tot_status.items())}/>\n"
        "   </total>\n</glideFactoryEntryQStats>\n"
    )
    b1, b2 = descript.encode(), schedd.encode()
    (st.monitor / "descript.xml").write_bytes(b1)
    (st.monitor / "schedd_status.xml").write_bytes(b2)
    return len(b1) + len(b2)


def _write_factory_descript(base: Path, entries: Sequence[EntrySpec], now: int) -> int:
    """Factory-level monitor/descript.xml (<glideFactoryDescript>, Descript2XML)."""
    factory = F.xml_attrs(
        [
            ("AdvertiseDelay", 5),
            ("FactoryName", FACTORY),
            ("GlideinName", GLIDEIN_NAME),
            ("LoopDelay", 60),
            ("PubKeyType", "RSA"),
            ("WebURL", "http://gfactory-2.opensciencegrid.org/factory/stage"),
        ]
    )
    parts = [
        '<?xml version="1.0" encoding="ISO-8859-1"?>\n\n<glideFactoryDescript>\n',
        F.updated_block(now),
        "\n",
        f"   <factory {factory}/>\n",
        "   <entries>\n",
    ]
    for spec in entries:
        a, d, pr = _entry_xml_parts(spec)
        parts.append(
            f'      <entry name="{spec.name}">\n         <attributes {a}/>\n         <descript {d}/>\n'
            f"         <params {pr}/>\n      </entry>\n"
        )
    parts.append("   </entries>\n   <frontends>\n")
    for c in sorted(CLIENTS.values(), key=lambda c: c.log_name):
        parts.append(f'      <frontend name="{c.log_name}" ident="{c.client_name.split(".")[0]}"/>\n')
    parts.append("   </frontends>\n</glideFactoryDescript>")
    data = "".join(parts).encode()
    (base / "monitor").mkdir(parents=True, exist_ok=True)
    (base / "monitor" / "descript.xml").write_bytes(data)
    return len(data)
