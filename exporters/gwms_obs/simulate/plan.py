"""The random plan: every pilot's fate, timeline and jobs, and the details of the node it ran on.

All randomness of the simulator is drawn here, from one ``random.Random(seed)``
stream, in a fixed order: the submission skeleton, then per pilot its fate
(``plan``), its grid job id, the node it ran on (pilots whose output came
back) and when the factory logged it completed; per entry, what its frontends
report. The writers (``simulate/write``) only render what is drawn here, so the
order of the draws below is what keeps a seed's tree byte-for-byte the same.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..model import StatsFormat
from .scenario import (
    CLIENTS,
    FIRST_CLUSTER,
    MAX_IDLE,
    SCRIPT_FAILURES,
    VALIDATION_FAIL_SLEEP,
    VALIDATION_SCRIPTS,
    Client,
    EntrySpec,
    client_of,
    outage,
)
from .usage import Usage


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
    usage: Usage | None = None  # what its ad reports it used (``usage.fill``)


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
    slow_script: str | None = None  # the entry's slow validation script (EntrySpec.slow_script) ...
    slow_factor: float = 1.0  # ... and how many times its usual share of the validation it takes
    has_out: bool = False
    completed_line: bool = False
    refused: bool = False  # held at submission by a CE refusing the factory (EntrySpec.refuse): no 027, no 001
    ce_down: tuple[int, int] | None = None  # the 026 and 025 the gridmanager wrote for it (EntrySpec.ce_down_hours)
    jobs: list[SimJob] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WorkerNode:
    """Where a pilot whose output came back ran, and the random details its .out/.err print."""

    uuid: uuid.UUID  # GLIDEIN_UUID
    host: str
    start_dir: str  # the batch job's directory (glidein_startup.sh's cwd)
    work_dir: str  # the glidein's glide_XXXXXX under it
    credential_id: int
    pid: int  # glidein_startup.sh
    condor_pid: int | None  # condor_master, when condor started
    shadow: str | None  # the VO schedd's shadow address its jobs came from, when condor started
    gpu_ids: tuple[str, ...]  # what condor_gpu_discovery found, when condor started
    result_end: int  # tEnd of glidein_startup.sh's own result
    sleeps: tuple[tuple[int, int], ...]  # (start, seconds) of the sleep after a failed validation


@dataclass(frozen=True, slots=True)
class FrontendReport:
    """What one frontend client tells the entry at the snapshot (schedd_status.xml's random numbers)."""

    requested_idle: int  # glideins the frontend asks for
    jobs_idle: int  # its idle user jobs matching the entry
    info_age: int  # seconds since its last update
    jobs_running_elsewhere: int  # its running jobs on other entries' glideins


_GPU_JOB_CPUS = (1, 1, 2, 4)
_MB_PER_CORE = (2000, 2000, 1900, 2500)


def _split(total: int, weights: Sequence[float]) -> list[int]:
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


def _scripts_run(p: SimPilot) -> list[tuple[str, float]]:
    """(name, weight) of the validation scripts the pilot ran, up to the failed one; the slow one weighs more."""
    scripts: list[tuple[str, float]] = list(VALIDATION_SCRIPTS)
    if p.failed_script is not None:
        idx = next(i for i, (n, _) in enumerate(scripts) if n == p.failed_script)
        scripts = scripts[: idx + 1]
    if p.slow_script is not None:
        scripts = [(n, w * p.slow_factor if n == p.slow_script else w) for n, w in scripts]
    return scripts


def script_times(p: SimPilot) -> list[tuple[str, int, int]]:
    """Per-script (name, start, end) covering the validation phase (up to the failed script)."""
    assert p.startup is not None and p.validation_end is not None
    scripts = _scripts_run(p)
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


def script_path(node: WorkerNode, name: str, client: Client, spec: EntrySpec) -> str:
    """Where glidein_startup.sh ran a validation script: client_group/ and entry/ name their directory."""
    rel = name.replace("client_group/", f"client_group_{client.group}/").replace("entry/", f"entry_{spec.name}/")
    return f"{node.work_dir}/{rel}"


class Planner:
    """The seeded random stream and the span of submissions it plans pilots over."""

    TAIL = 3 * 3600  # seconds from the last submission to the snapshot

    def __init__(self, seed: int, start: int, span: int, entries: Sequence[EntrySpec]) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.start = start
        self.span = span
        self.snapshot = start + span + self.TAIL  # submissions stop 3 h before
        self.entries = entries

    def skeleton(self, pilots: int) -> list[SimPilot]:
        """Submission clusters per entry, then factory-wide cluster ids in submit order."""
        rng = self.rng
        clusters: list[tuple[int, int, int, str, int]] = []  # (t, entry idx, n, client key, order)
        counts = _split(pilots, [e.weight for e in self.entries])
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
        self._fate(p, spec)
        if spec.ce_down_hours:
            down, up = outage(spec, self.snapshot)
            assert p.ended is not None
            if p.submitted < up and p.ended > down:  # the gridmanager had it when the CE went down
                p.ce_down = (max(down, p.submitted), up)

    def _fate(self, p: SimPilot, spec: EntrySpec) -> None:
        rng = self.rng
        p.grid_submitted = p.submitted + rng.randint(2, 40)
        p.cpus = rng.choice(spec.cpus)
        p.memory_mb = spec.memory_mb if spec.memory_mb is not None else p.cpus * spec.mem_per_core
        p.gpus = rng.choice(spec.gpus)
        queue = int(rng.expovariate(1 / 1800)) + 30
        # The troubles draw nothing unless the entry has them: other entries' streams stay as they were.
        if spec.queue_slow != 1.0 and p.submitted >= self.start + self.span * spec.queue_slow_from:
            queue = int(queue * spec.queue_slow)
        if spec.ce_down_hours:
            down, up = outage(spec, self.snapshot)
            if down <= p.grid_submitted < up:  # nothing reaches the CE: the glidein waits idle
                p.grid_submitted = up + (p.grid_submitted - p.submitted)
        p.startup = p.grid_submitted + queue
        if spec.refuse and rng.random() < spec.refuse:
            # The GAHP's submit fails authentication: the gridmanager holds it at once; GlideinWMS
            # removes unrecoverable held glideins hours later.
            p.kind, p.refused, p.end_event = "lost", True, "held"
            p.held = p.grid_submitted
            p.ended = p.held + rng.randint(3 * 3600, 12 * 3600)
            p.executing = p.startup + rng.randint(5, 90)  # never written: it never ran
            return
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
        if r < self.validation_failure(p, spec):
            p.kind = "validation_failed"
            names = list(SCRIPT_FAILURES)
            p.failed_script = rng.choice(names)
            p.validation_end = p.startup + self.slowed(p, spec, validation)
            p.glidein_end = p.validation_end + VALIDATION_FAIL_SLEEP + rng.randint(1, 6)
            p.exit_code = 1
        else:
            p.validation_end = p.startup + self.slowed(p, spec, validation)
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

    def validation_failure(self, p: SimPilot, spec: EntrySpec) -> float:
        """The entry's validation-failure share when the pilot was submitted (``drift`` raises it over the span)."""
        if not spec.drift:
            return spec.validation_failure
        frac = min(1.0, max(0.0, (p.submitted - self.start) / self.span)) if self.span > 0 else 1.0
        return spec.validation_failure + spec.drift * frac

    @staticmethod
    def slowed(p: SimPilot, spec: EntrySpec, validation: int) -> int:
        """The validation time once the entry's slow script (if the pilot ran it) takes its factor.

        ``validation`` is the time drawn for the usual scripts; every other script
        keeps its usual share (``script_times``), the slow one takes factor x its
        share, so the phase grows by (factor - 1) x that share. No draws: a tree
        without a slow script is unchanged.
        """
        if not spec.slow_script:
            return validation
        p.slow_script, p.slow_factor = spec.slow_script, spec.slow_script_factor
        scripts = _scripts_run(p)
        if all(n != p.slow_script for n, _ in scripts):
            return validation  # failed before reaching it
        usual = sum(w for n, w in scripts if n != p.slow_script) + dict(VALIDATION_SCRIPTS)[p.slow_script]
        slow = sum(w for _, w in scripts)
        return 3 + round((validation - 3) * slow / usual)

    def run_jobs(self, p: SimPilot, spec: EntrySpec, until: int, killed: bool) -> None:
        """Fill the pilot's slot with jobs; never oversubscribe cores, memory or GPUs."""
        rng = self.rng
        assert p.condor_start is not None
        owners = client_of(spec, p.client)[1].owners
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

    # ------------------------------------------------------------------ after the fate
    def grid_job_id(self) -> int:
        """The CE's id of the pilot's job (the 027 event's GridJobId)."""
        return self.rng.randint(100000, 9999999)

    def worker_node(self, p: SimPilot, spec: EntrySpec, client: Client) -> WorkerNode:
        """The node of a pilot whose output came back, drawn in the order its .out/.err print them."""
        rng = self.rng
        assert p.startup is not None and p.glidein_end is not None
        node_uuid = uuid.UUID(int=rng.getrandbits(128), version=4)
        host = f"wn{rng.randint(1, 999):03d}.{spec.site.lower()}.example.net"
        start_dir = (
            f"/var/lib/condor/execute/dir_{rng.randint(1000, 999999)}/{spec.gatekeeper}_9619_"
            f"{rng.randint(100000, 9999999)}.0_{p.startup - 60}"
        )
        work_dir = f"{start_dir}/glide_{''.join(rng.choice('abcdefghijkLMNOPQRSTuvwxyz') for _ in range(6))}"
        credential_id = 400000 + rng.randint(0, 99999)
        pid = rng.randint(1000, 99999)
        if p.failed_script is None:
            assert p.last_script_end is not None
            condor_pid = rng.randint(1000, 99999)
            shadow = f"{client.submit_host}:9618?addrs=188.184.0.10-9618&noUDP&sock=shadow_{rng.randint(100, 9999)}"
            gpu_ids = tuple(f"GPU-{rng.getrandbits(32):08x}" for _ in range(p.gpus))
            return WorkerNode(
                node_uuid, host, start_dir, work_dir, credential_id, pid, condor_pid, shadow, gpu_ids,
                p.last_script_end, (),
            )  # fmt: skip
        result_end = p.glidein_end - rng.randint(1, 3)
        sleeps: list[tuple[int, int]] = []
        t = script_times(p)[-1][2]  # glidein_startup.sh sleeps from the failure until it exits
        while t < p.glidein_end - 5:
            seconds = min(250 + rng.randint(0, 99), p.glidein_end - 5 - t)
            sleeps.append((t, seconds))
            t += seconds
        return WorkerNode(
            node_uuid, host, start_dir, work_dir, credential_id, pid, None, None, (), result_end, tuple(sleeps)
        )

    def completed_logged_at(self, p: SimPilot, snapshot: int) -> int:
        """When the factory wrote the pilot's completed_jobs line (after its event-log end)."""
        assert p.ended is not None
        return min(p.ended + self.rng.randint(60, 900), snapshot)

    def frontend_reports(self, spec: EntrySpec) -> list[FrontendReport]:
        """What each of the entry's clients reports at the snapshot, in ``spec.clients`` order."""
        rng = self.rng
        reports: list[FrontendReport] = []
        for _ in spec.clients:
            requested_idle = rng.randint(0, 50) if spec.idle_jobs else 0
            jobs_idle = rng.randint(spec.idle_jobs // 2, spec.idle_jobs) if spec.idle_jobs else 0
            info_age = rng.randint(20, 300)
            reports.append(FrontendReport(requested_idle, jobs_idle, info_age, rng.randint(0, 50)))
        return reports
