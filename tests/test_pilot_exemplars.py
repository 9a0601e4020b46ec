"""The pilot histograms' exemplars (each bucket's last pilot, by its trace id) and the queue-time histogram."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import make_wsgi_app
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gwms_obs import catalogue
from gwms_obs.accounting.ledger import Ledger
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.outputs.http import MetricsServer, SharedRenders
from gwms_obs.outputs.prometheus import exporter_registry
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import SimulationSummary, simulate
from tests.test_pilot_traces import Box, Pilot
from tools.tracing_backends import free_port

FACTORY = "exemplarfactory"
HISTOGRAMS = (
    catalogue.PILOT_LIFETIME,
    catalogue.PILOT_VALIDATION,
    catalogue.PILOT_QUEUE_TIME,
    catalogue.PILOT_GRID_QUEUE_TIME,
)
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationSummary]:
    out = tmp_path_factory.mktemp("factory")
    return out, simulate(out, 150, seed=37, ground_truth=True)


@pytest.fixture(scope="module")
def daemon(
    sim: tuple[Path, SimulationSummary], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Ingest, dict[str, Pilot]]:
    """One scan counts every pilot, the event log read before the .out files (their queue time);
    the traces built are kept by trace id."""
    cp = str(tmp_path_factory.mktemp("cp") / "cp.json")
    box = Box()
    sink = P.PilotTraces(box, FACTORY)
    ing = Ingest(
        IngestConfig(str(sim[0]), checkpoint=cp, settle_seconds=0, final=True, lost_after_seconds=0),
        outlets=Outlets(traces=sink),
    )
    ing.scan()
    sink.flush()
    traces = {}
    for req in box.requests:
        for rs in req["resourceSpans"]:
            p = Pilot(rs)
            traces[p.spans[0]["traceId"]] = p
    assert len(traces) == sink.built == len(ing.seen)
    return ing, traces


def _exemplars(text: str) -> list[tuple[str, dict[str, str], float, float, str, float]]:
    """(metric, series labels, le, bucket count, trace id, exemplar value) of each exemplar in an exposition."""
    out = []
    for fam in text_string_to_metric_families(text):  # type: ignore[no-untyped-call]
        for s in fam.samples:
            if s.exemplar is not None:
                labels = {k: v for k, v in s.labels.items() if k != "le"}
                tid = s.exemplar.labels[catalogue.EXEMPLAR_TRACE_ID]
                out.append((fam.name, labels, float(s.labels["le"]), s.value, tid, s.exemplar.value))
    return out


def test_queue_time_is_submit_to_first_execute(
    sim: tuple[Path, SimulationSummary], daemon: tuple[Ingest, dict[str, Pilot]]
) -> None:
    ing, _ = daemon
    truth = {(t.entry, t.cluster, t.proc): t for t in sim[1].ground_truth or []}
    # Every pilot counted whose submit and execute the event log holds, once: the simulator's truth.
    ran = [
        t
        for t in truth.values()
        if f"{t.entry}/{t.cluster}.{t.proc}" in ing.seen and t.executing is not None and t.submitted
    ]
    queue = ing.books.ledger.queue
    assert sum(h.count for h in queue.values()) == len(ran) > 50
    assert sum(h.total for h in queue.values()) == pytest.approx(sum((t.executing or 0) - t.submitted for t in ran))
    # ... and survives a restart on the checkpoint (the exemplars do not: they are examples).
    back = Ledger.from_json(ing.books.ledger.to_json())
    assert {k: (h.counts, h.total) for k, h in back.queue.items()} == {k: (h.counts, h.total) for k, h in queue.items()}


def test_every_bucket_with_pilots_has_an_exemplar_naming_a_built_trace(
    daemon: tuple[Ingest, dict[str, Pilot]],
) -> None:
    ing, traces = daemon
    text = generate_openmetrics(exporter_registry(ing, factory=FACTORY)).decode()  # type: ignore[no-untyped-call]
    found = _exemplars(text)
    names = {m.name for m in HISTOGRAMS}
    assert {f for f, *_ in found} == names
    led = ing.books.ledger
    for m, table in zip(HISTOGRAMS, (led.lifetime, led.validation, led.queue, led.grid_queue), strict=True):
        # One exemplar per bucket that a pilot fell in (a pilot whose bucket is empty has none).
        filled = sum(1 for h in table.values() for c in h.counts if c)
        assert sum(1 for f, *_ in found if f == m.name) == filled, m.name
    for metric, labels, le, _, tid, v in found:
        p = traces[tid]  # the trace the exporter built for that pilot
        r = p.resource
        assert (labels["entry"], labels["site"]) == (r["gwms.entry"], r["gwms.site"])
        assert v <= le
        if metric == catalogue.PILOT_QUEUE_TIME.name:  # the queue span is that pilot's queue time
            q = p.one(P.SPAN_QUEUED)
            assert (int(q["endTimeUnixNano"]) - int(q["startTimeUnixNano"])) / P.NS == pytest.approx(v)
        if metric == catalogue.PILOT_LIFETIME.name:
            run = p.one(P.SPAN_RUNNING)
            assert (int(run["endTimeUnixNano"]) - int(run["startTimeUnixNano"])) / P.NS == pytest.approx(v)


def test_no_exemplar_without_traces_nor_in_the_classic_format(daemon: tuple[Ingest, dict[str, Pilot]]) -> None:
    ing, _ = daemon
    plain = generate_openmetrics(exporter_registry(ing)).decode()  # type: ignore[no-untyped-call]
    assert catalogue.PILOT_QUEUE_TIME.name + "_bucket" in plain and " # {" not in plain
    classic = generate_latest(exporter_registry(ing, factory=FACTORY)).decode()
    assert catalogue.PILOT_QUEUE_TIME.name + "_bucket" in classic and "trace_id" not in classic


@pytest.fixture
def served(daemon: tuple[Ingest, dict[str, Pilot]]) -> Iterator[str]:
    port = free_port()
    server = MetricsServer(
        "127.0.0.1", port, SharedRenders(make_wsgi_app(exporter_registry(daemon[0], factory=FACTORY)))
    )
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        server.close()


def _get(url: str, accept: str) -> tuple[str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["Content-Type"], r.read().decode()


def test_metrics_server_negotiates_openmetrics_on_the_accept_header(served: str) -> None:
    # What Prometheus sends: OpenMetrics first, the classic text format as a fallback.
    ctype, body = _get(served, f"{OPENMETRICS};q=0.9,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    assert ctype.startswith("application/openmetrics-text") and body.endswith("# EOF\n")
    assert len(_exemplars(body)) > 10
    ctype, body = _get(served, "text/plain;version=0.0.4")
    assert ctype.startswith("text/plain") and "trace_id" not in body
