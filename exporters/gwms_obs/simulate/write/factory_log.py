"""server/entry_<e>/<e>.info.log and <e>.err.log: the entry process's own log, in GlideinWMS's words.

The RPM's two process logs (info: INFO; err: DEBUG, ERR, WARN, so ``module:lineno``),
with the lines sources/factory_log.py reads, as glideFactoryEntry and glideFactoryLib
write them (the reader's docstring cites where):

* each cluster a request submitted: the request's ``Checking downtime for frontend ...``
  line, then ``Submitted N glideins to <schedd>: [...]``;
* at an entry with ``submit_fail``: a share of the clusters are tried and refused one or
  more cycles before they go out (condor_submit cannot authenticate to the schedd:
  condorExe's ERROR, executeSubmit's ``condor_submit failed: ...``, the ``Submitted 0``
  of the finally, keepIdleGlideins's WARNING); a hash of the cluster decides, no draw of
  the planner's;
* the glideins the factory removes: those held until removed (``end_event`` held, the
  CE refusing them included) as unrecoverable held by sanitizeGlideins; those it aborted
  while running (``end_event`` aborted) as the excess a frontend no longer wanted.
  Removals are written per factory cycle (CYCLE seconds), as the factory batches them.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict

from ...catalogue import Source
from ..plan import SimPilot
from ..scenario import SCHEDD, EntrySpec

SOURCE = Source.FACTORY_LOG
CYCLE = 300  # the factory's loop: removals of one cycle are one line
# What condor_submit prints when the schedd refuses the submitter (submit.cpp connect_to_the_schedd,
# with HTCondor's error stack "SUBSYS:CODE:text").
REFUSAL = (
    f"ERROR: Failed to connect to queue manager {SCHEDD}\n"
    "AUTHENTICATE:1003:Failed to authenticate with any method\n"
    "AUTHENTICATE:1004:Failed to authenticate using SCITOKENS\n"
)


def file_names(spec: EntrySpec) -> tuple[str, str]:
    return f"{spec.name}.info.log", f"{spec.name}.err.log"


def _stamp(t: float) -> str:
    """logging's asctime in the factory's local time (UTC here, as the other simulated logs)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(t))) + f",{round((t % 1) * 1000) % 1000:03d}"


def _info(t: float, msg: str) -> str:
    return f"[{_stamp(t)}] INFO: {msg}\n"


def _debug(t: float, level: str, where: str, msg: str) -> str:
    return f"[{_stamp(t)}] {level}: {where}: {msg}\n"


def _request(t: float, spec: EntrySpec, client: str) -> str:
    name, _, cls = client.rpartition("_")  # client_log_name = "<security name>_<security class>"
    return _info(t, f"Checking downtime for frontend {name} security class: {cls} (entry {spec.name}).")


def _failures(spec: EntrySpec, cluster: int) -> int:
    """How many cycles this cluster's condor_submit was refused before it went out."""
    if not spec.submit_fail:
        return 0
    h = hashlib.blake2b(f"{spec.name}/{cluster}".encode(), digest_size=8).digest()
    u = int.from_bytes(h[:4]) / 2**32
    return 0 if u >= spec.submit_fail else 1 + h[4] % 3


def render(spec: EntrySpec, pilots: list[SimPilot], now: int) -> tuple[bytes, bytes]:
    """The entry's info and err logs up to ``now``."""
    info: list[tuple[float, int, str]] = []
    err: list[tuple[float, int, str]] = []
    clusters: dict[int, list[SimPilot]] = defaultdict(list)
    for p in pilots:
        clusters[p.cluster].append(p)
    seq = 0
    for cluster, ps in sorted(clusters.items()):
        t0 = ps[0].submitted - 3
        client = ps[0].client
        submit_file = f"entry_{spec.name}/job.condor"
        for k in range(_failures(spec, cluster), 0, -1):
            t: float = t0 - k * CYCLE
            if t > now:
                continue
            cmd = f"Failed condor command 'condor_submit -name {SCHEDD} {submit_file}'. Exit code: 1."
            text = f"{cmd} Stdout: Submitting job(s)\n. Stderr: {REFUSAL}"
            info.append((t, seq, _request(t, spec, client)))
            err.append((t + 0.4, seq, _debug(t + 0.4, "ERROR", "condorExe:185", text + "\n")))
            failed = f"condor_submit failed: {text}\n"
            err.append((t + 0.5, seq, _debug(t + 0.5, "ERROR", "glideFactoryLib:1892", failed)))
            info.append((t + 0.6, seq, _info(t + 0.6, f"Submitted 0 glideins to {SCHEDD}: []")))
            err.append((t + 0.7, seq, _debug(t + 0.7, "WARNING", "glideFactoryLib:990", failed)))
            seq += 1
        if t0 > now:
            continue
        jids = ", ".join(f"({cluster}, {p.proc})" for p in ps)
        info.append((t0, seq, _request(t0, spec, client)))
        info.append((t0 + 3.5, seq, _info(t0 + 3.5, f"Submitted {len(ps)} glideins to {SCHEDD}: [{jids}]")))
        seq += 1
    # Removals, per factory cycle: (cycle, client) -> aborted while running; cycle -> held removed.
    running: dict[tuple[int, str], int] = defaultdict(int)
    held: dict[int, int] = defaultdict(int)
    for p in pilots:
        if p.ended is None or p.ended > now or p.kind != "lost":
            continue
        cycle = p.ended // CYCLE * CYCLE
        if p.end_event == "held":
            held[cycle] += 1
        elif p.end_event == "aborted":
            running[(cycle, p.client)] += 1
    for cycle, n in sorted(held.items()):
        t = cycle + 1.0
        info.append((t, seq, _info(t, f"Sanitizing glideins for entry {spec.name}")))
        found = f"Found {n} unrecoverable held glideins"
        err.append((t + 0.1, seq, _debug(t + 0.1, "WARNING", "glideFactoryLib:1186", found)))
        msg = f"But removing only {n} (unrecoverable held - unrecoverable held forcex)"
        err.append((t + 0.2, seq, _debug(t + 0.2, "WARNING", "glideFactoryLib:1188", msg)))
        seq += 1
    for (cycle, client), n in sorted(running.items()):
        t = cycle + 2.0
        info.append((t, seq, _request(t, spec, client)))
        info.append((t + 0.1, seq, _info(t + 0.1, f"Removing {n} running glideins")))
        seq += 1
    return _joined(info), _joined(err)


def _joined(records: list[tuple[float, int, str]]) -> bytes:
    records.sort()
    return "".join(text for _, _, text in records).encode()
