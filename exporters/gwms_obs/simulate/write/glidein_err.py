"""job.C.P.err: glidein_startup.sh's stderr, condor_startup.sh's config dump and framed HTCondor logs.

Then the trace spool of a pilot that could not send it (``trace_spool``) and,
last, the long result XML, encoded (``osg_test_result``).
"""

from __future__ import annotations

from functools import lru_cache

from ...catalogue import Source
from ...model import StatsFormat
from ...sources.condor_sections import encode
from ...tracing import conventions as C
from ..factory_stats import StarterStats
from ..formats import date_cmd
from ..plan import SimPilot, WorkerNode, script_path, script_times
from ..scenario import FACTORY, GLIDEIN_NAME, MAX_IDLE, SCHEDD, SCRIPT_FAILURES, Client, EntrySpec
from . import osg_test_result, trace_spool

SOURCE = Source.GLIDEIN_ERR
CONFIG_DASHES = "-" * 53  # closing line of condor_startup.sh's glidein_config dump (HEAD)
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


@lru_cache(maxsize=64)
def _daemon_logs(entry: str) -> bytes:
    """The framed MasterLog and StartdLog, the same for every pilot of an entry (compressed once)."""
    startd = _STARTD_LOG + f"06/09/26 10:15:03 Entry {entry}\n"
    return encode("MasterLog", _MASTER_LOG.encode()) + encode("StartdLog", startd.encode())


def render(p: SimPilot, spec: EntrySpec, client: Client, node: WorkerNode, stats: StarterStats, seed: int) -> bytes:
    """The .err of a pilot whose output came back; ``seed`` decides (by hash) whether it returns a spool."""
    assert p.startup is not None and p.validation_end is not None
    lines: list[str] = []
    scripts: list[str] = []  # each script's result XML, for the long XML
    for name, start, end in script_times(p):
        path = script_path(node, name, client, spec)
        outcome = osg_test_result.script_outcome(name, p, end)
        scripts.append(
            osg_test_result.script_result(name, node.work_dir, f"{path} glidein_config", start, end, outcome)
        )
        if name == p.failed_script:
            lines += [
                f"=== Validation error in {path} ===",
                f"{date_cmd(end)} Error running '{path}'",
                f"     {SCRIPT_FAILURES[name].detail}",
            ]
        else:
            lines.append(f"=== validation OK in {path} (0) ===")
    # The glidein's own result: condor_startup.sh's when it ran, else the validation failure's.
    glidein_outcome = osg_test_result.glidein_outcome(p, node, stats)
    if p.failed_script is None:
        cmd = f"{node.work_dir}/main/condor_startup.sh glidein_config"
        scripts.append(
            osg_test_result.script_result(
                "condor_startup.sh", node.work_dir, cmd, p.validation_end, node.result_end, glidein_outcome
            )
        )
        lines += _condor_startup(p, spec, client, node)
    else:
        lines += [f"{date_cmd(t)} Sleeping {seconds}" for t, seconds in node.sleeps]
    err = ("\n".join(lines) + "\n=== Exit messages left by periodic scripts ===\n\n").encode()
    if trace_spool.returns_spool(seed, p.cluster, p.proc):  # gwms_trace_flush in glidein_exit, before print_tail
        err += encode(C.SPOOL_SECTION, trace_spool.pilot_spool(p, spec, client, node, seed))
    long_xml = osg_test_result.glidein_result(
        [
            ("glidein_factory", FACTORY),
            ("glidein_name", GLIDEIN_NAME),
            ("glidein_entry", spec.name),
            ("condorg_cluster", p.cluster),
            ("condorg_subcluster", p.proc),
            ("glidein_credential_id", node.credential_id),
            ("condorg_schedd", SCHEDD),
            *osg_test_result.node_env(client, node),
        ],
        p.startup,
        node.result_end,
        glidein_outcome,
        scripts=scripts,
        cmd=(
            f"{node.start_dir}/glidein_startup.sh -v std -name {GLIDEIN_NAME} -entry {spec.name} "
            f"-clientname {client.client_name} -schedd {SCHEDD} -cluster {p.cluster} -subcluster {p.proc}"
        ),
    )
    return err + osg_test_result.encoded((long_xml + "\n").encode())


def _condor_startup(p: SimPilot, spec: EntrySpec, client: Client, node: WorkerNode) -> list[str]:
    """condor_startup.sh's stderr: config dump, GPU discovery, framed HTCondor logs."""
    config = [
        f"GLIDEIN_Factory {FACTORY}",
        f"GLIDEIN_Name {GLIDEIN_NAME}",
        f"GLIDEIN_Entry_Name {spec.name}",
        f"GLIDECLIENT_Name {client.client_name}",
        f"GLIDECLIENT_Group {client.group}",
        f"CONDORG_CLUSTER {p.cluster}",
        f"CONDORG_SUBCLUSTER {p.proc}",
        f"CONDORG_SCHEDD {SCHEDD}",
        "DEBUG_MODE 1",
        f"GLIDEIN_UUID {node.uuid}",
        f"GLIDEIN_WORK_DIR {node.work_dir}/main",
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
        config.append(f"GLIDEIN_Resource_Slots GPUs,{p.gpus},type=main")
    config += ["GLIDEIN_INITIALIZED 1", "# --- Last Script values ---"]
    lines = ["-------- glidein_config in condor_startup.sh ----------", *config, CONFIG_DASHES]
    if p.gpus:
        lines.append(f'condor_gpu_discovery found {p.gpus} GPUs: DetectedGPUs="{", ".join(node.gpu_ids)}"')
    else:
        lines.append("No GPUs found with condor_gpu_discovery, setting them to 0")
    if p.stats_format is StatsFormat.EMPTY:
        lines.append("One/more HTCondor starter logs missing; skipping calculation of metrics")
        lines.append("Proceeding with rest of the condor shutdown process...")
    sections = _daemon_logs(spec.name)
    if p.jobs:
        sections += encode("StartdHistoryLog", startd_history(p, client))
    lines.append(sections.decode().rstrip("\n"))
    return lines


def startd_history(p: SimPilot, client: Client) -> bytes:
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
            f'GlobalJobId = "{client.submit_host}#{j.cluster}.{j.proc}#{qdate}"',
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
        if j.usage is not None:
            u = j.usage
            ad += [
                f"RemoteUserCpu = {u.user_cpu}.0",
                f"RemoteSysCpu = {u.sys_cpu}.0",
                f"ResidentSetSize = {u.resident_kib}",
                f"MemoryUsage = {u.memory_mb}",
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
