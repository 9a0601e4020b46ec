"""Make tests/fixtures/glideinwms_rrd/: RRDs written by GlideinWMS's own monitoring writer.

    mkdir -p /tmp/glideinwms && git --git-dir=<glideinwms.git> archive HEAD | tar -x -C /tmp/glideinwms
    apt-get install rrdtool python3-rrdtool     # GlideinWMS's rrdSupport needs the binding
    /usr/bin/python3 tools/glideinwms_rrd_fixtures.py --glideinwms /tmp/glideinwms

Only needed to regenerate the fixtures (CI reads the committed files with
``rrdtool dump``). Run with the system Python, which has Debian's ``rrdtool``
module; the project's venv does not. The checkout is imported at run time,
unmodified, through a temporary directory in which ``glideinwms`` is a symlink
to it; nothing of GlideinWMS is copied here.

What is written, one factory cycle per update, at the update's time (the
writers read the wall clock; here it reads the update's time):
``factory/glideFactoryMonitoring.condorQStats`` is given the schedd's counts
(``logSchedd``, by HTCondor/GlideinWMS status code), the frontend's request
(``logRequest``) and its ClientMonitor report (``logClientMonitor``), then
``write_file`` writes schedd_status.xml and, through ``MonitoringConfig`` with
its default step (300 s), heartbeat and archives (5 min x 740, 1 h x 740,
12 h x 740), ``entry_<name>/{total,frontend_<client>}/Status_Attributes.rrd``
with its own data source names. Log_Completed_WasteTime.rrd
(``<kind>_<range>``) and Log_Completed_Stats.rrd (``Lasted_*``,
``JobsLasted_*``, ``JobsNr_*``) and Log_Completed.rrd (the cycle's sums:
``Glideins``, ``Lasted``, ``JobsGoodput``, ...) are written with
``MonitoringConfig.write_rrd_multi`` (ABSOLUTE), and Log_Counts.rrd
(``Status<state>`` GAUGE, ``Entered<state>`` and ``Exited<state>`` ABSOLUTE, the
exits negative) with ``write_rrd_multi_hetero``, as
``condorLogSummary.write_file`` calls them: driving that class needs parsed
glidein logs, and the RRD calls are the same. The entry's glideins have
``CORES`` cores (GLIDEIN_CPUS, condorQStats' ``cores``), so the factory's own
core estimates (``StatusRunningCores``, ``ReqIdleCores``, ``ReqMaxCores``) differ
from the glidein counts, and the frontend's report has its cores and an
information age that vary. Every value is :func:`fed` of the
update's index and the RRD data source it lands in, so the test recomputes
what was fed without a second copy of it. ``UPDATES`` updates 5 minutes apart
(four days) reach past the finest archive's 2.5 days, so the import must take
the oldest period from the hourly archive.

RRD files are in the host's byte order and word size: these were written on
x86_64 Linux and are read by ``rrdtool dump`` on the same kind of host.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, or imported as tools.*
from tools import glideinwms_checkout

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "glideinwms_rrd"
STEP = 300
UPDATES = 4 * 288  # four days of 5-minute updates
START = 1_780_000_200  # a multiple of 300: updates land on step boundaries, so a 5-minute row is one update
ENTRY = "CMS_T2_US_Example_ce01"
CLIENT = "vo1_frontend.main"
CORES = 4  # the entry's GLIDEIN_CPUS: condorQStats multiplies glidein counts by it for its *Cores
# What condorQStats is fed, keyed by the attribute write_file names its data source after
# (Status<attr>, Req<attr>, Client<attr>): HTCondor/GlideinWMS status codes (aggregateStates),
# the request's and the ClientMonitor's keys (logRequest, logClientMonitor).
STATUS_CODES = {
    "Idle": 1,  # the sum of the four below, not fed on its own
    "Running": 2,
    "Held": 5,
    "Wait": 1001,
    "Pending": 1002,
    "StageIn": 1010,
    "IdleOther": 1100,
    "StageOut": 4010,
}
IDLE_CODES = (1001, 1002, 1010, 1100)
REQUEST_ARGS = {"Idle": "IdleGlideins", "AdjustedIdle": "AdjIdleGlideins", "MaxGlideins": "MaxGlideins"}
MONITOR_ARGS = {
    "JobsIdle": "Idle",
    "JobsRunning": "Running",
    "JobsRunHere": "RunningHere",
    "GlideIdle": "GlideinsIdle",
    "GlideRunning": "GlideinsRunning",
    "GlideTotal": "GlideinsTotal",
    "CoresIdle": "GlideinsIdleCores",
    "CoresRunning": "GlideinsRunningCores",
    "CoresTotal": "GlideinsTotalCores",
}
STATUS_DS = (
    tuple(f"Status{a}" for a in STATUS_CODES)
    + tuple(f"Req{a}" for a in REQUEST_ARGS)
    + tuple(f"Client{a}" for a in MONITOR_ARGS)
)
# A few of summarize_completed_stats' WasteTime keys (kind_range), per-mille of wall time.
WASTE_DS = tuple(f"{w}_{p}" for w in ("validation", "idle", "nosuccess", "badput") for p in ("0m", "10m", "25m"))
# A few of its Lasted_, JobsLasted_ and JobsNr_ buckets.
STATS_DS = ("Lasted_5m", "Lasted_2hours", "JobsLasted_5m", "JobsLasted_2hours", "JobsNr_None", "JobsNr_1", "JobsNr_11")
# condorLogSummary's Log_Completed sums per cycle (getLogCompletedDefaults' keys).
COMPLETED_DS = (
    "Glideins",
    "Lasted",
    "FailedNr",
    "JobsNr",
    "JobsLasted",
    "JobsTerminated",
    "JobsGoodput",
    "CondorLasted",
)
# condorLogSummary's Log_Counts: glideins per state now (GAUGE), and in and out of each state this
# cycle (ABSOLUTE; Exited is written negative, -len(exited)). Completed and Removed have no count
# or exit (its job_statuses, "I don't have their numbers from inactive logs").
LOG_STATES = ("Running", "Idle", "Wait", "Held")
COUNTS_TYPES = {
    **{f"Status{s}": "GAUGE" for s in LOG_STATES},
    **{f"Entered{s}": "ABSOLUTE" for s in (*LOG_STATES, "Completed", "Removed")},
    **{f"Exited{s}": "ABSOLUTE" for s in LOG_STATES},
}
COUNTS_DS = tuple(COUNTS_TYPES)
FILES = {
    f"entry_{ENTRY}/frontend_{CLIENT}/Status_Attributes": ("GAUGE", STATUS_DS),
    f"entry_{ENTRY}/total/Status_Attributes": ("GAUGE", STATUS_DS),
    f"entry_{ENTRY}/frontend_{CLIENT}/Log_Completed_WasteTime": ("ABSOLUTE", WASTE_DS),
    f"entry_{ENTRY}/frontend_{CLIENT}/Log_Completed_Stats": ("ABSOLUTE", STATS_DS),
    f"entry_{ENTRY}/frontend_{CLIENT}/Log_Completed": ("ABSOLUTE", COMPLETED_DS),
    f"entry_{ENTRY}/frontend_{CLIENT}/Log_Counts": ("", COUNTS_DS),  # "": each its own (COUNTS_TYPES)
}


def fed(k: int, ds: str) -> int:
    """The value given to the writer at update ``k`` for data source ``ds``: small, varied, deterministic."""
    h = sum(ord(c) for c in ds)
    v = (k * (h % 7 + 1) + h) % 53
    return -v if ds.startswith("Exited") else v  # condorLogSummary writes exits as -len(exited)


def update_time(k: int) -> int:
    return START + k * STEP


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    glideinwms_checkout.add_argument(ap)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--updates", type=int, default=UPDATES, help="cycles to write (a year, 105120, to measure an import)"
    )
    a = ap.parse_args(argv)
    tree = glideinwms_checkout.checkout(ap, a.glideinwms, "factory/glideFactoryMonitoring.py")
    glideinwms_checkout.importable(tree, "gwms-rrd-")
    # At run time, from the checkout (not a dependency of this project).
    gfm = importlib.import_module("glideinwms.factory.glideFactoryMonitoring")
    rrdSupport = importlib.import_module("glideinwms.lib.rrdSupport")

    if rrdSupport.rrdSupport().isDummy():
        ap.error("GlideinWMS found no rrdtool binding: run with a Python that has it (/usr/bin/python3 on Debian)")
    out: Path = a.out
    entry_dir = out / f"entry_{ENTRY}"
    for rel in FILES:
        rrd = out / (rel + ".rrd")
        if rrd.exists():
            rrd.unlink()  # the writers create only missing files; start over
    entry_dir.mkdir(parents=True, exist_ok=True)
    cfg = gfm.MonitoringConfig(log=logging.getLogger("glideinwms"))  # its default logger is unset outside a factory
    cfg.monitor_dir = str(entry_dir)  # a factory's entry process points it at its entry's monitor dir
    # The condorLogSummary files, written with the call its write_file makes (ABSOLUTE).
    logs = [(r, f) for r, f in FILES.items() if not r.endswith("Status_Attributes")]
    for k in range(a.updates):
        now = float(update_time(k))
        time.time = lambda now=now: now  # type: ignore[misc]  # the cycle's clock, read by the writers
        qc = gfm.condorQStats(log=cfg.log, cores=CORES)  # a new one each cycle, as glideFactoryEntry makes it
        counts = {code: fed(k, f"Status{a}") for a, code in STATUS_CODES.items()}
        counts[1] = sum(counts[c] for c in IDLE_CODES)  # as glideFactoryLib counts it: every idle glidein
        qc.logSchedd(CLIENT, counts, {})
        qc.logRequest(CLIENT, {arg: fed(k, f"Req{a}") for a, arg in REQUEST_ARGS.items()})
        qc.logClientMonitor(
            CLIENT,
            {arg: fed(k, f"Client{a}") for a, arg in MONITOR_ARGS.items()},
            {"LastHeardFrom": now - fed(k, "ClientInfoAge")},  # InfoAge: seconds since the frontend's ad
        )
        qc.finalizeClientMonitor()
        qc.write_file(monitoringConfig=cfg)
        for rel, (ds_type, names) in logs:
            fname, vals = os.path.relpath(out / rel, entry_dir), {n: fed(k, n) for n in names}
            if ds_type:
                cfg.write_rrd_multi(fname, ds_type, update_time(k), vals)
            else:
                types = {n: {"ds_type": COUNTS_TYPES[n]} for n in names}
                cfg.write_rrd_multi_hetero(fname, types, update_time(k), vals)
    # file_tmp2final keeps the previous cycle's schedd_status.xml as a backup: not a fixture.
    (entry_dir / "schedd_status.xml~").unlink(missing_ok=True)
    print(f"wrote {len(FILES)} RRDs, {a.updates} updates each, under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
