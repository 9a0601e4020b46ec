"""The monitoring stack as real processes on 127.0.0.1, for the live tests and benchmarks.

A factory tree -> ``gwms-obs export`` -> Prometheus with our rules rendered
with seconds instead of hours (alert_scenario.FAST) -> optionally
Alertmanager with our routing -> an SMTP sink. Configs are the Ansible roles'
templates (tools.render), as on a factory host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dashboards.gen import alerting, config, rulefiles
from tests.support import alert_scenario as S
from tests.support.servers import (
    SmtpSink,
    alertmanager,
    export_command,
    first_scan_done,
    free_port,
    http_get,
    process,
    prometheus,
    wait_for,
)
from tools.render import render


def rule_files(work: Path, timing: config.Timing = S.FAST) -> list[str]:
    """Our recording and alert rules rendered with ``timing`` into ``work/rules``."""
    d = work / "rules"
    d.mkdir()
    (d / "rec.yml").write_text(rulefiles.recording_yaml(c := config.Config(timing=timing)))
    (d / "alerts.yml").write_text(rulefiles.alerts_yaml(c))
    return [str(d / "rec.yml"), str(d / "alerts.yml")]


def prometheus_config(
    rule_paths: list[str],
    exporter_port: int,
    prom_port: int,
    *,
    alertmanagers: list[str] = (),  # type: ignore[assignment]
    scrape_interval: str = "1s",
    external_labels: dict[str, str] | None = None,
    more_targets: Sequence[str] = (),
    factory_name: str = "",
) -> str:
    """The prometheus role's config for a test: our exporter, Prometheus itself, no collector.

    ``more_targets`` are other exporters scraped in the same job (a frontend's, as one site's
    Prometheus scrapes the factory's and the frontend's); ``factory_name``: the factory label on
    the exporter's series (prometheus_factory_name)."""
    text = render(
        "prometheus",
        "prometheus.yml.j2",
        prometheus_scrape_interval=scrape_interval,
        prometheus_evaluation_interval="1s",
        prometheus_rule_files=rule_paths,
        prometheus_alertmanagers=list(alertmanagers),
        prometheus_exporter_targets=[f"127.0.0.1:{exporter_port}", *more_targets],
        prometheus_collector_targets=[],  # no collector here: GwmsCollectorDown goes to factory-ops
        prometheus_self_targets=[f"127.0.0.1:{prom_port}"],
        prometheus_factory_name=factory_name,
    )
    if external_labels:  # as an operator sets them (global.external_labels)
        doc = yaml.safe_load(text)
        doc["global"]["external_labels"] = external_labels
        text = yaml.safe_dump(doc, sort_keys=False)
    return text


@contextlib.contextmanager
def exporter(
    factory: Path,
    work: Path,
    port: int,
    interval: float = 1,
    *,
    lost_after_seconds: float | None = 1e9,
    log: str = "exporter.log",
) -> Iterator[str]:
    """``gwms-obs export`` on ``factory`` with its checkpoint in ``work``; yields /metrics once it has scanned.

    By default every pilot in the tree is counted from its files (none lost however old);
    ``lost_after_seconds=None`` keeps the daemon's own default."""
    cmd = export_command(factory, port, work / "checkpoint.json", interval=interval, settle=0)
    if lost_after_seconds is not None:
        cmd += ["--lost-after-seconds", f"{lost_after_seconds:g}"]
    url = f"http://127.0.0.1:{port}/metrics"
    with process(cmd, work / log):
        wait_for("the first scan", lambda: first_scan_done(http_get(url)), 180)
        yield url


@dataclass(frozen=True)
class AlertingStack:
    prometheus: str
    sink: SmtpSink


@contextlib.contextmanager
def alerting_stack(
    work: Path,
    factory: Path,
    contacts: dict[str, Any],
    *,
    external_labels: dict[str, str] | None = None,
    more_targets: Sequence[str] = (),
) -> Iterator[AlertingStack]:
    """Exporter, Prometheus (FAST rules) and Alertmanager routing ``contacts`` to an SMTP sink.

    ``more_targets``: exporters the caller runs, scraped beside the factory's (prometheus_config)."""
    paths = rule_files(work)
    exp_port, prom_port = free_port(), free_port()
    with SmtpSink() as sink:
        am_cfg = render(
            "alertmanager",
            "alertmanager.yml.j2",
            **alerting.alertmanager_vars(contacts),
            alertmanager_smtp_smarthost=f"127.0.0.1:{sink.port}",
            alertmanager_smtp_from="am@factory.test",
            **S.FAST_ALERTMANAGER,
        )
        with alertmanager(work / "am", am_cfg) as am:
            cfg = prometheus_config(
                paths,
                exp_port,
                prom_port,
                alertmanagers=[am.removeprefix("http://")],
                external_labels=external_labels,
                more_targets=more_targets,
            )
            with (
                exporter(factory, work, exp_port),
                prometheus(work / "prom", cfg, ["--rules.alert.resend-delay=1s"], port=prom_port) as prom,
            ):
                yield AlertingStack(prom, sink)
