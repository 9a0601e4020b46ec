"""The dashboards' factory choice keeps every panel's data (issue 31), live: two factories' exporters
scraped by one real Prometheus with our rules, each target with its factory label (as a Prometheus
scraping several factories is told to, docs/tracing.md), and every panel query of every board run with
the factory variable set to one of them, not All. A recording rule that grouped its series without the
factory would leave its panels empty here (a chosen factory selects a label such a series lacks)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dashboards.gen import lint
from dashboards.gen import names as N
from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from tests.support import alert_scenario as S
from tests.support.local_stack import exporter, prometheus_config, rule_files
from tests.support.servers import have, prom_query, prometheus
from tools.polling import poll as wait
from tools.tracing_backends import free_port

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not have("prometheus"), reason="Debian prometheus missing"),
]

F = catalogue.FACTORY_LABEL
FACTORIES = ("factory-a", "factory-b")


def _factory(work: Path, seed: int) -> Path:
    """A simulated factory of the alerting scenario's entries (both factories have the same names),
    with an unreadable .out so the parse-error panels have a series."""
    factory = work / "factory"
    simulate(factory, 300, seed=seed, start=time.time() - 48 * 3600, entries=S.ENTRIES)
    (next(factory.glob(f"client/*/*/entry_{S.GOOD.name}")) / "job.999999.0.out").write_bytes(b"\x00garbage\n")
    return factory


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("two-factories-prom")
    ports = [free_port() for _ in FACTORIES]
    prom_port = free_port()
    cfg = yaml.safe_load(
        prometheus_config(rule_files(work), ports[0], prom_port, factory_name=FACTORIES[0], scrape_interval="1s")
    )
    # the exporter's job scrapes both, each target with its factory's label (prometheus_scrape_configs)
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == N.JOB_EXPORTER)
    assert job["static_configs"] == [{"targets": [f"127.0.0.1:{ports[0]}"], "labels": {F: FACTORIES[0]}}]
    job["static_configs"].append({"targets": [f"127.0.0.1:{ports[1]}"], "labels": {F: FACTORIES[1]}})
    with contextlib.ExitStack() as stack:
        for i, (name, port) in enumerate(zip(FACTORIES, ports, strict=True)):
            (work / name).mkdir()
            stack.enter_context(exporter(_factory(work / name, 5 + i), work / name, port))
        url = stack.enter_context(prometheus(work / "prom", yaml.safe_dump(cfg, sort_keys=False), port=prom_port))
        yield url


def _stack_own(where_query: str) -> bool:
    """Whether a query (as dashboard_queries_without_data names it) reads only the stack's own series."""
    names = lint.metric_names(where_query.split(": ", 1)[1])
    return bool(names) and all(n.startswith(("prometheus_", "alertmanager_")) for n in names)


@pytest.mark.parametrize("factory", FACTORIES)
def test_every_panel_has_data_for_a_chosen_factory(prom: str, factory: str) -> None:
    # both factories scraped, with their own label, and the recording rules keep it
    wait("both factories' series", lambda: len(prom_query(prom, f"count by ({F}) ({catalogue.PILOTS.name})")) == 2, 60)
    # trends (predict_linear) need a few evaluations of the recorded series
    wait(
        "three evaluations of the recorded series",
        lambda: prom_query(prom, f"min(count_over_time({N.RR_VALIDATION_RATIO}[10m])) >= 3"),
        60,
    )
    empty, _ = S.dashboard_queries_without_data(prom, collector=False, variables={F: factory})
    # The monitoring stack's own series (Prometheus's, Alertmanager's) are no factory's on a Prometheus
    # that scrapes several (only Thanos's external label names one): a chosen factory leaves them out.
    # Alerts: only while one of that factory's fires.
    fires = prom_query(prom, f'ALERTS{{{F}="{factory}",alertstate="firing"}}')
    empty = [q for q in empty if not (_stack_own(q) or (not fires and f"{N.ALERTS}{{" in q))]
    assert not empty, f"queries without data with factory={factory}:\n" + "\n".join(empty)
    # a per-entry recorded series is one per factory: two factories' entries of one name stay two
    rows = prom_query(prom, f'{N.RR_VALIDATION_RATIO}{{entry="{S.BAD.name}"}}')
    assert sorted(r["metric"][F] for r in rows) == sorted(FACTORIES)
