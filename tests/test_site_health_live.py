"""The red light, live: a black-hole site turns failing and only its admins are mailed.

Real processes on 127.0.0.1: a simulated factory with a healthy site
(Nebraska) and a black hole (BlackHoleSite: its pilots' jobs die at once) ->
the exporter -> Prometheus with our rules (windows in seconds, config.Timing)
-> Alertmanager with our routing -> an SMTP sink. Half of the black hole's
pilots are held back until Prometheus has a baseline, then released: the
site's status turns failing with reason black_hole, its admins get the
GwmsSiteFailing mail naming the reason and the entry, Nebraska stays green
and its admins get nothing. While it fails, every query of the Site health
dashboard returns data (the pilot-phase panel aside: no collector here).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards import gen
from dashboards.gen import dashboards as D
from dashboards.gen import health, lint
from dashboards.gen import names as N
from gwms_obs import catalogue
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from tests.support import alert_scenario as S
from tests.support.local_stack import alerting_stack
from tests.support.servers import (
    SmtpSink,
    have,
    prom_query,
    wait_for,
)

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (have("prometheus") and have("prometheus-alertmanager")), reason="Debian prometheus/alertmanager missing"
    ),
]

GOOD = DEFAULT_ENTRIES[0]
HOLE = next(e for e in DEFAULT_ENTRIES if "BLACKHOLE" in e.name)
GOOD_ADMIN, HOLE_ADMIN = "admin@nebraska.test", "admin@blackhole.test"
CONTACTS = {
    "factory_ops": ["ops@factory.test"],
    "sites": {
        GOOD.site: {"admins": [GOOD_ADMIN], "entries": [GOOD.name]},
        HOLE.site: {"admins": [HOLE_ADMIN], "entries": [HOLE.name]},
    },
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SmtpSink, Path, Path]]:
    work = tmp_path_factory.mktemp("site-health")
    factory, held = work / "factory", work / "held"
    simulate(factory, 300, seed=11, start=time.time() - 48 * 3600, entries=(GOOD, HOLE))
    assert S.hold_back(factory, held, HOLE.name) >= 20
    with alerting_stack(work, factory, CONTACTS) as st:
        yield st.prometheus, st.sink, factory, held


def _status(prom: str) -> dict[str, float]:
    return {r["metric"]["site"]: float(r["value"][1]) for r in prom_query(prom, N.RR_SITE_STATUS)}


def test_a_black_hole_turns_its_site_red_and_mails_its_admins_only(stack: tuple[str, SmtpSink, Path, Path]) -> None:
    prom, sink, factory, held = stack
    failed = f'{catalogue.USER_JOBS.name}{{entry="{HOLE.name}",category="misconfiguration_badput"}}'
    wait_for("a baseline of the black hole's jobs", lambda: prom_query(prom, f"count_over_time({failed}[1m]) >= 3"), 90)
    assert wait_for("every site green", lambda: _status(prom) == {GOOD.site: 0.0, HOLE.site: 0.0} or None, 60)
    S.release(held, factory)
    wait_for("the black hole failing", lambda: _status(prom).get(HOLE.site) == health.Status.FAILING or None, 60)
    problems = prom_query(prom, f'{N.RR_SITE_PROBLEM}{{site="{HOLE.site}"}}')
    reasons = {r["metric"]["reason"]: float(r["value"][1]) for r in problems}
    assert reasons.get(health.Reason.BLACK_HOLE) == health.Status.FAILING, reasons
    assert _status(prom)[GOOD.site] == health.Status.OK
    fired = wait_for("the site admins' mail", lambda: S.to(sink.mails(), HOLE_ADMIN, "FIRING"), 60)
    assert any("GwmsSiteFailing" in s and HOLE.site in s for s in fired), fired
    mail = next(m for m in sink.mails() if HOLE_ADMIN in m.rcpt_tos and "GwmsSiteFailing" in m.subject)
    assert f"black_hole at {HOLE.name}" in mail.body
    # While it fails, every Site health query has data.
    board = json.loads(gen.render_all()[f"dashboards/grafana/{D.SITE_HEALTH}.json"])
    empty = []
    for where, expr in lint.dashboard_exprs(board):
        if lint.metric_names(expr) & N.COLLECTOR_NAMES:
            continue  # the pilot-phase panel: no collector in this test
        q = lint.substitute(expr.replace("$__rate_interval", "30s").replace("$__range", "5m"), S.GRAFANA_VARS)
        if not prom_query(prom, q):
            empty.append(f"{where}: {q}")
    assert not empty, "queries without data while a site fails:\n" + "\n".join(empty)
    # Nobody else was told about the black hole.
    assert not [m for m in sink.mails() if GOOD_ADMIN in m.rcpt_tos]
    assert not [m for m in sink.mails() if "ops@factory.test" in m.rcpt_tos and "GwmsSiteFailing" in m.subject]
