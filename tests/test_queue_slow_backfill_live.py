"""GwmsEntryQueueSlow over a backfilled history (issue 33): the alert needs the entry's own past.

A simulated factory of 2 days (Nebraska as the busy healthy control, the operator's three
troubled entries), its long-queue entry 8 times slower for the last 20 hours of submissions;
its history made as an operator makes it (``report --format openmetrics``, promtool's
openmetrics backfill, the recording rules backfilled with promtool's rules backfill: see
tests/support/queue_backfill.py) into a real Prometheus. Our rules, rendered with a baseline of
1 day instead of 7 (config.Timing; thresholds, window and ``for:`` unchanged), fire
GwmsEntryQueueSlow at the long-queue entry alone, after its slowness began, and
GwmsEntrySubmitFailing at the entry whose submissions fail alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dashboards.gen import config, rules
from gwms_obs.simulate.scenario import DEFAULT_ENTRIES
from tests.support import queue_backfill as Q
from tests.support.servers import have

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not (have("prometheus") and have("promtool")), reason="Debian prometheus missing"),
]

SPAN, SLOW_HOURS, PILOTS = 48.0, 20.0, 1600
CONFIG = config.Config(timing=config.Timing(queue_baseline_range="1d"))


def test_the_long_queue_fires_on_its_backfilled_history(tmp_path: Path) -> None:
    healthy = DEFAULT_ENTRIES[0]  # weight 3: as busy as the long queue, so it could fire too
    Q.make_factory(tmp_path / "factory", PILOTS, 1, Q.cast(SPAN, SLOW_HOURS, others=(healthy,)), SPAN)
    labels = json.loads((tmp_path / "factory" / "anomalies.json").read_text())["anomalies"]
    (slow,) = [x for x in labels if x["kind"] == "queue_slow"]
    (failing,) = [x for x in labels if x["kind"] == "submit_failing"]
    alerts = {a.name: a for a in rules.alerts(CONFIG) if a.name in Q.ALERTS.values()}
    with Q.backfilled(tmp_path, tmp_path / "factory", CONFIG, list(alerts.values())) as b:
        assert b.blocks > 1
        queue = Q.firing(b.url, alerts[Q.ALERTS["queue_slow"]], b.start, b.end)
        submit = Q.firing(b.url, alerts[Q.ALERTS["submit_failing"]], b.start, b.end)
    assert set(queue) == {slow["entry"]}, queue
    assert queue[slow["entry"]] > slow["params"]["since"]  # not before the queue grew
    assert set(submit) == {failing["entry"]}, submit
