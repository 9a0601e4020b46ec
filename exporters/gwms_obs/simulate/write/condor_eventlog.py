"""condor_activity_<submit YYYYMMDD>_<client>.log: the HTCondor-G user log of the factory's schedd."""

from __future__ import annotations

from gwms_obs.catalogue import Source
from gwms_obs.simulate.formats import day_stamp, eventlog_time
from gwms_obs.simulate.plan import SimPilot
from gwms_obs.simulate.scenario import SCHEDD_ADDR, Client, EntrySpec

SOURCE = Source.EVENT_LOG
_USAGE = "Usr 0 00:00:00, Sys 0 00:00:00"


def file_name(p: SimPilot, client: Client) -> str:
    """The pilot's log: one per client and submission day."""
    return f"condor_activity_{day_stamp(p.submitted)}_{client.client_name}.log"


def events(p: SimPilot, spec: EntrySpec, grid_job_id: int) -> list[tuple[int, str]]:
    """Every (time, text) event of the pilot's life, whether or not the snapshot has reached it."""
    legacy = spec.legacy_eventlog
    job = f"({p.cluster}.{p.proc:03d}.000)"
    grid_resource = f"condor {spec.gatekeeper} {spec.gatekeeper}:9619"

    def event(code: str, t: int, body: str) -> tuple[int, str]:
        return t, f"{code} {job} {eventlog_time(t, legacy)} {body}...\n"

    out = [
        event("000", p.submitted, f"Job submitted from host: {SCHEDD_ADDR}\n"),
        event(
            "027",
            p.grid_submitted,
            f"Job submitted to grid resource\n    GridResource: {grid_resource}\n"
            f"    GridJobId: {grid_resource} {grid_job_id}.0\n",
        ),
    ]
    assert p.executing is not None and p.ended is not None
    out.append(event("001", p.executing, f"Job executing on host: {grid_resource}\n"))
    if p.end_event == "terminated":
        out.append(
            event(
                "005",
                p.ended,
                (
                    f"Job terminated.\n\t(1) Normal termination (return value {p.exit_code})\n"
                    f"\t\t{_USAGE}  -  Run Remote Usage\n\t\t{_USAGE}  -  Run Local Usage\n"
                    f"\t\t{_USAGE}  -  Total Remote Usage\n\t\t{_USAGE}  -  Total Local Usage\n"
                    "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
                    "\t0  -  Total Bytes Sent By Job\n\t0  -  Total Bytes Received By Job\n"
                ),
            )
        )
    else:
        if p.held is not None:
            held = "Job was held.\n\tThe job's remote status is unknown\n\tCode 0 Subcode 0\n"
            out.append(event("012", p.held, held))
        out.append(event("009", p.ended, f"Job was aborted.\n\tvia condor_rm (by user {p.username})\n"))
    return out
