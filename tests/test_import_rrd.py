"""gwms-obs import-rrd on RRDs GlideinWMS's own writer made (tools/glideinwms_rrd_fixtures.py).

Every imported sample is checked against the values that were fed to
``MonitoringConfig.write_rrd_multi``: a 5-minute row is the one update that
ended it, an hourly row the mean of the updates in its hour (rrdtool's AVERAGE);
an ABSOLUTE data source is stored as that value per second since the last update.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.cli import SCRAPE_INSTANCE, SCRAPE_JOB
from gwms_obs.outputs.prometheus import (
    REQUESTED_KINDS,
    STATUS_STATES,
    USER_JOB_STATES,
    VO_CORE_STATES,
    VO_GLIDEIN_STATES,
)
from gwms_obs.outputs.rrd_history import (
    FRONTEND_FACTORY,
    FRONTEND_TOTAL,
    FRONTEND_UNMATCHED,
    STATUS_ATTRIBUTES,
    STATUS_LEGACY,
)
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources import rrd
from gwms_obs.sources.schedd_status import read_schedd_status
from tests.support import thanos_stack as T
from tests.support.servers import prom_query, prometheus
from tools import render
from tools.glideinwms_rrd_fixtures import (
    CLIENT,
    CORES,
    COUNTS_TYPES,
    ENTRY,
    FILES,
    START,
    STEP,
    UPDATES,
    fed,
    update_time,
)

pytestmark = pytest.mark.skipif(shutil.which("rrdtool") is None, reason="Debian rrdtool not installed")

FIXTURES = Path(__file__).parent / "fixtures" / "glideinwms_rrd"
SITE = "US_Example"
# GlideinWMS's MonitoringConfig.rrd_archives: the 5-minute archive keeps 740 rows, the hourly one 12 steps a row.
FINE_ROWS, HOUR = 740, 12 * STEP
LAST = update_time(UPDATES - 1)
FINE_FROM = LAST - (FINE_ROWS - 1) * STEP  # the oldest 5-minute row
CUTOVER = update_time(UPDATES - 100)  # the last 100 updates are "live": none imported
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
Series = dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]
SCRAPE = {"job": SCRAPE_JOB, "instance": SCRAPE_INSTANCE}


def parse(text: str) -> dict[str, Series]:
    out: dict[str, Series] = defaultdict(lambda: defaultdict(list))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, value, ts = line.rsplit(" ", 2)
        name, _, labels = head.partition("{")
        out[name][tuple(sorted(LABEL.findall(labels)))].append((int(float(ts)), float(value)))
    return out


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("rrd") / "rrd.om"
    cmd = [sys.executable, "-m", "gwms_obs.cli", "import-rrd", str(FIXTURES), "--cutover", str(CUTOVER)]
    subprocess.run([*cmd, "--site", f"{ENTRY}={SITE}", "-o", str(out)], check=True, timeout=120)
    return out.read_text()


# Data sources GlideinWMS computes from what it was fed, rather than storing it as given.
IDLE_STATES = ("Wait", "Pending", "StageIn", "IdleOther")
DERIVED: dict[str, Callable[[int], int]] = {
    "StatusIdle": lambda k: sum(fed(k, f"Status{a}") for a in IDLE_STATES),  # glideFactoryLib's idle count
    "StatusRunningCores": lambda k: CORES * fed(k, "StatusRunning"),  # condorQStats: glideins x GLIDEIN_CPUS
    "ReqIdleCores": lambda k: CORES * fed(k, "ReqIdle"),
    "ReqMaxCores": lambda k: CORES * fed(k, "ReqMaxGlideins"),
}


def expected(t: int, ds_type: str, ds: str, file: str = "Status_Attributes") -> float:
    """What the RRD row ending at ``t`` holds for what was fed: the mean over its updates.

    Update 0 only opens the file: its 5 minutes are all but one second from before the file
    existed, which rrdtool leaves unknown (the factory's first cycle shows nothing either).
    """
    if t >= FINE_FROM:
        end, width = t, STEP
    else:  # an hourly row, written at every 5 minutes of its hour
        end, width = -(-t // HOUR) * HOUR, HOUR
    ks = [k for k in range(1, UPDATES) if end - width < update_time(k) <= end]
    value = DERIVED.get(ds, lambda k: fed(k, ds)) if file == "Status_Attributes" else lambda k: fed(k, ds)
    ds_type = ds_type or COUNTS_TYPES[ds]
    per = [value(k) / (STEP if ds_type == "ABSOLUTE" else 1) for k in ks]
    return sum(per) / len(per)


POOL = {"entry": ENTRY, "client": CLIENT, "site": SITE, **SCRAPE}


def where(ds: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The metric and labels a Status_Attributes data source goes to."""
    if ds == "ClientInfoAge":
        return catalogue.ENTRY_INFO_AGE.name, tuple(sorted(POOL.items()))
    for prefix, words, metric, label in (
        ("Status", STATUS_STATES, catalogue.ENTRY_GLIDEINS, "state"),
        ("Req", REQUESTED_KINDS, catalogue.ENTRY_REQUESTED, "kind"),
        ("Client", USER_JOB_STATES, catalogue.ENTRY_USER_JOBS, "state"),
        ("Client", VO_GLIDEIN_STATES, catalogue.ENTRY_VO_GLIDEINS, "state"),
        ("Client", VO_CORE_STATES, catalogue.ENTRY_VO_CORES, "state"),
    ):
        word = words.get(ds.removeprefix(prefix)) if ds.startswith(prefix) else None
        if word:
            return metric.name, tuple(sorted({**POOL, label: word}.items()))
    return "", ()


def legacy(rrd_name: str, ds: str) -> tuple[catalogue.MetricDef, dict[str, str]]:
    """The legacy family and its own labels a data source with no series of ours goes to."""
    if rrd_name == "Log_Completed_WasteTime":
        kind, _, rng = ds.partition("_")
        return catalogue.LEGACY_WASTE_TIME, {"kind": kind, "range": rng}
    if rrd_name == "Log_Completed_Stats":
        return catalogue.LEGACY_COMPLETED_STATS, {"stat": ds}
    if rrd_name == "Log_Completed":
        return catalogue.LEGACY_COMPLETED, {"stat": ds}
    if rrd_name == "Log_Counts":
        if ds.startswith("Status"):
            return catalogue.LEGACY_LOG_GLIDEINS, {"state": ds.removeprefix("Status")}
        transition = "Entered" if ds.startswith("Entered") else "Exited"
        return catalogue.LEGACY_LOG_TRANSITIONS, {"transition": transition, "state": ds.removeprefix(transition)}
    assert rrd_name == "Status_Attributes"
    cores = ds.endswith("Cores") or ds.startswith("ClientCores")
    return (catalogue.LEGACY_STATUS_CORES if cores else catalogue.LEGACY_STATUS_GLIDEINS), {"attribute": ds}


def test_every_sample_is_what_was_fed_within_the_rrds_consolidation(text: str) -> None:
    got = parse(text)
    # Every data source of every file GlideinWMS wrote for the client, under our name or a legacy one.
    status_ds = [ln.split("[", 1)[1].split("]", 1)[0] for ln in _info("Status_Attributes") if ln.startswith("ds[")]
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    mapped = 0
    # Every 5-minute update before the cutover once, then, before the 5-minute archive reaches,
    # the hourly rows, each at every 5 minutes of its hour, back to the hour of the first known
    # update: the finest archive covering each period, every step once.
    fine = [update_time(k) for k in range(UPDATES) if FINE_FROM <= update_time(k) < CUTOVER]
    hours = list(range((update_time(1) // HOUR) * HOUR + STEP, FINE_FROM, STEP))
    # The legacy families (no panel draws them): each row once, at its own time.
    rows = list(range(-(-update_time(1) // HOUR) * HOUR, FINE_FROM, HOUR)) + fine
    for rrd_name in (
        "Status_Attributes",
        "Log_Completed_WasteTime",
        "Log_Completed_Stats",
        "Log_Completed",
        "Log_Counts",
    ):
        ds_type, names = FILES[f"entry_{ENTRY}/frontend_{CLIENT}/{rrd_name}"]
        if rrd_name == "Status_Attributes":
            names = tuple(sorted({*status_ds}))  # also those computed from what was fed (DERIVED)
        for ds in names:
            name, labels = where(ds) if rrd_name == "Status_Attributes" else ("", ())
            if name:
                mapped += 1
                times = hours + fine
            else:
                metric, extra = legacy(rrd_name, ds)
                name, labels = metric.name, tuple(sorted({**POOL, **extra}.items()))
                times = rows
            points = got[name][labels]
            assert [t for t, _ in points] == times, (rrd_name, ds)
            for t, v in points:
                assert v == pytest.approx(expected(t, ds_type, ds, rrd_name), rel=1e-9), (rrd_name, ds, t)
            seen.add((name, labels))
    assert mapped == len(STATUS_ATTRIBUTES)
    assert {(n, lab) for n, series in got.items() for lab in series} == seen  # nothing else imported
    ours = {m.name for m, _ in STATUS_ATTRIBUTES.values()}
    assert {n for n, _ in seen} == {m.name for m in catalogue.LEGACY_METRICS} | ours


def _info(rrd_name: str) -> list[str]:
    path = FIXTURES / f"entry_{ENTRY}" / f"frontend_{CLIENT}" / f"{rrd_name}.rrd"
    return subprocess.run(
        ["rrdtool", "info", str(path)], check=True, capture_output=True, text=True
    ).stdout.splitlines()


def test_nothing_at_or_after_the_cutover_and_no_total(text: str) -> None:
    got = parse(text)
    assert got, "nothing imported"
    for series in got.values():
        for labels, points in series.items():
            assert max(t for t, _ in points) < CUTOVER
            assert dict(labels)["client"] == CLIENT  # entry_*/total/ is the clients' sum: never imported


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian prometheus not installed")
def test_the_blocks_load_in_a_real_prometheus(text: str, tmp_path: Path) -> None:
    (tmp_path / "rrd.om").write_text(text)
    data = tmp_path / "prom" / "data"
    T.backfill(tmp_path / "rrd.om", data, timeout=300)
    # The fixtures' history is months old: keep it past the default 15 days.
    with prometheus(tmp_path / "prom", "global: {}\n", ["--storage.tsdb.retention.time=100y"]) as url:
        for ds, t in (("StatusHeld", FINE_FROM + 10 * STEP), ("ReqMaxGlideins", (START // HOUR + 5) * HOUR + 7 * STEP)):
            name, labels = where(ds)
            sel = ",".join(f'{k}="{v}"' for k, v in labels)
            res = prom_query(url, f"{name}{{{sel}}} @ {t}")
            assert len(res) == 1, (name, sel, t, res)
            assert float(res[0]["value"][1]) == pytest.approx(expected(t, "GAUGE", ds), rel=1e-9)
        last = prom_query(url, f'max_over_time(gwms_entry_glideins{{state="held"}}[1h] @ {CUTOVER + 1800})')
        assert last and float(last[0]["value"][1]) <= 52  # what is there comes from before the cutover
        after = prom_query(url, f'gwms_entry_glideins{{state="held"}} @ {CUTOVER + STEP}')
        assert after == []  # the last imported sample (cutover - 5 min) is over 5 min old: live data's place


def test_the_site_comes_from_descript_without_site(tmp_path: Path) -> None:
    """An entry's GLIDEIN_Site from its descript.xml, the exporter's source for the label;
    ``--site`` wins; an entry no descript names is ``unknown``, as the exporter says it."""
    tree = tmp_path / "monitor"
    shutil.copytree(FIXTURES, tree)
    shutil.copytree(tree / f"entry_{ENTRY}", tree / "entry_other")
    ref = (Path(__file__).parent / "fixtures" / "descript_entry_el6_osg34.xml").read_text(encoding="latin-1")
    (tree / f"entry_{ENTRY}" / "descript.xml").write_text(
        re.sub(r'GLIDEIN_Site="[^"]*"', 'GLIDEIN_Site="T2_From_Descript"', ref.replace("el6_osg34", ENTRY)),
        encoding="latin-1",
    )
    base = [sys.executable, "-m", "gwms_obs.cli", "import-rrd", str(tree), "--cutover", str(CUTOVER)]

    def sites(*extra: str) -> dict[str, set[str]]:
        out = subprocess.run([*base, *extra], check=True, capture_output=True, text=True, timeout=120).stdout
        by: dict[str, set[str]] = defaultdict(set)
        for series in parse(out).values():
            for labels in series:
                d = dict(labels)
                by[d["entry"]].add(d["site"])
        return dict(by)

    assert sites() == {ENTRY: {"T2_From_Descript"}, "other": {"unknown"}}
    assert sites("--site", f"{ENTRY}=Given", "--site", "other=Also") == {ENTRY: {"Given"}, "other": {"Also"}}


def test_bad_input_is_counted_and_the_rest_kept(tmp_path: Path) -> None:
    errors = ParseErrors()
    assert rrd.parse(b"<html>not an rrd</html>", "x.rrd", errors) is None
    assert rrd.parse(b"\x00\x01garbage", "y.rrd", errors) is None
    assert errors.counts[(rrd.SOURCE, "not_an_rrd")] == 2
    good = rrd.dump(str(FIXTURES / f"entry_{ENTRY}" / f"frontend_{CLIENT}" / "Status_Attributes.rrd"))
    # One row loses a value: it becomes a gap; the rows around it stay, at their times.
    row = re.search(rb"<row>(<v>[^<]*</v>)", good)
    assert row
    broken = good[: row.start(1)] + good[row.end(1) :]
    parsed = rrd.parse(broken, "z.rrd", errors)
    assert parsed is not None
    assert errors.counts[(rrd.SOURCE, "bad_row")] == 1
    whole = rrd.series(rrd.parse(good, "ok.rrd", ParseErrors()) or parsed)
    cut = rrd.series(parsed)
    for ds, pts in whole.items():
        assert len(pts) - len(cut[ds]) <= 1 and cut[ds][-1] == pts[-1]


def test_the_cli_wants_a_cutover_and_a_monitor_dir(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "gwms_obs.cli", "import-rrd"]
    r = subprocess.run([*base, str(FIXTURES)], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "--cutover" in r.stderr
    r = subprocess.run(
        [*base, str(tmp_path / "nope"), "--cutover", "2026-01-01"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "not a directory" in r.stderr
    (tmp_path / "entry_x" / "frontend_y").mkdir(parents=True)
    (tmp_path / "entry_x" / "frontend_y" / "Status_Attributes.rrd").write_bytes(b"not an rrd")
    r = subprocess.run(
        [*base, str(tmp_path), "--cutover", "2026-01-01"], check=False, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1 and "Status_Attributes.rrd" in r.stderr  # named, counted, nothing imported


def test_the_schedd_status_glideinwms_wrote_last_reads_as_the_last_update() -> None:
    """The same cycle's schedd_status.xml, which the live exporter reads: the import's last
    5-minute values continue into what export serves."""
    st = read_schedd_status(str(FIXTURES / f"entry_{ENTRY}" / "schedd_status.xml"), ParseErrors())
    assert st is not None and st.updated == LAST and st.entry == ENTRY
    fe = st.frontends[CLIENT]
    k = UPDATES - 1
    for prefix, got, words in (
        ("Status", fe.status, STATUS_STATES),
        ("Req", fe.requested, REQUESTED_KINDS),
        ("Client", fe.client_monitor, {**USER_JOB_STATES, **VO_GLIDEIN_STATES}),
    ):
        for attr in words:
            assert got[attr] == fed(k, prefix + attr), attr
    assert fe.status["Idle"] == sum(fe.status[a] for a in ("Wait", "Pending", "StageIn", "IdleOther"))


def test_what_is_imported_under_our_names_is_what_the_panels_say() -> None:
    """The dashboards' history notes (catalogue.RRD_IMPORTED) and the import's mappings are one set;
    the legacy families are never under our names."""
    ours = [
        *STATUS_ATTRIBUTES.values(),
        *FRONTEND_TOTAL.values(),
        *FRONTEND_FACTORY.values(),
        *FRONTEND_UNMATCHED.values(),
    ]
    assert {m for m, _ in ours} == set(catalogue.RRD_IMPORTED)
    assert {m for m, _ in STATUS_LEGACY.values()} <= set(catalogue.LEGACY_METRICS)
    assert not set(catalogue.LEGACY_METRICS) & set(catalogue.EXPORTER_METRICS)


def test_imported_series_carry_the_live_scrapes_job_and_instance(text: str) -> None:
    """The live exporter's series get job and instance from the prometheus role's scrape; the
    imported ones get the same by default, so the two are one series across the cutover (two
    series would both count in a panel's sum for the 5 minutes Prometheus looks back)."""
    defaults = render.role_defaults("prometheus")
    assert defaults["prometheus_exporter_job"] == SCRAPE_JOB
    assert defaults["prometheus_exporter_targets"] == [SCRAPE_INSTANCE]
    for series in parse(text).values():
        for labels in series:
            assert {k: v for k, v in labels if k in SCRAPE} == SCRAPE
    cmd = [sys.executable, "-m", "gwms_obs.cli", "import-rrd", str(FIXTURES), "--cutover", str(CUTOVER)]
    out = subprocess.run([*cmd, "--job", "", "--instance", "f1:9822"], check=True, capture_output=True, text=True)
    names = {k for series in parse(out.stdout).values() for labels in series for k, _ in labels}
    assert "job" not in names and "instance" in names
