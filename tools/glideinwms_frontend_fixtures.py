"""Make tests/fixtures/glideinwms_frontend/: a VO frontend's monitor dir written by GlideinWMS itself.

    mkdir -p /tmp/glideinwms && git --git-dir=<glideinwms.git> archive HEAD | tar -x -C /tmp/glideinwms
    /usr/bin/python3 tools/glideinwms_frontend_fixtures.py --glideinwms /tmp/glideinwms

Only needed to regenerate the fixtures (CI reads the committed XML). As
tools/glideinwms_rrd_fixtures.py does, the checkout is imported at run time,
unmodified, through a temporary directory in which ``glideinwms`` is a symlink
to it; nothing of GlideinWMS is copied here. Run with the system Python
(Debian's ``rrdtool`` module), since the writers also update their RRDs.

What is written, one frontend cycle per update, at the update's time (the
writers read the wall clock; here it reads the update's time), as
``glideinFrontendElement`` and ``glideinFrontend`` drive the writers:
each group gets a new ``frontend/glideinFrontendMonitoring.groupStats`` and is
given the schedds' jobs (``logJobs``), the VO pool's glideins
(``logGlideins``), then per factory entry (``<entry>@<glidein>@<factory>@<pool
node>``, glideid_str) the matched jobs, glideins and cores
(``logMatchedJobs``, ``logMatchedGlideins``), its attributes, downtime and the
request (``logFactReq``), the ``MatchedUp``/``MatchedDown``/``Unmatched``
states likewise, then ``write_file`` writes ``group_<name>/frontend_status.xml`` and its RRDs,
``group_<name>/{total,factory_<glideid>,state_<state>}/Status_Attributes.rrd``
(the glideid sanitized: ``@`` -> ``_``), through the module's
``monitoringConfig`` with its default step (300 s), heartbeat and archives (5 min
x 740, 1 h x 740, 12 h x 740). Then ``glideinFrontendMonitorAggregator.aggregateStatus``
reads the groups' files and writes the frontend-wide ``frontend_status.xml``
and its RRDs (``total/``, the groups' sums), and ``write_frontend_descript_xml``
the ``descript.xml`` with the frontend's name. Every number is :func:`fed` of
the update's index, the group, the entry and the attribute, so the test
recomputes what was fed without a second copy. The fixture is the monitor dir
after the last of ``UPDATES`` updates; the RRDs hold the ``HISTORY`` updates
before and including it (four days, past the 5-minute archive's 2.5, so an
import takes its oldest period from the hourly archive), the earlier ones with
negative indexes, so the XML is the same whatever ``HISTORY`` is.

RRD files are in the host's byte order and word size: these were written on
x86_64 Linux and are read by ``rrdtool dump`` on the same kind of host.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import shutil
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, or imported as tools.*
from tools import glideinwms_checkout

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "glideinwms_frontend"
STEP = 300
UPDATES = 6
HISTORY = 4 * 288  # the RRDs' updates: four days of 5-minute cycles, the last UPDATES of them k >= 0
START = 1_780_000_200
FRONTEND = "vofe_example"
# Pool node of the factory's collector, and the factory's glidein and factory names: a
# glidefactory ad's Name is <entry>@<glidein>@<factory>; the frontend appends @<pool node>.
FACTORY_NODE = "gfactory-1.example.org"
GLIDEIN = "gfactory_instance"
FACTORY = "gfactory_service"
# group -> its factory entries and which of them is in downtime.
GROUPS: dict[str, tuple[tuple[str, bool], ...]] = {
    "main": (("CMS_T2_US_Example_ce01", False), ("OSG_US_Other_ce02", True)),
    "gpu": (("CMS_T2_US_Example_ce01", False),),
}
STATES = ("MatchedUp", "MatchedDown", "Unmatched")
JOBS = ("Idle", "OldIdle", "Running", "Total", "Idle_3600")
GLIDEINS = ("Idle", "Running", "Total")
MATCHED_JOBS = ("Idle", "EffIdle", "OldIdle", "Running", "RunningHere")
MATCHED_GLIDEINS = ("Total", "Idle", "Running", "Failed", "TotalCores", "IdleCores", "RunningCores")
REQUESTED = ("Idle", "MaxRun")


def glideid(entry: str) -> str:
    """The frontend's name of a factory entry (glideinFrontendElement's glideid_str)."""
    return f"{entry}@{GLIDEIN}@{FACTORY}@{FACTORY_NODE}"


def fed(k: int, *key: str) -> int:
    """What the writer is given at update ``k`` for ``key`` (group, entry or state, attribute)."""
    h = sum(ord(c) * (i + 1) for i, c in enumerate("/".join(key)))
    return (k * (h % 5 + 1) + h) % 97


def update_time(k: int) -> int:
    return START + k * STEP


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    glideinwms_checkout.add_argument(ap)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    tree = glideinwms_checkout.checkout(ap, a.glideinwms, "frontend/glideinFrontendMonitoring.py")
    shim = glideinwms_checkout.importable(tree, "gwms-fe-")
    # At run time, from the checkout (not a dependency of this project).
    log_support = importlib.import_module("glideinwms.lib.logSupport")
    # Set by the frontend's own startup, unset here.
    log_support.log = logging.getLogger("glideinwms")  # type: ignore[attr-defined]
    gfm = importlib.import_module("glideinwms.frontend.glideinFrontendMonitoring")
    agg = importlib.import_module("glideinwms.frontend.glideinFrontendMonitorAggregator")
    if gfm.monitoringConfig.rrd_obj.isDummy():
        ap.error("GlideinWMS found no rrdtool binding: run with a Python that has it (/usr/bin/python3 on Debian)")

    work = shim / "monitor"  # the frontend's <work_dir>/monitor/
    work.mkdir()
    for k in range(UPDATES - HISTORY, UPDATES):
        now = float(update_time(k))
        time.time = lambda now=now: now  # type: ignore[misc]  # the cycle's clock, read by the writers
        for group, entries in GROUPS.items():
            gfm.monitoringConfig.monitor_dir = str(work / f"group_{group}")  # glideinFrontendElement sets it so
            st = gfm.groupStats()  # a new one each cycle, as iterate_one makes it
            st.logJobs({a: fed(k, group, "Jobs", a) for a in JOBS})
            st.logGlideins({a: fed(k, group, "Glideins", a) for a in GLIDEINS})
            for name, down in [(glideid(e), d) for e, d in entries] + [(s, s != "MatchedUp") for s in STATES]:
                st.logMatchedJobs(name, *(fed(k, group, name, "MatchedJobs", a) for a in MATCHED_JOBS))
                st.logMatchedGlideins(name, *(fed(k, group, name, "MatchedGlideins", a) for a in MATCHED_GLIDEINS))
                attrs = {"GLIDEIN_Site": "Example_Site", "PubKeyValue": "not published"} if "@" in name else {}
                st.logFactAttrs(name, attrs, ("PubKeyValue", "PubKeyObj"))
                st.logFactDown(name, down)
                params = {"GLIDECLIENT_ReqNode": FACTORY_NODE} if "@" in name else {}
                st.logFactReq(name, *(fed(k, group, name, "Requested", a) for a in REQUESTED), params)
            st.write_file()
        agg.monitorAggregatorConfig.config_frontend(str(work), list(GROUPS))
        agg.aggregateStatus()
    descript = types.SimpleNamespace(data={"FrontendName": FRONTEND, "MonitorDisplayText": "", "MonitorLink": ""})
    gfm.write_frontend_descript_xml(descript, str(work))

    out: Path = a.out
    if out.exists():
        shutil.rmtree(out)
    # The XML (the live source's) and the RRDs (import-rrd's); not the writers' backups (*~).
    for src in sorted([*work.rglob("*.xml"), *work.rglob("*.rrd")]):
        dst = out / src.relative_to(work)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    xml, rrds = len(list(out.rglob("*.xml"))), len(list(out.rglob("*.rrd")))
    print(f"wrote {xml} XML files ({UPDATES} updates), {rrds} RRDs ({HISTORY} updates) under {out}")
    shutil.rmtree(shim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
