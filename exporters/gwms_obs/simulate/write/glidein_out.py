"""job.C.P.out: glidein_startup.sh's stdout, with condor_startup.sh's Stats block and the plain result XML."""

from __future__ import annotations

from ...catalogue import Source
from ..factory_stats import StarterStats
from ..formats import date_cmd
from ..plan import SimPilot, WorkerNode, script_path, script_times
from ..scenario import (
    CPUS_SETUP,
    FACTORY,
    GLIDEIN_NAME,
    MEMORY_SETUP,
    OS_RELEASE,
    SCHEDD,
    Client,
    EntrySpec,
)
from . import osg_test_result

SOURCE = Source.GLIDEIN_OUT


def render(p: SimPilot, spec: EntrySpec, client: Client, node: WorkerNode, stats: StarterStats) -> bytes:
    """The .out of a pilot whose output came back."""
    assert p.startup is not None and p.glidein_end is not None and p.validation_end is not None
    host, start_dir = node.host, node.start_dir
    lines: list[str] = [
        f"Starting glidein_startup.sh at {date_cmd(p.startup)} ({p.startup})",
        f"script_checksum   = '1cda5e9ab12734279b46cb55a6e8d668  {start_dir}/glidein_startup.sh'",
        "debug_mode        = 'std'",
        f"condorg_cluster   = '{p.cluster}'",
        f"condorg_subcluster= '{p.proc}'",
        f"condorg_schedd    = '{SCHEDD}'",
        f"glidein_uuid      = '{node.uuid}'",
        f"glidein_credential_id = '{node.credential_id}'",
        f"glidein_factory   = '{FACTORY}'",
        f"glidein_name      = '{GLIDEIN_NAME}'",
        f"glidein_entry     = '{spec.name}'",
        f"client_name       = '{client.client_name}'",
        f"client_group      = '{client.group}'",
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
        f"Release: {OS_RELEASE}",
        f"As: uid=43700({client.username}) gid=43700({client.username})",
        f"PID: {node.pid}",
        "",
        f"Started in {start_dir}",
        f"Running in {node.work_dir}",
        "PARAM_LIST GLIDEIN_Client,GLIDEIN_Collector,USE_MATCH_AUTH,CONDOR_OS,GLIDEIN_Max_Idle,CONDOR_VERSION",
        f"{date_cmd(p.startup + 1)}: Started logging stdout on file too",
        "Downloading files from Factory and Frontend",
    ]
    for name, _, end in script_times(p):
        lines.append(f"Executing (flags:) {script_path(node, name, client, spec)}")
        if name == MEMORY_SETUP:
            lines.append(f"{date_cmd(end)} Setting GLIDEIN_MaxMemMBs={p.memory_mb}")
        elif name == CPUS_SETUP:
            lines.append(f"{date_cmd(end)} Setting GLIDEIN_CPUS={p.cpus}")
    if p.failed_script is None:
        assert p.condor_start is not None and p.condor_end is not None and p.last_script_end is not None
        start, end, last_end = p.condor_start, p.condor_end, p.last_script_end
        lines += [
            "Condor tarball does not need to be fixed",
            f"=== Last script starting {date_cmd(p.validation_end)} ({p.validation_end}) after validating "
            f"for {p.validation_end - p.startup} ===",
            "",
            f"=== Condor starting {date_cmd(start)} ({start}) ===",
            f"=== Condor started in background, now waiting on process {node.condor_pid} ===",
            f"=== Condor ended {date_cmd(end)} ({end}) after {end - start} ===",
            "",
            "Total jobs/goodZ jobs/goodNZ jobs/badSignal jobs/badOther jobs below are normalized to 1 Core",
            "=== Stats of main ===",
            *stats.lines,
            "=== End Stats of main ===",
            f"Total number of activations/claims: {len(p.jobs)}",
            "",
            f"=== Last script ended {date_cmd(last_end)} ({last_end}) with code 0 after "
            f"{last_end - p.validation_end} ===",
            "",
        ]
    lines += [
        f"=== Glidein ending {date_cmd(p.glidein_end)} ({p.glidein_end}) with code {p.exit_code} after "
        f"{p.glidein_end - p.startup} ===",
        "",
        "=== XML description of glidein activity ===",
        osg_test_result.glidein_result(
            osg_test_result.node_env(client, node),
            p.startup,
            node.result_end,
            osg_test_result.glidein_outcome(p, node, stats),
        ),
        "=== End XML description of glidein activity ===",
    ]
    return ("\n".join(lines) + "\n").encode()
