"""The VO frontend's status (issue 35 item 2): GlideinWMS-written frontend_status.xml in, gwms_frontend_* out.

The fixtures are a frontend's monitor dir written by GlideinWMS's own writers
(tools/glideinwms_frontend_fixtures.py); every value is recomputed here with
the script's ``fed`` for its last update, so each metric is checked against
what GlideinWMS was given, not against our reading of its file.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.core import Metric

from gwms_obs import catalogue
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.outputs import prometheus as P
from gwms_obs.outputs.prometheus import FactoryCollector
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest
from gwms_obs.sources.frontend_status import read_frontend_name, read_frontend_status, read_group_status
from tools import glideinwms_frontend_fixtures as FX

FIXTURES = Path(__file__).parent / "fixtures" / "glideinwms_frontend"
K = FX.UPDATES - 1  # the fixture is the monitor dir after the last update
SRC = catalogue.Source.FRONTEND_STATUS.value
CLIENTS = {"main": "vofe_example_frontend"}  # the factory's name of group main; gpu is left to the default


def series(fams: Iterable[Metric]) -> dict[str, dict[tuple[str, ...], float]]:
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for f in fams:
        for s in f.samples:
            out.setdefault(s.name, {})[tuple(s.labels.values())] = s.value
    return out


def scan(monitor: Path, clients: dict[str, str] | None = None) -> Ingest:
    ing = Ingest(IngestConfig(factory_dir="", frontend_monitor_dir=str(monitor), frontend_clients=clients or {}))
    ing.scan()
    return ing


def frontend_series(ing: Ingest) -> dict[str, dict[tuple[str, ...], float]]:
    names = {m.name for m in catalogue.FRONTEND_METRICS}
    return {n: v for n, v in series(FactoryCollector(ing).collect()).items() if n in names}


def expected(clients: dict[str, str]) -> dict[str, dict[tuple[str, ...], float]]:
    """What GlideinWMS was fed at the last update, under our names and labels."""
    want: dict[str, dict[tuple[str, ...], float]] = {m.name: {} for m in catalogue.FRONTEND_METRICS}
    want[catalogue.FRONTEND_UPDATED.name][()] = FX.update_time(K)

    def put(m: catalogue.MetricDef, labels: tuple[str, ...], names: dict[str, str], *key: str) -> None:
        for attr, label in names.items():
            want[m.name][(*labels, label)] = FX.fed(K, *key, attr)

    for group, entries in FX.GROUPS.items():
        client = clients.get(group, f"{FX.FRONTEND}.{group}")
        g = (group, client)
        want[catalogue.FRONTEND_GROUP_UPDATED.name][g] = FX.update_time(K)
        put(catalogue.FRONTEND_JOBS, g, P.FRONTEND_JOB_STATES, group, "Jobs")
        put(catalogue.FRONTEND_GLIDEINS, g, P.FRONTEND_GLIDEIN_STATES, group, "Glideins")
        put(catalogue.FRONTEND_UNMATCHED_JOBS, g, P.FRONTEND_MATCHED_JOB_STATES, group, "Unmatched", "MatchedJobs")
        for entry, down in entries:
            name = FX.glideid(entry)
            e = (entry, client, group, f"{FX.GLIDEIN}@{FX.FACTORY}@{FX.FACTORY_NODE}")
            put(catalogue.FRONTEND_ENTRY_JOBS, e, P.FRONTEND_MATCHED_JOB_STATES, group, name, "MatchedJobs")
            glideins = {a: s for a, s in P.FRONTEND_MATCHED_GLIDEIN_STATES.items()}
            put(catalogue.FRONTEND_ENTRY_GLIDEINS, e, glideins, group, name, "MatchedGlideins")
            # logMatchedGlideins is given the cores too: TotalCores, IdleCores, RunningCores.
            cores = {f"{a}Cores": s for a, s in P.FRONTEND_CORE_STATES.items()}
            put(catalogue.FRONTEND_ENTRY_CORES, e, cores, group, name, "MatchedGlideins")
            put(catalogue.FRONTEND_ENTRY_REQUESTED, e, P.FRONTEND_REQUESTED_KINDS, group, name, "Requested")
            want[catalogue.FRONTEND_ENTRY_DOWN.name][e] = 1.0 if down else 0.0
    return want


def test_the_metrics_equal_what_glideinwms_was_fed() -> None:
    ing = scan(FIXTURES, CLIENTS)
    assert not ing.errors.counts, ing.errors.counts
    assert frontend_series(ing) == expected(CLIENTS)
    assert ing.health.records[catalogue.Source.FRONTEND_STATUS] == 1 + len(FX.GROUPS)  # the frontend-wide file too


def test_the_frontend_wide_totals_are_the_sum_of_the_groups() -> None:
    """The aggregate GlideinWMS wrote (aggregateStatus) equals the sum of our per-group series."""
    from defusedxml.ElementTree import parse

    total = parse(FIXTURES / "frontend_status.xml").getroot().find("total")
    assert total is not None
    got = frontend_series(scan(FIXTURES))
    for cls, metric, names in (
        ("Jobs", catalogue.FRONTEND_JOBS, P.FRONTEND_JOB_STATES),
        ("Glideins", catalogue.FRONTEND_GLIDEINS, P.FRONTEND_GLIDEIN_STATES),
    ):
        el = total.find(cls)
        assert el is not None
        for attr, label in names.items():
            ours = sum(v for k, v in got[metric.name].items() if k[-1] == label)
            assert ours == int(el.get(attr, "-1")), (cls, attr)
    # Requested: the frontend's total is the sum over every group's entries.
    el = total.find("Requested")
    assert el is not None
    for attr, kind in P.FRONTEND_REQUESTED_KINDS.items():
        ours = sum(v for k, v in got[catalogue.FRONTEND_ENTRY_REQUESTED.name].items() if k[-1] == kind)
        assert ours == int(el.get(attr, "-1")), attr


def test_the_readers_on_the_glideinwms_files() -> None:
    errors = ParseErrors()
    assert read_frontend_name(str(FIXTURES / "descript.xml"), errors) == FX.FRONTEND
    wide = read_frontend_status(str(FIXTURES / "frontend_status.xml"), errors)
    assert wide is not None and wide.updated == FX.update_time(K) and sorted(wide.groups) == sorted(FX.GROUPS)
    st = read_group_status(str(FIXTURES / "group_main" / "frontend_status.xml"), errors)
    assert st is not None and st.group == "main" and set(st.states) == set(FX.STATES)
    assert {e for e, _ in st.factories} == {e for e, _ in FX.GROUPS["main"]}
    assert not errors.counts


@pytest.fixture
def monitor(tmp_path: Path) -> Path:
    d = tmp_path / "monitor"
    shutil.copytree(FIXTURES, d)
    return d


def test_a_corrupt_group_file_is_counted_with_its_place_and_the_rest_kept(
    monitor: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ing = Ingest(IngestConfig(factory_dir="", frontend_monitor_dir=str(monitor)))
    ing.scan()
    before = frontend_series(ing)
    bad = monitor / "group_main" / "frontend_status.xml"
    text = bad.read_text(encoding="latin-1")
    bad.write_text(text[: len(text) // 2], encoding="latin-1")  # the frontend died mid-write
    (monitor / "group_gpu" / "frontend_status.xml").write_text(
        text.replace('<Jobs Idle="', '<Jobs Idle="nan" X="'), encoding="latin-1"
    )
    shutil.copy(FIXTURES / "group_gpu" / "frontend_status.xml", monitor / "group_gpu" / "gone.xml")
    with caplog.at_level("WARNING"):
        ing.scan()
    assert ing.errors.counts[(SRC, "bad_xml")] == 1
    assert any(str(bad) in r.getMessage() and "line" in r.getMessage() for r in caplog.records), caplog.text
    after = frontend_series(ing)
    # group main keeps its last good values; group gpu's new file is read, its one bad value skipped.
    main = {n: {k: v for k, v in s.items() if "main" in k} for n, s in after.items()}
    assert main == {n: {k: v for k, v in s.items() if "main" in k} for n, s in before.items()}
    assert ing.errors.counts[(SRC, "bad_value")] == 1
    jobs = after[catalogue.FRONTEND_JOBS.name]
    gpu = ("gpu", f"{FX.FRONTEND}.gpu")
    assert (*gpu, "idle") not in jobs and jobs[(*gpu, "running")] == FX.fed(K, "main", "Jobs", "Running")


def test_hostile_names_and_roots_are_counted_not_served(monitor: Path) -> None:
    p = monitor / "group_main" / "frontend_status.xml"
    text = p.read_text(encoding="latin-1")
    entry = FX.glideid(FX.GROUPS["main"][0][0])
    text = text.replace(entry, "no-at-sign", 1).replace('name="Unmatched"', 'name="Forged"', 1)
    p.write_text(text, encoding="latin-1")
    (monitor / "group_gpu" / "frontend_status.xml").write_text("<glideFactoryEntryQStats/>")
    (monitor / "frontend_status.xml").write_text('<!DOCTYPE x [<!ENTITY a "b">]><VOFrontendStats>&a;</VOFrontendStats>')
    ing = scan(monitor)
    c = ing.errors.counts
    assert (c[(SRC, "bad_name")], c[(SRC, "bad_root")], c[(SRC, "xml_forbidden")]) == (2, 1, 1)
    got = frontend_series(ing)
    entries = {k[0] for k in got[catalogue.FRONTEND_ENTRY_REQUESTED.name]}
    assert entries == {FX.GROUPS["main"][1][0]}  # the other entry of main, read as written
    assert catalogue.FRONTEND_UNMATCHED_JOBS.name not in got and catalogue.FRONTEND_UPDATED.name not in got


def test_a_factory_host_serves_the_families_empty(tmp_path: Path) -> None:
    """Without frontend_monitor_dir the stage reads nothing; the families are there, empty."""
    ing = Ingest(IngestConfig(factory_dir=str(tmp_path)))
    ing.scan()
    names = {f.name for f in FactoryCollector(ing).collect()}
    assert {m.name for m in catalogue.FRONTEND_METRICS} <= names
    assert not any(frontend_series(ing).values())


def test_the_simulated_frontends_join_the_factory_on_entry_and_client(tmp_path: Path) -> None:
    """The simulator's frontends ask what the factory's schedd_status.xml says it was asked: the
    frontend's requested glideins and the factory's join on (entry, client) and agree."""
    from gwms_obs.simulate.factory import simulate
    from gwms_obs.simulate.scenario import CLIENTS

    simulate(tmp_path / "f", 200, seed=3)
    factory = series(FactoryCollector(scan_factory(tmp_path / "f")).collect())
    asked = {k[:2]: v for k, v in factory[catalogue.ENTRY_REQUESTED.name].items() if k[-1] == "idle"}
    fronts = sorted((tmp_path / "f" / "frontend").iterdir())
    assert fronts
    joined = 0
    for d in fronts:
        clients = {c.group: c.log_name for c in CLIENTS.values() if c.client_name.startswith(d.name + ".")}
        ing = scan(d / "monitor", clients)
        assert not ing.errors.counts
        for k, v in frontend_series(ing)[catalogue.FRONTEND_ENTRY_REQUESTED.name].items():
            if k[-1] == "idle":
                assert asked[k[:2]] == v, k
                joined += 1
    assert joined == len(asked)


def scan_factory(factory: Path) -> Ingest:
    ing = Ingest(IngestConfig(factory_dir=str(factory), settle_seconds=0.0))
    ing.scan()
    return ing


_GROUP = (FIXTURES / "group_main" / "frontend_status.xml").read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=300), at=st.integers(0, len(_GROUP)), cut=st.integers(0, len(_GROUP)))
def test_any_bytes_spliced_into_a_group_file_are_counted_never_raised(
    tmp_path: Path, junk: bytes, at: int, cut: int
) -> None:
    """Whatever a half-written or corrupt file holds, the reader returns a status or None (counted)."""
    d = tmp_path / "m" / f"group_g{at}_{cut}_{len(junk)}"
    d.mkdir(parents=True, exist_ok=True)
    p = d / "frontend_status.xml"
    p.write_bytes((_GROUP[:at] + junk + _GROUP[at:])[: max(cut, at)])
    errors = ParseErrors()
    st_ = read_group_status(str(p), errors)
    if st_ is None:
        assert errors.counts
    else:
        assert all(v >= 0 for m in st_.factories.values() for v in m.requested.values())


def test_a_group_removed_from_the_frontend_leaves_with_its_series(monitor: Path) -> None:
    ing = Ingest(IngestConfig(factory_dir="", frontend_monitor_dir=str(monitor)))
    ing.scan()
    groups = {k[0] for k in frontend_series(ing)[catalogue.FRONTEND_JOBS.name]}
    assert groups == set(FX.GROUPS)
    shutil.rmtree(monitor / "group_gpu")
    ing.scan()
    got = frontend_series(ing)
    assert {k[0] for k in got[catalogue.FRONTEND_JOBS.name]} == {"main"}
    assert {k[0] for k in got[catalogue.FRONTEND_GROUP_UPDATED.name]} == {"main"}


def test_a_monitor_dir_gone_keeps_every_groups_last_values(monitor: Path) -> None:
    ing = Ingest(IngestConfig(factory_dir="", frontend_monitor_dir=str(monitor)))
    ing.scan()
    before = frontend_series(ing)
    monitor.rename(monitor.with_name("moved"))
    ing.scan()
    assert frontend_series(ing) == before  # their time ages: GwmsFrontendInfoStale says so
    assert ing.errors.counts[(SRC, "unreadable_dir")] == 1
