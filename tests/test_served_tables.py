"""One table from the catalogue to the ledger (accounting/ledger.py COUNTERS, HISTOGRAMS, ...)
serves /metrics, the history and OTLP; the collectors describe() what they collect."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gwms_obs import catalogue
from gwms_obs.accounting import ledger as L
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.outputs import history, otlp
from gwms_obs.outputs.prometheus import BuildInfoCollector, FactoryCollector, ForwarderCollector, exporter_registry
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing.outbox import ForwarderStats


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> Ingest:
    root = tmp_path_factory.mktemp("f")
    simulate(root, 150, seed=11)
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0.0))
    ing.scan()
    assert sum(ing.ledger.pilots.values()) > 0
    return ing


def _names(fams: Iterator[Metric] | list[Metric]) -> list[str]:
    return [f.name for f in fams]


@pytest.mark.parametrize("make", ["factory", "forwarder", "build"])
def test_each_collector_describes_what_it_collects(make: str, ingest: Ingest) -> None:
    c: Collector = {
        "factory": lambda: FactoryCollector(ingest, "f"),
        "forwarder": lambda: ForwarderCollector(ForwarderStats()),
        "build": BuildInfoCollector,
    }[make]()
    described = _names(c.describe())
    assert described, "a collector that describes nothing lets a duplicate name through"
    assert sorted(described) == sorted(_names(c.collect()))


def test_a_second_collector_of_a_catalogue_name_is_refused_at_registration(ingest: Ingest) -> None:
    reg = exporter_registry(ingest, ForwarderStats())

    class Clash(Collector):
        def describe(self) -> list[Metric]:
            return [CounterMetricFamily(catalogue.CPU_SECONDS.base, "again")]

        def collect(self) -> Iterator[Metric]:
            return iter(())

    with pytest.raises(ValueError, match="Duplicated timeseries"):
        reg.register(Clash())


def test_every_ledger_table_is_served_once_on_metrics(ingest: Ingest) -> None:
    served = _names(FactoryCollector(ingest).collect())
    tables = [t.metric.name for t in (*L.COUNTERS, *L.HISTOGRAMS, *L.GAUGES, *L.ENTRY_COUNTERS)]
    assert len(set(tables)) == len(tables)
    names = {m.name if m.type != "counter" else m.base for m in catalogue.EXPORTER_METRICS}
    for t in (*L.COUNTERS, *L.HISTOGRAMS, *L.GAUGES, *L.ENTRY_COUNTERS):
        want = t.metric.base if t.metric.type == "counter" else t.metric.name
        assert served.count(want) == 1, want
        assert want in names


def test_the_history_carries_every_table_accounts_fill(tmp_path: Path) -> None:
    simulate(tmp_path / "f", 60, seed=5)
    h = history.History(step=3600)
    Ingest(IngestConfig(factory_dir=str(tmp_path / "f"), settle_seconds=0.0), outlets=Outlets(accounts=h.add)).scan()
    assert h.accounts
    fams = {f.name for f in h.series()}
    tables = (*L.COUNTERS, *L.HISTOGRAMS)
    want = {t.metric.base if t.metric.type == "counter" else t.metric.name for t in tables if t.from_accounts}
    assert fams == want
    assert catalogue.PILOT_QUEUE_TIME.name not in fams  # needs the event log's times: said, not guessed


def test_otlp_names_the_histograms_it_cannot_carry(
    ingest: Ingest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # never reached: shut down first
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    with caplog.at_level(logging.WARNING, logger="gwms_obs.outputs.otlp"):
        provider = otlp.start_otlp(ingest)
    provider.shutdown(timeout_millis=1000)
    text = " ".join(r.getMessage() for r in caplog.records)
    hists = [m.name for m in catalogue.EXPORTER_METRICS if m.type == "histogram"]
    assert hists and all(t.metric.name in hists for t in L.HISTOGRAMS)
    assert all(n in text for n in hists), text
