"""gwms-obs import-rrd on a VO frontend's RRDs, written by GlideinWMS's own frontend monitoring
(tools/glideinwms_frontend_fixtures.py: ``groupStats.write_file`` and the aggregator, four days of
5-minute cycles).

Every imported sample is checked against what the writers were fed (the script's ``fed``): a
5-minute row is the one update that ended it, an hourly row the mean of the updates in its hour
(rrdtool's AVERAGE). The labels are the live source's: the same fixture dir scanned by
``gwms-obs export``'s frontend stage gives the same series, and the last imported values are
its values, so a panel's line runs on across the cutover.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.cli import SCRAPE_INSTANCE, SCRAPE_JOB
from gwms_obs.outputs import prometheus as P
from gwms_obs.outputs.rrd_history import sanitized
from tests.support import thanos_stack as T
from tests.support.servers import prom_query, prometheus
from tests.test_frontend_status import frontend_series, scan
from tests.test_import_rrd import Series, parse
from tools import glideinwms_frontend_fixtures as FX

pytestmark = pytest.mark.skipif(shutil.which("rrdtool") is None, reason="Debian rrdtool not installed")

FIXTURES = Path(__file__).parent / "fixtures" / "glideinwms_frontend"
STEP, HOUR, FINE_ROWS = FX.STEP, 12 * FX.STEP, 740  # the frontend's MonitoringConfig.rrd_archives
FIRST, LAST = FX.UPDATES - FX.HISTORY, FX.UPDATES - 1  # update indexes; LAST wrote the XML
FINE_FROM = FX.update_time(LAST) - (FINE_ROWS - 1) * STEP  # the oldest 5-minute row
CUTOVER = FX.update_time(LAST - 100)  # the last 100 updates are "live": none imported
SCRAPE = {"job": SCRAPE_JOB, "instance": SCRAPE_INSTANCE}
FRONTEND = {
    catalogue.FRONTEND_JOBS,
    catalogue.FRONTEND_GLIDEINS,
    catalogue.FRONTEND_UNMATCHED_JOBS,
    catalogue.FRONTEND_ENTRY_JOBS,
    catalogue.FRONTEND_ENTRY_GLIDEINS,
    catalogue.FRONTEND_ENTRY_CORES,
    catalogue.FRONTEND_ENTRY_REQUESTED,
}


def run(monitor: Path, cutover: float, *extra: str) -> dict[str, Series]:
    cmd = [sys.executable, "-m", "gwms_obs.cli", "import-rrd", str(monitor), "--cutover", str(cutover), *extra]
    return parse(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout)


@pytest.fixture(scope="module")
def got() -> dict[str, Series]:
    return run(FIXTURES, CUTOVER)


def fed(key: tuple[str, ...], k: int) -> int:
    return FX.fed(k, *key)


def fed_values() -> dict[tuple[str, tuple[tuple[str, str], ...]], Callable[[int], int]]:
    """Every series the import must make (metric, labels) -> what update k fed it."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], Callable[[int], int]] = {}

    def put(m: catalogue.MetricDef, labels: dict[str, str], words: dict[str, str], *key: str) -> None:
        for attr, word in words.items():
            lab = {**labels, **SCRAPE, m.labels[-1]: word}
            out[(m.name, tuple(sorted(lab.items())))] = functools.partial(fed, (*key, attr))

    for group, entries in FX.GROUPS.items():
        g = {"group": group, "client": f"{FX.FRONTEND}.{group}"}
        put(catalogue.FRONTEND_JOBS, g, P.FRONTEND_JOB_STATES, group, "Jobs")
        put(catalogue.FRONTEND_GLIDEINS, g, P.FRONTEND_GLIDEIN_STATES, group, "Glideins")
        put(catalogue.FRONTEND_UNMATCHED_JOBS, g, P.FRONTEND_MATCHED_JOB_STATES, group, "Unmatched", "MatchedJobs")
        for entry, _ in entries:
            name = FX.glideid(entry)
            e = {**g, "entry": entry, "factory_instance": name.split("@", 1)[1]}
            put(catalogue.FRONTEND_ENTRY_JOBS, e, P.FRONTEND_MATCHED_JOB_STATES, group, name, "MatchedJobs")
            put(catalogue.FRONTEND_ENTRY_GLIDEINS, e, P.FRONTEND_MATCHED_GLIDEIN_STATES, group, name, "MatchedGlideins")
            # The cores go in as logMatchedGlideins' last three arguments (TotalCores, IdleCores, RunningCores).
            cores = {"TotalCores": "total", "IdleCores": "idle", "RunningCores": "running"}
            put(catalogue.FRONTEND_ENTRY_CORES, e, cores, group, name, "MatchedGlideins")
            put(catalogue.FRONTEND_ENTRY_REQUESTED, e, P.FRONTEND_REQUESTED_KINDS, group, name, "Requested")
    return out


