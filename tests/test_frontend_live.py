"""The VO frontend's monitoring end to end, real processes on 127.0.0.1 (issue 35 item 2).

A simulated factory and one of its frontends' monitor dir (simulate/write/frontend_status.py,
byte for byte GlideinWMS's format) -> a factory exporter and a frontend exporter (``gwms-obs
export`` with ``factory_dir = ""`` and ``frontend_monitor_dir``, as on a frontend host) -> one
Prometheus with our rules (FAST: the stale alert fires at once) -> Alertmanager with our routing
-> an SMTP sink. One group's status is two hours old: GwmsFrontendInfoStale fires for it alone, and
its mail reaches the frontend's operators and nobody else. Then every query of the frontend board
returns data, the join with the factory's series included.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards import gen
from dashboards.gen import lint
from dashboards.gen.boards.frontend import FRONTEND
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import CLIENTS
from gwms_obs.simulate.write import frontend_status as W
from tests.support import alert_scenario as S
from tests.support.local_stack import AlertingStack, alerting_stack
from tests.support.servers import first_scan_done, free_port, have, http_get, process, prom_query, wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (have("prometheus") and have("prometheus-alertmanager")), reason="Debian prometheus/alertmanager missing"
    ),
]

FE_OPS = "vo-ops@frontend.test"
CONTACTS = {**S.CONTACTS, "frontend_ops": [FE_OPS]}
CLIENT = CLIENTS["cms"]  # its frontend's monitor dir is the one read
FRONTEND_NAME = CLIENT.client_name.rsplit(".", 1)[0]
STALE, FRESH = CLIENT.group, "fresh"  # the simulated group, made two hours old; a copy of it, current
ALERT = "GwmsFrontendInfoStale"
BOARD_VARS = {"group": ".*", "topn": "10", "factory": ".*", "datasource": "prometheus"}


def frontend_monitor(factory: Path, dest: Path) -> Path:
    """The simulated frontend's monitor dir, with group STALE two hours old and a current copy of it."""
    shutil.copytree(factory / W.DIR / FRONTEND_NAME / "monitor", dest)
    shutil.copytree(dest / f"group_{STALE}", dest / f"group_{FRESH}")
    stale = dest / f"group_{STALE}" / W.FILE
    old = int(time.time()) - 7200
    stale.write_text(re.sub(r'unixtime="\d+"', f'unixtime="{old}"', stale.read_text()))
    return dest


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertingStack]:
    work = tmp_path_factory.mktemp("frontend")
    factory = work / "factory"
    simulate(factory, 300, seed=7, end=time.time())  # files written now: current, but for STALE
    monitor = frontend_monitor(factory, work / "fe-monitor")
    fe_port = free_port()
    (work / "fe.toml").write_text(
        f'factory_dir = ""\nfrontend_monitor_dir = "{monitor}"\nlisten = "127.0.0.1:{fe_port}"\ninterval = 1\n'
        f'[frontend_clients]\n"{STALE}" = "{CLIENT.log_name}"\n'
    )
    fe_cmd = [sys.executable, "-m", "gwms_obs.cli", "export", "--config", str(work / "fe.toml")]
    fe_url = f"http://127.0.0.1:{fe_port}/metrics"
    with process(fe_cmd, work / "fe-exporter.log"):
        wait_for("the frontend exporter's first scan", lambda: first_scan_done(http_get(fe_url)), 60)
        # The factory's exporter and the frontend's, one job: as one site's Prometheus scrapes both.
        with alerting_stack(work, factory, CONTACTS, more_targets=[f"127.0.0.1:{fe_port}"]) as st:
            yield st


def test_the_stale_frontend_alert_mails_the_frontend_operators_only(stack: AlertingStack) -> None:
    prom, sink = stack.prometheus, stack.sink

    def to_fe_ops() -> list[object]:
        return [m for m in sink.mails() if FE_OPS in m.rcpt_tos and ALERT in m.body]

    (mail,) = wait_for("the stale-frontend mail", to_fe_ops, 120)
    assert f"group {STALE}" in mail.body and CLIENT.log_name in mail.body, mail.body  # type: ignore[attr-defined]
    assert f"group {FRESH}" not in mail.body  # type: ignore[attr-defined]
    firing = prom_query(prom, f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}')
    assert [a["metric"]["group"] for a in firing] == [STALE]
    # Alertmanager has sent the factory's own alerts meanwhile (the collector is absent here), so
    # the other receivers are live; none of them got a frontend alert, and the frontend's
    # operators got nothing else.
    wait_for("the factory-ops mail", lambda: [m for m in sink.mails() if "ops@factory.test" in m.rcpt_tos], 60)
    others = [m for m in sink.mails() if FE_OPS not in m.rcpt_tos]
    assert not [m for m in others if "GwmsFrontend" in m.body], [m.rcpt_tos for m in others]
    fe_mails = [m for m in sink.mails() if FE_OPS in m.rcpt_tos]
    assert all(set(m.rcpt_tos) == {FE_OPS} for m in fe_mails)
    names = {n for m in fe_mails for n in re.findall(r"\bGwms[A-Za-z]+", m.body)}
    assert names == {ALERT}, names


def test_every_frontend_panel_query_returns_data(stack: AlertingStack) -> None:
    prom = stack.prometheus
    board = json.loads(gen.render_all()[f"dashboards/grafana/{FRONTEND}.json"])
    queries = list(lint.dashboard_exprs(board))
    assert len(queries) >= 15
    wait_for("the frontend's series", lambda: prom_query(prom, 'gwms_frontend_jobs{state="idle"}'), 60)
    wait_for("the factory's series", lambda: prom_query(prom, "gwms_entry_requested_glideins"), 60)
    empty = []
    for where, expr in queries:
        q = lint.substitute(expr.replace("$__rate_interval", "30s").replace("$__range", "5m"), BOARD_VARS)
        if not prom_query(prom, q):
            empty.append(f"{where}: {q}")
    assert not empty, "queries without data:\n" + "\n".join(empty)
    # The join: every entry the frontend asks of is one the factory knows it was asked of, and agrees.
    diff = prom_query(
        prom,
        f'sum by (entry, client) (gwms_frontend_entry_requested_glideins{{kind="idle",group="{STALE}"}})'
        ' - on (entry, client) sum by (entry, client) (gwms_entry_requested_glideins{kind="idle"})',
    )
    assert diff and all(float(d["value"][1]) == 0 for d in diff), diff
