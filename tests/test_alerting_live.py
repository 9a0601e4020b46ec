"""End to end, real processes on 127.0.0.1: simulated factory -> exporter -> Prometheus with
our rules -> Alertmanager with our routing -> SMTP sink.

One site (FailSite) goes bad after Prometheus has a baseline: a batch of its
pilots, most of them failing validation, lands in the factory. Its alert fires,
exactly one mail reaches its admins and none reaches Nebraska's; when no more
failures come, the resolved mail follows. Then every dashboard query is run
against this Prometheus. Rules are the committed ones rendered with seconds
instead of hours (rules.Timing), thresholds unchanged. This Prometheus has the
operator's runbook base as an external label, and the mail links there.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dashboards import gen
from dashboards.gen import alerting, lint, rules
from dashboards.gen import names as N
from gwms_obs import catalogue
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from tests.support.servers import (
    SmtpSink,
    alertmanager,
    first_scan_done,
    free_port,
    have,
    http_get,
    process,
    prom_query,
    prometheus,
    wait_for,
)
from tools.render import render

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (have("prometheus") and have("prometheus-alertmanager")), reason="Debian prometheus/alertmanager missing"
    ),
]
GOOD, BAD = DEFAULT_ENTRIES[0], DEFAULT_ENTRIES[1]  # Nebraska (healthy), FailSite (validation fails)
GPU = next(e for e in DEFAULT_ENTRIES if "GPU" in e.name)  # so the GPU accounting panels have data
assert "Nebraska" in GOOD.name and "FAIL_VALIDATION" in BAD.name
CONTACTS = {
    "factory_ops": ["ops@factory.test"],
    "sites": {
        GOOD.site: {"admins": ["admin@nebraska.test"], "entries": [GOOD.name]},
        BAD.site: {"admins": ["admin@failsite.test"], "entries": [BAD.name]},
    },
}
FAST = rules.Timing(window="20s", short_window="20s", for_site="0s", for_stack="0s", for_held="30m")
RUNBOOKS = "https://runbooks.factory.test/gwms.html"  # the operator's, instead of rules.RUNBOOK_BASE_URL


def hold_back(factory: Path, dest: Path) -> int:
    """Move the newer half of BAD's pilot files out of the factory (and its completed_jobs,
    so those pilots are not counted from there first). Returns the number of pilots held back."""
    outs = sorted(factory.glob(f"client/*/*/entry_{BAD.name}/job.*.out"), key=lambda p: int(p.name.split(".")[1]))
    late = outs[len(outs) // 2 :]
    dest.mkdir()
    for out in late:
        for f in (out, out.with_suffix(".err")):
            if f.exists():
                rel = f.relative_to(factory)
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(f, dest / rel)
    for f in factory.glob(f"server/entry_{BAD.name}/completed_jobs_*.log"):
        f.unlink()
    return len(late)


def release(held: Path, factory: Path) -> None:
    # .err before .out: the exporter finds pilots by their .out and reads the .err with it.
    for suffix in (".err", ".out"):
        for f in sorted(held.rglob(f"*{suffix}")):
            dst = factory / f.relative_to(held)
            os.replace(f, dst)


def with_external_labels(config: str, labels: dict[str, str]) -> str:
    """The rendered Prometheus config with ``global.external_labels``, as an operator sets them."""
    doc = yaml.safe_load(config)
    doc["global"]["external_labels"] = labels
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SmtpSink, Path, Path]]:
    work = tmp_path_factory.mktemp("alerting")
    factory = work / "factory"
    simulate(factory, 500, seed=5, start=time.time() - 48 * 3600, entries=(GOOD, BAD, GPU))
    # One unreadable .out, as a factory always has: the parse-error panels have a series.
    (next(factory.glob(f"client/*/*/entry_{GOOD.name}")) / "job.999999.0.out").write_bytes(b"\x00garbage\n")
    held = work / "held"
    assert hold_back(factory, held) >= 30
    rules_dir = work / "rules"
    rules_dir.mkdir()
    (rules_dir / "rec.yml").write_text(rules.recording_yaml(FAST))
    (rules_dir / "alerts.yml").write_text(rules.alerts_yaml(FAST))
    exp_port, prom_port = free_port(), free_port()
    with SmtpSink() as sink:
        am_cfg = render(
            "alertmanager",
            "alertmanager.yml.j2",
            **alerting.alertmanager_vars(CONTACTS),
            alertmanager_smtp_smarthost=f"127.0.0.1:{sink.port}",
            alertmanager_smtp_from="am@factory.test",
            alertmanager_group_wait="1s",
            alertmanager_group_interval="2s",
            alertmanager_repeat_interval="1h",
        )
        with alertmanager(work / "am", am_cfg) as am:
            prom_cfg = render(
                "prometheus",
                "prometheus.yml.j2",
                prometheus_scrape_interval="1s",
                prometheus_evaluation_interval="1s",
                prometheus_rule_files=[str(rules_dir / "rec.yml"), str(rules_dir / "alerts.yml")],
                prometheus_alertmanagers=[am.removeprefix("http://")],
                prometheus_exporter_targets=[f"127.0.0.1:{exp_port}"],
                prometheus_collector_targets=[],  # no collector here: GwmsCollectorDown goes to factory-ops
                prometheus_self_targets=[f"127.0.0.1:{prom_port}"],
            )
            prom_cfg = with_external_labels(prom_cfg, {rules.RUNBOOK_BASE_LABEL: RUNBOOKS})
            cmd = [
                sys.executable, "-m", "gwms_obs.cli", "export", "--factory-dir", str(factory),
                "--listen", f"127.0.0.1:{exp_port}", "--interval", "1", "--settle-seconds", "0",
                "--lost-after-seconds", "1e9", "--checkpoint", str(work / "checkpoint.json"),
            ]  # fmt: skip
            url = f"http://127.0.0.1:{exp_port}/metrics"
            with process(cmd, work / "exporter.log"):
                wait_for("the first scan", lambda: first_scan_done(http_get(url)), 120)
                with prometheus(work / "prom", prom_cfg, ["--rules.alert.resend-delay=1s"], port=prom_port) as prom:
                    yield prom, sink, factory, held


def to(sink: SmtpSink, addr: str, kind: str) -> list[str]:
    return [m.subject for m in sink.mails() if addr in m.rcpt_tos and m.subject.startswith(f"[{kind}")]


def test_bad_site_mails_its_admins_once_then_resolves(stack: tuple[str, SmtpSink, Path, Path]) -> None:
    prom, sink, factory, held = stack
    vf = f'{catalogue.PILOTS.name}{{entry="{BAD.name}",outcome="validation_failed"}}'
    # A baseline: the counter is known for a few scrapes before the failures arrive.
    wait_for("a baseline of FailSite's failures", lambda: prom_query(prom, f"count_over_time({vf}[1m]) >= 3"), 60)
    before = float(prom_query(prom, vf)[0]["value"][1])
    assert not [m for m in sink.mails() if "admin@" in " ".join(m.rcpt_tos)], "a site was mailed before going bad"
    release(held, factory)
    wait_for("the failures in Prometheus", lambda: float(prom_query(prom, vf)[0]["value"][1]) >= before + 10, 60)
    fired = wait_for("FailSite's firing mail", lambda: to(sink, "admin@failsite.test", "FIRING"), 60)
    assert "GwmsSiteValidationFailuresRising" in fired[0] and BAD.site in fired[0]
    mail = next(m for m in sink.mails() if "admin@failsite.test" in m.rcpt_tos and m.subject.startswith("[FIRING"))
    assert f"{RUNBOOKS}#gwmssitevalidationfailuresrising" in mail.body, mail.body  # the operator's runbooks
    wait_for("FailSite's resolved mail", lambda: to(sink, "admin@failsite.test", "RESOLVED"), 120)
    assert len(to(sink, "admin@failsite.test", "FIRING")) == 1, sink.mails()
    assert [m for m in sink.mails() if "admin@nebraska.test" in m.rcpt_tos] == []
    # Factory-ops got the rest (the collector is absent here), never the site's alert.
    ops = [m for m in sink.mails() if "ops@factory.test" in m.rcpt_tos]
    # (The subject names an alert only when the group has one; the body names them all.)
    assert any("GwmsCollectorDown" in m.body for m in ops), ops
    assert not any("GwmsSiteValidationFailuresRising" in m.body for m in ops)


GRAFANA_VARS = {"entry": ".*", "client": ".*", "site": ".*", "datasource": "prometheus"}


def test_every_dashboard_query_returns_data(stack: tuple[str, SmtpSink, Path, Path]) -> None:
    prom = stack[0]
    # Rates over 30 s need a few scrapes; the recording rules a few evaluations.
    wait_for("recording rules", lambda: prom_query(prom, N.RR_CPU_RATE), 60)
    empty, collector_only = [], 0
    for rel, text in gen.render_all().items():
        if not rel.startswith("dashboards/grafana/"):
            continue
        for where, expr in lint.dashboard_exprs(json.loads(text)):
            q = lint.substitute(expr.replace("$__rate_interval", "30s").replace("$__range", "5m"), GRAFANA_VARS)
            res = prom_query(prom, q)  # raises unless Prometheus accepts it
            if lint.metric_names(expr) & N.COLLECTOR_NAMES:
                collector_only += 1  # no collector in this test: executed, not expected to have data
                continue
            if not res:
                empty.append(f"{where}: {q}")
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