def expected(t: int, value: Callable[[int], int]) -> float:
    """The RRD row ending at (or, hourly, holding) ``t``: the mean of its updates. The first update
    only opens the file (rrdtool leaves its step unknown)."""
    end, width = (t, STEP) if t >= FINE_FROM else (-(-t // HOUR) * HOUR, HOUR)
    ks = [k for k in range(FIRST + 1, FX.UPDATES) if end - width < FX.update_time(k) <= end]
    return sum(value(k) for k in ks) / len(ks)


def test_every_sample_is_what_the_frontend_writer_was_fed(got: dict[str, Series]) -> None:
    want = fed_values()
    imported = {(name, labels) for name, series in got.items() for labels in series}
    assert imported == set(want)  # every series, none more (no total/, no state_Matched*)
    assert {name for name, _ in want} == {m.name for m in FRONTEND}
    # The finest archive covering each period, every 5 minutes once: the hourly rows back to the hour
    # of the first known update, then the 5-minute ones up to the cutover.
    hours = list(range((FX.update_time(FIRST + 1) // HOUR) * HOUR + STEP, FINE_FROM, STEP))
    fine = [FX.update_time(k) for k in range(FIRST, FX.UPDATES) if FINE_FROM <= FX.update_time(k) < CUTOVER]
    for (name, labels), value in want.items():
        points = got[name][labels]
        assert [t for t, _ in points] == hours + fine, (name, labels)
        for t, v in points:
            assert v == pytest.approx(expected(t, value), rel=1e-9), (name, labels, t)


def test_the_labels_and_last_values_are_the_live_sources(tmp_path: Path) -> None:
    """Imported up to just after the cycle that wrote the XML, the last samples are what export's
    frontend stage serves from that XML, series for series (and --frontend-client names a group's
    client as export's [frontend_clients] does)."""
    clients = {"main": "vofe_example_frontend"}
    got = run(FIXTURES, FX.update_time(LAST) + 1, "--frontend-client", "main=vofe_example_frontend", "--job", "")
    live = frontend_series(scan(FIXTURES, clients))
    for m in FRONTEND:
        last = {}
        for labels, points in got[m.name].items():
            d = dict(labels)
            d.pop("instance")
            assert points[-1][0] == FX.update_time(LAST)
            last[tuple(d[k] for k in m.labels)] = points[-1][1]
        assert last == live[m.name], m.name


def test_an_entry_gone_from_the_groups_xml_is_found_by_its_factory_and_an_unknown_one_counted(tmp_path: Path) -> None:
    tree = tmp_path / "monitor"
    shutil.copytree(FIXTURES, tree)
    src = tree / "group_main" / f"factory_{sanitized(FX.glideid('OSG_US_Other_ce02'))}"
    # An entry the frontend no longer matches: its dir stays, its XML names it no more.
    gone = tree / "group_main" / f"factory_{sanitized(FX.glideid('Old_Entry_ce9'))}"
    src.rename(gone)
    stray = tree / "group_main" / "factory_not_a_known_factory"
    stray.mkdir()
    shutil.copyfile(gone / "Status_Attributes.rrd", stray / "Status_Attributes.rrd")
    cmd = [sys.executable, "-m", "gwms_obs.cli", "import-rrd", str(tree), "--cutover", str(CUTOVER)]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    entries = {dict(lab)["entry"] for lab in parse(r.stdout)[catalogue.FRONTEND_ENTRY_JOBS.name]}
    assert entries == {"CMS_T2_US_Example_ce01", "Old_Entry_ce9"}
    assert "unknown_factory" in r.stderr and "factory_not_a_known_factory" in r.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian prometheus not installed")
def test_the_frontend_blocks_load_in_a_real_prometheus(tmp_path: Path) -> None:
    om = tmp_path / "fe.om"
    cmd = [sys.executable, "-m", "gwms_obs.cli", "import-rrd", str(FIXTURES), "--cutover", str(CUTOVER)]
    subprocess.run([*cmd, "-o", str(om)], check=True, timeout=300)
    data = tmp_path / "prom" / "data"
    T.backfill(om, data, max_block="4374h", timeout=300)
    want = fed_values()
    m = catalogue.FRONTEND_ENTRY_REQUESTED.name
    (labels, value), *_ = [(lab, v) for (name, lab), v in want.items() if name == m and ("kind", "idle") in lab]
    sel = ",".join(f'{k}="{v}"' for k, v in labels)
    with prometheus(tmp_path / "prom", "global: {}\n", ["--storage.tsdb.retention.time=100y"]) as url:
        # A 5-minute row, and an hourly one read between two of its 5-minute samples.
        for t in (FINE_FROM + 10 * STEP, (FX.update_time(FIRST) // HOUR + 5) * HOUR + 7 * STEP):
            res = prom_query(url, f"{m}{{{sel}}} @ {t}")
            assert len(res) == 1, (sel, t, res)
            assert float(res[0]["value"][1]) == pytest.approx(expected(t, value), rel=1e-9)
        # The frontend's groups summed, as a panel sums them: one series per group and state.
        res = prom_query(url, f'sum by (group) (gwms_frontend_jobs{{state="idle"}} @ {CUTOVER - STEP})')
        assert {r["metric"]["group"]: float(r["value"][1]) for r in res} == {
            g: float(FX.fed(LAST - 100 - 1, g, "Jobs", "Idle")) for g in FX.GROUPS
        }
