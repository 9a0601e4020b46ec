"""monitor/entry_<e>/schedd_status.xml: the entry's glidein queue per frontend at the snapshot."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ...catalogue import Source
from ..formats import updated_block, xml_attrs
from ..plan import FrontendReport, SimPilot
from ..scenario import CLIENTS, EntrySpec

SOURCE = Source.SCHEDD_STATUS
FILE = "schedd_status.xml"


def queue_state(p: SimPilot, now: int) -> str:
    """Factory queue state of a pilot at ``now`` (schedd_status.xml Status attribute)."""
    if p.held is not None and p.held <= now:
        return "Held"
    if p.refused:
        return "Wait"  # never reached the CE
    if p.executing is not None and p.executing <= now:
        return "Running"
    return "Pending" if p.grid_submitted <= now else "Wait"


def count_queued(queue: Counter[str], p: SimPilot, now: int) -> None:
    """Add a pilot still queued or running at ``now`` to its client's queue counts."""
    state = queue_state(p, now)
    queue[state] += 1
    if state == "Running" and p.condor_start is not None and p.condor_start <= now:
        queue["GlideTotal"] += 1
        running = [j for j in p.jobs if j.start <= now and (j.end is None or j.end > now)]
        queue["GlideRunning" if running else "GlideIdle"] += 1
        queue["CoresTotal"] += p.cpus
        queue["JobsRunHere"] += len(running)
        queue["CoresRunning"] += sum(j.cpus for j in running)


def render(spec: EntrySpec, now: int, queues: dict[str, Counter[str]], reports: Sequence[FrontendReport]) -> bytes:
    """The file: per frontend (``queues`` by client_log_name, ``reports`` in spec.clients order), then totals."""
    exp_cores = spec.cpus[0]
    frontends: list[str] = []
    tot_status: Counter[str] = Counter()
    tot_req: Counter[str] = Counter()
    tot_cm: Counter[str] = Counter()
    for key, report in zip(spec.clients, reports, strict=True):
        c = CLIENTS[key]
        q = queues.get(c.log_name, Counter())
        status = {
            "Wait": q["Wait"],
            "Pending": q["Pending"],
            "StageIn": 0,
            "IdleOther": 0,
            "Running": q["Running"],
            "StageOut": 0,
            "Held": q["Held"],
        }
        status["Idle"] = status["Wait"] + status["Pending"] + status["StageIn"] + status["IdleOther"]
        status["RunningCores"] = status["Running"] * exp_cores
        req_idle = report.requested_idle
        req = {
            "Idle": req_idle,
            "AdjustedIdle": req_idle,
            "MaxGlideins": 300,
            "IdleCores": req_idle * exp_cores,
            "MaxCores": 300 * exp_cores,
        }
        cm = {
            "CoresIdle": q["CoresTotal"] - q["CoresRunning"],
            "CoresRunning": q["CoresRunning"],
            "CoresTotal": q["CoresTotal"],
            "GlideIdle": q["GlideIdle"],
            "GlideRunning": q["GlideRunning"],
            "GlideTotal": q["GlideTotal"],
            "InfoAge": report.info_age,
            "JobsIdle": report.jobs_idle,
            "JobsRunHere": q["JobsRunHere"],
            "JobsRunning": q["JobsRunHere"] + report.jobs_running_elsewhere,
        }
        tot_status.update(status)
        tot_req.update(req)
        tot_cm.update({k: v for k, v in cm.items() if k != "InfoAge"})
        tot_cm["InfoAge"] = max(tot_cm["InfoAge"], cm["InfoAge"])
        frontends.append(
            f'      <frontend name="{c.log_name}">\n'
            f"         <ClientMonitor {xml_attrs(cm.items())}/>\n"
            '         <Downtime status="False"/>\n'
            f"         <Requested {xml_attrs(req.items())}>\n            <Parameters>\n            </Parameters>\n"
            "         </Requested>\n"
            f"         <Status {xml_attrs(status.items())}/>\n"
            "         <StatusEntries/>\n"
            "      </frontend>\n"
        )
    return (
        '<?xml version="1.0" encoding="ISO-8859-1"?>\n\n<glideFactoryEntryQStats>\n'
        f"{updated_block(now)}\n"
        '   <downtime status="False">\n   </downtime>\n'
        "   <frontends>\n" + "".join(frontends) + "   </frontends>\n"
        "   <total>\n"
        f"      <ClientMonitor {xml_attrs(tot_cm.items())}/>\n"
        f"      <Requested {xml_attrs(tot_req.items())}/>\n"
        f"      <Status {xml_attrs(tot_status.items())}/>\n"
        "   </total>\n</glideFactoryEntryQStats>\n"
    ).encode()
