"""The factory operator's alerts, live (issue 33): a CE refusing the factory turns its site red.

Real processes on 127.0.0.1: a simulated factory with a healthy site (Nebraska), the CE that
refuses the factory's credentials (AuthFailSite: nine glideins in ten held at submission with the
HTCondor-C GAHP's AUTHENTICATE error) and a CE that HTCondor-G found down 45 minutes before
the snapshot (CeDownSite: the gridmanager's 026 in its event log, no 025 yet) -> the exporter ->
Prometheus with our rules (windows in seconds, config.Timing) -> Alertmanager with our routing ->
an SMTP sink. AuthFailSite's light turns red with reason ``held``, its admins get
GwmsEntryMostlyHeld naming the class ``auth_failed``; CeDownSite's get GwmsEntryCeUnreachable;
Nebraska's get nothing. Every query of the panels on these metrics returns data.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards.gen import health
from dashboards.gen import names as N
from dashboards.gen.boards.common import ENTRY_HEALTH
from gwms_obs import catalogue
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from gwms_obs.simulate.scenario import OPERATOR_ENTRIES
from tests.support import alert_scenario as S
from tests.support.local_stack import alerting_stack
from tests.support.servers import SmtpSink, have, prom_query, wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (have("prometheus") and have("prometheus-alertmanager")), reason="Debian prometheus/alertmanager missing"
    ),
]

GOOD = DEFAULT_ENTRIES[0]
AUTH = dataclasses.replace(OPERATOR_ENTRIES[0], weight=3.0)  # enough glideins held at the snapshot
DOWN = OPERATOR_ENTRIES[1]
GOOD_ADMIN, AUTH_ADMIN, DOWN_ADMIN = "admin@nebraska.test", "admin@authfail.test", "admin@cedown.test"
CONTACTS = {
    "factory_ops": ["ops@factory.test"],
    "sites": {
        GOOD.site: {"admins": [GOOD_ADMIN], "entries": [GOOD.name]},
        AUTH.site: {"admins": [AUTH_ADMIN], "entries": [AUTH.name]},
        DOWN.site: {"admins": [DOWN_ADMIN], "entries": [DOWN.name]},
    },
}
# The metrics of issue 33 the panels draw: each of their queries must return data.
MINE = {
    f"{m.name}{suffix}"
    for m in (
        catalogue.HOLDS,
        catalogue.HELD_GLIDEINS,
        catalogue.HELD_SECONDS,
        catalogue.PILOT_GRID_QUEUE_TIME,
        catalogue.ENTRY_CE_DOWN,
        catalogue.ENTRY_CE_DOWN_SINCE,
    )
    for suffix in (("_bucket", "_sum", "_count") if m.type == "histogram" else ("",))
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SmtpSink, Path, Path]]:
    work = tmp_path_factory.mktemp("operator")
    factory, held = work / "factory", work / "held"
    now = time.time()
    simulate(factory, 400, seed=11, end=now, entries=(GOOD, AUTH, DOWN))
    # Half of Nebraska's pilots come back after the exporter has read the event log, as in a factory
    # that runs (a backfill counts the .out files before it reads the log: no queue times then).
    assert S.hold_back(factory, held, GOOD.name) >= 20
    with alerting_stack(work, factory, CONTACTS) as st:
        yield st.prometheus, st.sink, factory, held


def _problems(prom: str, site: str) -> dict[str, float]:
    rows = prom_query(prom, f'{N.RR_SITE_PROBLEM}{{site="{site}"}}')
    return {r["metric"]["reason"]: float(r["value"][1]) for r in rows}


def test_a_refusing_ce_turns_its_site_red_and_mails_its_admins_the_class(
    stack: tuple[str, SmtpSink, Path, Path],
) -> None:
    prom, sink, _, _ = stack
    wait_for(
        "AuthFailSite red with reason held",
        lambda: _problems(prom, AUTH.site).get(health.Reason.HELD) == health.Status.FAILING or None,
        90,
    )
    status = {r["metric"]["site"]: float(r["value"][1]) for r in prom_query(prom, N.RR_SITE_STATUS)}
    assert status[AUTH.site] == health.Status.FAILING and status[GOOD.site] == health.Status.OK, status
    top = prom_query(prom, f'{N.RR_HELD_TOP_CLASS}{{entry="{AUTH.name}"}}')
    assert [r["metric"]["class"] for r in top] == [catalogue.HoldClass.AUTH_FAILED.value]

    def held_mail() -> list[str] | None:
        return [s for s in S.to(sink.mails(), AUTH_ADMIN, "FIRING") if "GwmsEntryMostlyHeld" in s] or None

    wait_for("the AuthFailSite admins' mail", held_mail, 60)
    mail = next(m for m in sink.mails() if AUTH_ADMIN in m.rcpt_tos and "GwmsEntryMostlyHeld" in m.subject)
    assert "auth_failed" in mail.body and AUTH.name in mail.body
    # The CE found down 45 minutes ago: its site's admins are told, with the CE's own alert.
    wait_for(
        "the CeDownSite admins' mail",
        lambda: [s for s in S.to(sink.mails(), DOWN_ADMIN, "FIRING") if "GwmsEntryCeUnreachable" in s] or None,
        60,
    )
    assert _problems(prom, DOWN.site).get(health.Reason.CE_UNREACHABLE) == health.Status.FAILING
    # Nobody else was told about the holds; the healthy site about nothing.
    assert not [m for m in sink.mails() if GOOD_ADMIN in m.rcpt_tos]
    assert not [m for m in sink.mails() if DOWN_ADMIN in m.rcpt_tos and "GwmsEntryMostlyHeld" in m.subject]
    assert not [m for m in sink.mails() if "ops@factory.test" in m.rcpt_tos and "GwmsEntryMostlyHeld" in m.subject]


def test_every_new_panel_query_returns_data(stack: tuple[str, SmtpSink, Path, Path]) -> None:
    prom, _, factory, held = stack
    S.release(held, factory)
    wait_for("the grid queue histogram", lambda: prom_query(prom, f"{catalogue.PILOT_GRID_QUEUE_TIME.name}_count"), 60)
    empty = S.panel_queries_without_data(prom, ENTRY_HEALTH, MINE, 6)
    assert not empty, "panel queries without data:\n" + "\n".join(empty)
