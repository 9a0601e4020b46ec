"""Make tests/fixtures/glideinwms_rrd/: RRDs written by GlideinWMS's own monitoring writer.

    mkdir -p /tmp/glideinwms && git --git-dir=<glideinwms.git> archive HEAD | tar -x -C /tmp/glideinwms
    apt-get install rrdtool python3-rrdtool     # GlideinWMS's rrdSupport needs the binding
    /usr/bin/python3 tools/glideinwms_rrd_fixtures.py --glideinwms /tmp/glideinwms

Only needed to regenerate the fixtures (CI reads the committed files with
``rrdtool dump``). Run with the system Python, which has Debian's ``rrdtool``
module; the project's venv does not. The checkout is imported at run time,
unmodified, through a temporary directory in which ``glideinwms`` is a symlink
to it; nothing of GlideinWMS is copied here.

What is written: ``factory/glideFactoryMonitoring.MonitoringConfig`` with its
default step (300 s), heartbeat and archives (5 min x 740, 1 h x 740,
12 h x 740), whose ``write_rrd_multi`` creates and updates the files exactly as
the factory's ``condorQStats.write_file`` (Status_Attributes, GAUGE, data
sources named ``Status<attr>``, ``Req<attr>``, ``Client<attr>``) and
``condorLogSummary.write_file`` (Log_Completed_WasteTime, ABSOLUTE, ``<kind>_<range>``)
do, under ``entry_<name>/frontend_<client>/`` and ``entry_<name>/total/``.
The values are :func:`fed` of the update's index and the data source, so the
test recomputes what was fed without a second copy of it. ``UPDATES`` updates
5 minutes apart (four days) reach past the finest archive's 2.5 days, so the
import must take the oldest period from the hourly archive.

RRD files are in the host's byte order and word size: these were written on
x86_64 Linux and are read by ``rrdtool dump`` on the same kind of host.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "glideinwms_rrd"
STEP = 300
UPDATES = 4 * 288  # four days of 5-minute updates
START = 1_780_000_200  # a multiple of 300: updates land on step boundaries, so a 5-minute row is one update
ENTRY = "CMS_T2_US_Example_ce01"
CLIENT = "vo1_frontend.main"
# condorQStats.attributes, as write_file names them in the RRD.
STATUS = ("Idle", "Running", "Held", "Wait", "Pending", "StageIn", "IdleOther", "StageOut", "RunningCores")
REQUESTED = ("Idle", "AdjustedIdle", "MaxGlideins", "IdleCores", "MaxCores")
CLIENT_MONITOR = ("InfoAge", "JobsIdle", "JobsRunning", "JobsRunHere", "GlideIdle", "GlideRunning", "GlideTotal")
STATUS_DS = (
    tuple(f"Status{a}" for a in STATUS)
    + tuple(f"Req{a}" for a in REQUESTED)
    + tuple(f"Client{a}" for a in CLIENT_MONITOR)
)
# A few of summarize_completed_stats' WasteTime keys (kind_range), per-mille of wall time.
WASTE_DS = tuple(f"{w}_{p}" for w in ("validation", "idle", "nosuccess", "badput") for p in ("0m", "10m", "25m"))
FILES = {
    f"entry_{ENTRY}/frontend_{CLIENT}/Status_Attributes": ("GAUGE", STATUS_DS),
    f"entry_{ENTRY}/total/Status_Attributes": ("GAUGE", STATUS_DS),
    f"entry_{ENTRY}/frontend_{CLIENT}/Log_Completed_WasteTime": ("ABSOLUTE", WASTE_DS),
}


def fed(k: int, ds: str) -> int:
    """The value given to the writer at update ``k`` for data source ``ds``: small, varied, deterministic."""
    h = sum(ord(c) for c in ds)
    return (k * (h % 7 + 1) + h) % 53


def update_time(k: int) -> int:
    return START + k * STEP


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--glideinwms", default=os.environ.get("GLIDEINWMS_SRC"), help="a GlideinWMS source tree")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    if not a.glideinwms or not (Path(a.glideinwms) / "factory" / "glideFactoryMonitoring.py").is_file():
        ap.error("--glideinwms (or $GLIDEINWMS_SRC) must name a GlideinWMS source tree")
    shim = Path(tempfile.mkdtemp(prefix="gwms-rrd-"))
    (shim / "glideinwms").symlink_to(Path(a.glideinwms).resolve(), target_is_directory=True)
    sys.path.insert(0, str(shim))
    # At run time, from the checkout (not a dependency of this project).
    gfm = importlib.import_module("glideinwms.factory.glideFactoryMonitoring")
    rrdSupport = importlib.import_module("glideinwms.lib.rrdSupport")

    if rrdSupport.rrdSupport().isDummy():
        ap.error("GlideinWMS found no rrdtool binding: run with a Python that has it (/usr/bin/python3 on Debian)")
    out: Path = a.out
    for rel in FILES:
        rrd = out / (rel + ".rrd")
        if rrd.exists():
            rrd.unlink()  # write_rrd_multi creates only missing files; start over
    # rrdSupport.create_rrd_multi starts a file at the wall clock's now, as a factory's
    # first update does; the fixtures' history is fixed, so its clock reads just before it.
    time.time = lambda: float(START - 1)
    cfg = gfm.MonitoringConfig(log=logging.getLogger("glideinwms"))  # its default logger is unset outside a factory
    cfg.monitor_dir = str(out)
    for k in range(UPDATES):
        for rel, (ds_type, names) in FILES.items():
            os.makedirs(out / os.path.dirname(rel), exist_ok=True)
            cfg.write_rrd_multi(rel, ds_type, update_time(k), {n: fed(k, n) for n in names})
    print(f"wrote {len(FILES)} RRDs, {UPDATES} updates each, under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
