"""The exporter daemon against a real Prometheus (Debian package) on 127.0.0.1.

`promtool check metrics` must find nothing in the exposition, and Prometheus
must scrape it and answer queries with the values the accounting computed.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from tests.support import local_stack
from tests.support.servers import free_port, have, http_get, prom_query, prometheus, wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not have("prometheus") or not have("promtool"), reason="Debian prometheus not installed"),
]


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factory")
    simulate(out, 400, seed=21)
    return out


@pytest.fixture(scope="module")
def exporter(factory: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with daemon(factory, tmp_path_factory.mktemp("exporter")) as url:
        yield url


def daemon(factory: Path, work: Path, log: str = "exporter.log") -> contextlib.AbstractContextManager[str]:
    """`gwms-obs export` as users start it (lost after the default hour, as expected() counts), its
    checkpoint in ``work``; yields its /metrics URL once the first scan is done."""
    return local_stack.exporter(factory, work, free_port(), interval=3600, lost_after_seconds=None, log=log)


def expected(factory: Path) -> Ingest:
    ing = Ingest(IngestConfig(factory_dir=str(factory), settle_seconds=0.0))
    ing.scan()
    return ing


def test_promtool_check_metrics_finds_nothing(exporter: str) -> None:
    body = http_get(exporter)
    r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60, check=False)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (r.stdout, r.stderr)
    text = body.decode()
    for m in catalogue.EXPORTER_METRICS:
        if m in (
            catalogue.LAG,
            catalogue.FILES_TRACKED,
            catalogue.BYTES_READ,
            catalogue.RECORDS,
            catalogue.PARSE_ERRORS,
        ):
            continue  # health series that may be empty on a clean tree
        if m in (catalogue.TRACE_SPOOLS, catalogue.TRACE_SPANS, catalogue.TRACE_REQUESTS, catalogue.TRACE_PACED):
            continue  # the span forwarder's: only when one runs (tests/test_trace_spool.py reads them)
        assert f"# TYPE {m.name} {m.type}" in text, m.name


def test_prometheus_scrapes_and_answers_with_the_accounting(exporter: str, factory: Path, tmp_path: Path) -> None:
    target = exporter.removeprefix("http://").removesuffix("/metrics")
    cfg = f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: gwms-obs
    static_configs: [{{targets: ["{target}"]}}]
"""
    ref = expected(factory).ledger
    with prometheus(tmp_path / "prom", cfg) as prom:
        res = wait_for(
            "the exporter's series in Prometheus",
            lambda: prom_query(prom, f"sum({catalogue.CPU_SECONDS.name})"),
            60,
            0.25,
        )
        assert float(res[0]["value"][1]) == pytest.approx(sum(ref.cpu.values()), rel=1e-9)
        by_cat = {
            r["metric"]["category"]: float(r["value"][1])
            for r in prom_query(
                prom, f'sum by (category) ({catalogue.CPU_SECONDS.name}{{entry=~".*FAIL_VALIDATION.*"}})'
            )
        }
        want: dict[str, float] = {}
        for k, v in ref.cpu.items():
            if "FAIL_VALIDATION" in k[0]:
                want[k[3]] = want.get(k[3], 0.0) + v
        assert by_cat == pytest.approx(want, rel=1e-9)
        assert by_cat["validation_failed"] > 0
        pilots = prom_query(prom, f'sum({catalogue.PILOTS.name}{{outcome="lost"}})')
        assert float(pilots[0]["value"][1]) == sum(v for k, v in ref.pilots.items() if k[3] == "lost")
        q = f"histogram_quantile(0.5, sum by (le) (rate({catalogue.PILOT_LIFETIME.name}_bucket[5m])))"
        assert prom_query(prom, f"sum({catalogue.PILOT_LIFETIME.name}_count)")[0]["value"][1] == str(
            sum(h.count for h in ref.lifetime.values())
        )
        assert prom_query(prom, q) is not None
        glideins = prom_query(prom, f'sum({catalogue.ENTRY_GLIDEINS.name}{{state="running"}})')
        assert float(glideins[0]["value"][1]) > 0
        assert prom_query(prom, "up{job='gwms-obs'}")[0]["value"][1] == "1"


def cpu_total(url: str) -> float:
    text = http_get(url).decode()
    return sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(catalogue.CPU_SECONDS.name + "{"))


def test_restart_keeps_counters(factory: Path, tmp_path: Path) -> None:
    """Stop the daemon and start it again on its checkpoint: the same totals, not double, not zero."""
    want = sum(expected(factory).ledger.cpu.values())
    with daemon(factory, tmp_path, "first.log") as url:
        assert cpu_total(url) == pytest.approx(want, rel=1e-9)
    assert (tmp_path / "checkpoint.json").exists()
    with daemon(factory, tmp_path, "second.log") as url:
        assert cpu_total(url) == pytest.approx(want, rel=1e-9)
