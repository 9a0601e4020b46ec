"""The compose stack's configs: the Ansible roles' templates, rendered for containers.

Only the values differ from a factory host (service names instead of
127.0.0.1, container paths, a development token and a mail sink); the
templates are the very ones Ansible renders. ``make generate`` writes them to
compose/config/ and tests/test_compose.py checks them with the real tools.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tools import render

DEV_TOKEN = "gwms-obs-development-token-not-for-production"

# role -> (template, file under compose/config/, overrides)
CONFIGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gwms_exporter": (
        "exporter.toml.j2",
        "exporter.toml",
        {
            "gwms_exporter_factory_dir": "/factory",
            "gwms_exporter_listen": "0.0.0.0:9822",
            "gwms_exporter_state_dir": "/state",
            "gwms_exporter_interval": 30,
            "gwms_exporter_settle_seconds": 0,
        },
    ),
    "otel_collector": (
        "config.yaml.j2",
        "otelcol.yaml",
        {
            "otel_collector_production": False,
            "otel_collector_pilot_tokens": [DEV_TOKEN],
            "otel_collector_health_host": "0.0.0.0",
            "otel_collector_telemetry_host": "0.0.0.0",
            "otel_collector_instance_id": "otelcol",
            "otel_collector_jaeger_endpoint": "jaeger:4317",
            "otel_collector_queue_dir": "/var/lib/otelcol/queue",
            "otel_collector_prometheus_remote_write_url": "http://prometheus:9090/api/v1/write",
        },
    ),
    "jaeger": (
        "config.yaml.j2",
        "jaeger.yaml",
        {
            "jaeger_storage": "badger",
            "jaeger_badger_dir": "/var/lib/jaeger/badger",
            "jaeger_listen_host": "0.0.0.0",
            "jaeger_query_host": "0.0.0.0",
        },
    ),
    "prometheus": (
        "prometheus.yml.j2",
        "prometheus.yml",
        {
            "prometheus_scrape_interval": "15s",
            "prometheus_evaluation_interval": "15s",
            "prometheus_rule_files": ["/rules/gwms-recording.rules.yml", "/rules/gwms-alerts.rules.yml"],
            "prometheus_alertmanagers": ["alertmanager:9093"],
            "prometheus_exporter_targets": ["exporter:9822"],
            "prometheus_collector_targets": ["otelcol:8888"],
            "prometheus_self_targets": ["localhost:9090"],
        },
    ),
    "alertmanager": (
        "alertmanager.yml.j2",
        "alertmanager.yml",
        {
            "alertmanager_smtp_smarthost": "mailpit:1025",
            "alertmanager_smtp_from": "alertmanager@gwms-obs.compose",
            "alertmanager_factory_ops_emails": ["factory-ops@gwms-obs.compose"],
            # Sites of the simulated factory the stack watches (gwms-obs simulate).
            "alertmanager_site_contacts": {
                "Nebraska": ["admin@nebraska.example"],
                "FailSite": ["admin@failsite.example"],
                "BlackHoleSite": ["admin@blackhole.example"],
            },
            "alertmanager_group_wait": "10s",
        },
    ),
    "grafana": (
        "datasources.yml.j2",
        "grafana/datasources/gwms-obs.yml",
        {
            "grafana_prometheus_url": "http://prometheus:9090",
            "grafana_alertmanager_url": "http://alertmanager:9093",
            "grafana_jaeger_url": "http://jaeger:16686",
        },
    ),
}

EXTRA: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "grafana/dashboards/gwms-obs.yml": (
        "grafana",
        "dashboards.yml.j2",
        "grafana/dashboards/gwms-obs.yml",
        {"grafana_dashboards_dir": "/var/lib/grafana/dashboards/gwms-obs"},
    ),
}


def rendered() -> dict[str, str]:
    """compose/config/<file> -> its text."""
    out = {f"compose/config/{dest}": render.render(role, tpl, **ov) for role, (tpl, dest, ov) in CONFIGS.items()}
    for role, tpl, dest, ov in EXTRA.values():
        out[f"compose/config/{dest}"] = render.render(role, tpl, **ov)
    return out


def generators() -> dict[str, Callable[[], str]]:
    """For tools.generate: one entry per file."""
    texts = rendered()

    def text_of(path: str) -> Callable[[], str]:
        return lambda: texts[path]

    return {path: text_of(path) for path in texts}
