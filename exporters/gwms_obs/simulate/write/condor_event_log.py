"""condor_activity_<submit YYYYMMDD>_<client>.log: the HTCondor-G user log of the factory's schedd."""

from __future__ import annotations

from ...catalogue import Source
from ..formats import day_stamp, eventlog_time
from ..plan import SimPilot
from ..scenario import SCHEDD_ADDR, Client, EntrySpec

SOURCE = Source.CONDOR_EVENT_LOG
_USAGE = "Usr 0 00:00:00, Sys 0 00:00:00"
# Holds of a running glidein as HTCondor writes them (JobHeldEvent: reason, "Code N Subcode M"):
# the CE's own policy, propagated with its code (SystemPolicy 26); the gridmanager's code-0 hold
# with the HTCondor-C GAHP's connect error; the CE's output transfer error (12, an errno).
_HOLDS = (
    (26, 0, "The system macro SYSTEM_PERIODIC_HOLD expression 'RemoteWallClockTime > 172800' evaluated to TRUE"),
    (0, 0, "Error connecting to schedd {gk}: CEDAR:6001:Failed to connect to <{gk}:9619>"),
    (12, 2, "Error from slot1@{gk}: Failed to transfer files"),
)
# A CE refusing the factory's credentials at submission: the gridmanager's code-0 hold with the
# HTCondor-C GAHP's "Error connecting to schedd %s: %s" (schedd_client.cpp) and CondorError's full
# text, "SUBSYS:code:message|..." (AUTHENTICATE:1003, condor_error_codes.h).
REFUSED = (
    0,
    0,
    "Error connecting to schedd {gk}: AUTHENTICATE:1003:Failed to authenticate with any method"
    "|AUTHENTICATE:1004:Failed to authenticate using SCITOKENS",
)


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

    out = [event("000", p.submitted, f"Job submitted from host: {SCHEDD_ADDR}\n")]
    if p.ce_down is not None:  # GridResourceDownEvent / GridResourceUpEvent::formatBody (condor_event.cpp)
        out.append(event("026", p.ce_down[0], f"Detected Down Grid Resource\n    GridResource: {grid_resource}\n"))
        out.append(event("025", p.ce_down[1], f"Grid Resource Back Up\n    GridResource: {grid_resource}\n"))
    assert p.executing is not None and p.ended is not None
    if not p.refused:  # a refused glidein never reached the CE
        out.append(
            event(
                "027",
                p.grid_submitted,
                f"Job submitted to grid resource\n    GridResource: {grid_resource}\n"
                f"    GridJobId: {grid_resource} {grid_job_id}.0\n",
            )
        )
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
            # not the rng's: the plan stays as it was
            code, sub, reason = REFUSED if p.refused else _HOLDS[p.cluster % len(_HOLDS)]
            held = f"Job was held.\n\t{reason.format(gk=spec.gatekeeper)}\n\tCode {code} Subcode {sub}\n"
            out.append(event("012", p.held, held))
        out.append(event("009", p.ended, f"Job was aborted.\n\tvia condor_rm (by user {p.username})\n"))
    return out
