"""The /metrics renderer's CPU budget (outputs/prometheus.py, issue 34): after one large render a
tick's small change is still served within the renderer's gap, while renders that keep costing
more than RENDER_SHARE of the time wait for the budget to refill."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.outputs import prometheus
from gwms_obs.outputs.prometheus import Exposition
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from tools.polling import poll


@pytest.fixture
def expo(tmp_path: Path) -> Iterator[Exposition]:
    simulate(tmp_path / "factory", 40, seed=3)
    ing = Ingest(IngestConfig(str(tmp_path / "factory"), settle_seconds=0, final=True, lost_after_seconds=0))
    ing.scan()
    e = Exposition(ing, min_gap=0.05, poll=0.02)
    e.start()
    try:
        yield e
    finally:
        e.stop()


def _change(e: Exposition) -> int:
    with e.ingest.lock:
        e.ingest.ledger.version += 1
    return e.renders


def test_a_small_change_after_a_large_render_is_rendered_within_the_gap(expo: Exposition) -> None:
    # As after a first scan's render at 300,000 pilots: 0.8 s of CPU spent (2 s wall on a loaded machine),
    # which spaced by its own cost held the next render back 18 s.
    with expo._render_lock:
        expo._budget = prometheus.RENDER_BURST - 0.8
        expo.last_render_seconds = 2.0
        expo._last_end = time.monotonic()
    before = _change(expo)
    poll("the tick's change rendered", lambda: expo.renders > before, 2.0, 0.01)


def test_renders_wait_while_the_budget_is_spent(expo: Exposition) -> None:
    with expo._render_lock:
        expo._budget = -0.3  # renders took 0.3 s of CPU more than the budget had: 3 s to refill
        expo._last_end = time.monotonic()
    before = _change(expo)
    time.sleep(1.0)
    assert expo.renders == before  # the renderer's polls saw the change and left it
    expo.changed()  # a scan's end is served at once, budget or not
    poll("the scan's end rendered", lambda: expo.renders > before, 5.0, 0.01)


def test_the_budget_is_charged_with_each_render_and_refills(expo: Exposition) -> None:
    with expo._render_lock:
        expo._budget = 1.0
        expo._last_end = time.monotonic()
    _change(expo)
    assert expo.refresh()
    spent = 1.0 - expo._budget  # the render's CPU (and at most a few ms of refill)
    assert 0 < spent < 1.0
    assert expo._credit(expo._last_end + 5.0) == pytest.approx(min(prometheus.RENDER_BURST, expo._budget + 0.5))
    assert expo._credit(expo._last_end + 1e6) == prometheus.RENDER_BURST


def _keys(e: Exposition) -> set[str]:
    with e._lock:
        return {"om" if k == e._prometheus else "other" for k in e._wanted}


def test_an_encoding_not_scraped_lately_is_no_longer_rendered(
    expo: Exposition, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prometheus, "WANTED_SECONDS", 0.3)
    _, text = expo.answer(None, None)  # the classic text, as a person's curl asks
    assert _keys(expo) == {"om", "other"}
    time.sleep(0.4)
    _change(expo)
    assert expo.refresh()
    assert _keys(expo) == {"om"}  # Prometheus' OpenMetrics always; the text no longer with every change
    assert len(expo._current.bodies) == 1 if expo._current is not None else False
    # Asked again: rendered whole for this change, served, and rendered with every change again.
    _, again = expo.answer(None, None)
    per_scrape = b"# HELP " + catalogue.PARSE_ERRORS.base.encode()  # what follows moves with the clock
    assert per_scrape in again and again.split(per_scrape)[0] == text.split(per_scrape)[0]
    assert _keys(expo) == {"om", "other"}
    _change(expo)
    assert expo.refresh()
    assert len(expo._current.bodies) == 2 if expo._current is not None else False
