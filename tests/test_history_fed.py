"""`report --format openmetrics` carries the time in queue and the factory log's counts (outputs/history.py):
what GwmsEntryQueueSlow and GwmsEntrySubmitFailing read, so a backfilled history can fire them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.accounting.ledger import Ledger
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from tests.test_history import samples

STEP = 900.0


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factory")
    simulate(out, 300, seed=4, anomalies=True)  # the operator's entries: a long queue, condor_submit failing
    return out


@pytest.fixture(scope="module")
def text(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("history") / "h.om"
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(tree), "--format", "openmetrics"]
    subprocess.run([*cmd, "--step", f"{STEP:g}", "-o", str(out)], check=True, timeout=300, capture_output=True)
    return out.read_text()


@pytest.fixture(scope="module")
def led(tree: Path) -> Ledger:
    """What the exporter serves for the tree: a one-shot scan's ledger."""
    ing = Ingest(IngestConfig(factory_dir=str(tree), settle_seconds=0.0))
    ing.scan()
    return ing.ledger


def _last(text: str, name: str, keys: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    return {tuple(dict(k)[x] for x in keys): v[-1][1] for k, v in samples(text, name).items()}


def test_the_queue_time_ends_as_the_exporter_serves_it(led: Ledger, text: str) -> None:
    assert sum(h.count for h in led.queue.values()) > 100  # the scan knows most pilots' queue times
    for fam, table in ((catalogue.PILOT_QUEUE_TIME, led.queue), (catalogue.PILOT_GRID_QUEUE_TIME, led.grid_queue)):
        count = _last(text, fam.name + "_count", ("entry", "client", "site"))
        total = _last(text, fam.name + "_sum", ("entry", "client", "site"))
        assert count == {k: float(h.count) for k, h in table.items()}
        assert total == pytest.approx({k: h.total for k, h in table.items()}, rel=1e-9)
    # each bucket too (the median the rules take is histogram_quantile over them)
    buckets = samples(text, catalogue.PILOT_QUEUE_TIME.name + "_bucket")
    for k, series in buckets.items():
        d = dict(k)
        h = led.queue[(d["entry"], d["client"], d["site"])]
        assert series[-1][1] == dict(h.cumulative())[d["le"]]


def test_the_queue_grows_with_the_pilots_ending(text: str) -> None:
    slow = "Fermilab_LONGQUEUE_ce"
    series = [
        s for k, s in samples(text, catalogue.PILOT_QUEUE_TIME.name + "_count").items() if dict(k)["entry"] == slow
    ]
    assert series
    values = [v for s in series for _, v in s]
    assert values[0] < values[-1] and values == sorted(values)


def test_the_factory_logs_counts_end_as_the_exporter_serves_them(led: Ledger, text: str) -> None:
    assert led.submit_failures and led.submitted and led.removed
    assert _last(text, catalogue.SUBMIT_FAILURES.name, ("entry", "site")) == {
        k: float(v) for k, v in led.submit_failures.items()
    }
    assert _last(text, catalogue.GLIDEINS_SUBMITTED.name, ("entry", "client", "site")) == {
        k: float(v) for k, v in led.submitted.items()
    }
    assert _last(text, catalogue.GLIDEINS_REMOVED.name, ("entry", "site", "reason")) == {
        k: float(v) for k, v in led.removed.items()
    }
