"""Submissions failing at an entry, live (issue 33): the factory's own log -> its site's light and mail.

Real processes on 127.0.0.1: a simulated factory with a healthy site (Nebraska) and the entry
whose credentials the factory's schedd refuses (AuthFailSite, ``submit_fail``) -> the exporter ->
Prometheus with our rules (windows in seconds, config.Timing) -> Alertmanager with our routing ->
an SMTP sink. Once the stack runs, the factory logs four refused condor_submit calls at
AuthFailSite's entry, as GlideinWMS writes them (executeSubmit's ERROR, factory/glideFactoryLib.py
L1890-1893): its light turns red with reason ``submit_failing`` and its admins, only they, get
GwmsEntrySubmitFailing. Every query of the panels on the factory log's metrics returns data.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards.gen import health
from dashboards.gen import names as N
from dashboards.gen.boards.common import ENTRY_HEALTH
from gwms_obs import catalogue
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from gwms_obs.simulate.scenario import OPERATOR_ENTRIES, SCHEDD
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
AUTH = next(e for e in OPERATOR_ENTRIES if e.submit_fail)
GOOD_ADMIN, AUTH_ADMIN = "admin@nebraska.test", "admin@authfail.test"
CONTACTS = {
    "factory_ops": ["ops@factory.test"],
    "sites": {
        GOOD.site: {"admins": [GOOD_ADMIN], "entries": [GOOD.name]},
        AUTH.site: {"admins": [AUTH_ADMIN], "entries": [AUTH.name]},
    },
}
MINE = {m.name for m in (catalogue.GLIDEINS_SUBMITTED, catalogue.GLIDEINS_REMOVED, catalogue.SUBMIT_FAILURES)}
ALERT = "GwmsEntrySubmitFailing"


def _refused(factory: Path, n: int) -> None:
    """The factory's schedd refuses ``n`` condor_submit calls at AUTH's entry, now, in its err log (a
    call apiece: records of one time and text are one record written to two files, counted once)."""
    t = time.time()
    text = (
        f"Failed condor command 'condor_submit -name {SCHEDD} entry_{AUTH.name}/job.condor'. Exit code: 1."
        f" Stdout: Submitting job(s)\n. Stderr: ERROR: Failed to connect to queue manager {SCHEDD}\n"
        "AUTHENTICATE:1003:Failed to authenticate with any method\n"
    )
    with open(factory / "server" / f"entry_{AUTH.name}" / f"{AUTH.name}.err.log", "a") as f:
        for i in range(n):
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{i * 137:03d}"
            f.write(f"[{stamp}] ERROR: glideFactoryLib:1892: condor_submit failed: {text}\n")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SmtpSink, Path]]:
    work = tmp_path_factory.mktemp("submit")
    factory = work / "factory"
    simulate(factory, 300, seed=13, end=time.time(), entries=(GOOD, AUTH))
    with alerting_stack(work, factory, CONTACTS) as st:
        yield st.prometheus, st.sink, factory


def _problems(prom: str, site: str) -> dict[str, float]:
    rows = prom_query(prom, f'{N.RR_SITE_PROBLEM}{{site="{site}"}}')
    return {r["metric"]["reason"]: float(r["value"][1]) for r in rows}


def test_refused_submissions_turn_the_site_red_and_mail_its_admins(stack: tuple[str, SmtpSink, Path]) -> None:
    prom, sink, factory = stack
    failures = f'{catalogue.SUBMIT_FAILURES.name}{{entry="{AUTH.name}"}}'
    before = wait_for("the simulated failures", lambda: prom_query(prom, failures), 60)
    _refused(factory, 4)
    wait_for(
        "AuthFailSite red with reason submit_failing",
        lambda: _problems(prom, AUTH.site).get(health.Reason.SUBMIT_FAILING) == health.Status.FAILING or None,
        90,
    )
    after = float(prom_query(prom, failures)[0]["value"][1])
    assert after == float(before[0]["value"][1]) + 4
    assert health.Reason.SUBMIT_FAILING not in _problems(prom, GOOD.site)

    def mail() -> list[str] | None:
        return [s for s in S.to(sink.mails(), AUTH_ADMIN, "FIRING") if ALERT in s] or None

    wait_for("the AuthFailSite admins' mail", mail, 60)
    body = next(m for m in sink.mails() if AUTH_ADMIN in m.rcpt_tos and ALERT in m.subject).body
    assert AUTH.name in body and "condor_submit failed" in body
    assert not [m for m in sink.mails() if ALERT in m.subject and GOOD_ADMIN in m.rcpt_tos]


def test_every_factory_log_panel_query_returns_data(stack: tuple[str, SmtpSink, Path]) -> None:
    prom, _, factory = stack
    _refused(factory, 1)  # a failure in the last rate interval too
    empty = S.panel_queries_without_data(prom, ENTRY_HEALTH, MINE, 4)
    assert not empty, "panel queries without data:\n" + "\n".join(empty)
