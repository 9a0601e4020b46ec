"""End to end, real processes on 127.0.0.1: simulated factory -> exporter -> Prometheus with
our rules -> Alertmanager with our routing -> SMTP sink.

One site (FailSite) goes bad after Prometheus has a baseline: a batch of its
pilots, most of them failing validation, lands in the factory. Its alert fires,
exactly one mail reaches its admins and none reaches Nebraska's; when no more
failures come, the resolved mail follows. Then every dashboard query is run
against this Prometheus. Rules are the committed ones rendered with seconds
instead of hours (config.Timing), thresholds unchanged. This Prometheus has the
operator's runbook base as an external label, and the mail links there.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dashboards import gen
from dashboards.gen import names as N
from dashboards.gen import rules
from tests.support import alert_scenario as S
from tests.support.local_stack import alerting_stack
from tests.support.servers import (
    SmtpSink,
    have,
)
from tools.render import render

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (have("prometheus") and have("prometheus-alertmanager")), reason="Debian prometheus/alertmanager missing"
    ),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SmtpSink, Path, Path]]:
    work = tmp_path_factory.mktemp("alerting")
    factory, held = S.make_factory(work)
    labels = {rules.RUNBOOK_BASE_LABEL: RUNBOOKS}
    with alerting_stack(work, factory, S.CONTACTS, external_labels=labels) as st:
        yield st.prometheus, st.sink, factory, held


RUNBOOKS = "https://runbooks.factory.test/gwms.html"  # the operator's, instead of rules.RUNBOOK_BASE_URL


def test_bad_site_mails_its_admins_once_then_resolves(stack: tuple[str, SmtpSink, Path, Path]) -> None:
    prom, sink, factory, held = stack
    mail = S.site_fires(prom, sink.mails, factory, held)
    S.site_resolves(sink.mails)
    assert f"{RUNBOOKS}#gwmssitevalidationfailuresrising" in mail.body, mail.body  # the operator's runbooks
    # Factory-ops got the rest (the collector is absent here), never the site's alert.
    ops = [m for m in sink.mails() if "ops@factory.test" in m.rcpt_tos]
    # (The subject names an alert only when the group has one; the body names them all.)
    assert any("GwmsCollectorDown" in m.body for m in ops), ops
    assert not any(S.ALERT in m.body for m in ops)


def test_every_dashboard_query_returns_data(stack: tuple[str, SmtpSink, Path, Path]) -> None:
    empty, collector_only = S.dashboard_queries_without_data(stack[0], collector=False)
    assert not empty, "queries without data:\n" + "\n".join(empty)
    assert collector_only <= 12


def test_prometheus_config_template_passes_promtool(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "rules").mkdir()
    for f in ("gwms-recording.rules.yml", "gwms-alerts.rules.yml"):
        shutil.copy(Path(gen.__file__).parents[1] / "rules" / f, tmp_path / "rules" / f)
    (tmp_path / "prometheus.yml").write_text(render("prometheus", "prometheus.yml.j2"))
    r = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert yaml.safe_load((tmp_path / "prometheus.yml").read_text())["scrape_configs"][0]["job_name"] == N.JOB_EXPORTER
