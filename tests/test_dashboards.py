"""Generated dashboards and rules: valid PromQL, known names, right units, stable UIDs (drift: test_generated.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import gen
from dashboards.gen import dashboards as D
from dashboards.gen import lint, rules
from dashboards.gen import names as N
from gwms_obs import __version__, catalogue
from tools import ROOT, compose
from tools.render import role_defaults

RENDERED = gen.render_all()
BOARDS = {p: json.loads(t) for p, t in RENDERED.items() if p.startswith("dashboards/grafana/")}
# The Grafana provisioning's one rendered copy is the compose stack's (tools/compose.py).
PROVISIONING = {p: render() for p, render in compose.generators().items() if p.startswith("compose/config/grafana/")}


def test_every_board_is_there_with_a_stable_uid_and_version() -> None:
    uids = {b["uid"] for b in BOARDS.values()}
    assert uids == {
        "gwms-factory-overview",
        "gwms-entry-health",
        "gwms-accounting",
        "gwms-pilot-phases",
        "gwms-stack-health",
    }
    for path, b in BOARDS.items():
        assert path == f"dashboards/grafana/{b['uid']}.json"
        assert f"gwms-obs-{__version__}" in b["tags"]
        assert __version__ in b["description"]
        assert b["schemaVersion"] == 41  # Grafana 11.6's schema: the pinned SDK build
        ids = [p["id"] for p in b["panels"]]
        assert len(ids) == len(set(ids))


def _panels() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(b, p) for b in BOARDS.values() for p in b["panels"]]


def test_template_variables() -> None:
    for b in BOARDS.values():
        names = [v["name"] for v in b["templating"]["list"]]
        assert names[0] == "datasource"
        if b["uid"] not in ("gwms-stack-health", "gwms-pilot-phases"):
            assert names == ["datasource", "entry", "client", "site"], b["uid"]
        for v in b["templating"]["list"][1:]:
            assert v["datasource"]["uid"] == "${datasource}" and v["includeAll"] and v["allValue"] == ".*"


def test_every_expression_is_promql_with_known_names() -> None:
    problems: list[str] = []
    n = 0
    for b in BOARDS.values():
        for where, expr in lint.dashboard_exprs(b):
            n += 1
            problems += [f"{where}: {p}" for p in lint.check_expr(expr)]
    for rel in ("dashboards/rules/gwms-recording.rules.yml", "dashboards/rules/gwms-alerts.rules.yml"):
        for where, expr in lint.rule_exprs(yaml.safe_load(RENDERED[rel])):
            n += 1
            problems += [f"{where}: {p}" for p in lint.check_expr(expr)]
    assert not problems, "\n".join(problems)
    assert n > 60


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("sum(rate(gwms_pilots_total[$__rate_interval])", "unclosed"),
        ("rate(gwms_pilots_total)", "expected type matrix"),
        ('sum(gwms_pilots_totl{site=~"$site"})', "unknown metric 'gwms_pilots_totl'"),
        ('{__name__=~"gwms_.*"}', "without a metric name"),
    ],
)
def test_lint_rejects(expr: str, why: str) -> None:
    assert any(why in p for p in lint.check_expr(expr)), lint.check_expr(expr)


def test_panels_have_title_description_unit_datasource_and_targets() -> None:
    for b, p in _panels():
        assert p["title"] and p["description"], (b["uid"], p["id"])
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["fieldConfig"]["defaults"].get("unit"), (b["uid"], p["title"])
        assert p["targets"] and all(t["refId"] for t in p["targets"])
        for t in p["targets"]:
            if "rate(" in t["expr"]:
                assert "[$__rate_interval]" in t["expr"] or "[5m]" not in t["expr"], t["expr"]


_TRANSFORMS = re.compile(r"\b(rate|increase|time|count|histogram_quantile)\(|/")


def test_panel_units_match_the_metric() -> None:
    """A panel showing a catalogue metric as it is uses that metric's grafana_unit.

    A quantile of a catalogue histogram is in the histogram's unit; a rate of a
    seconds counter is seconds per second, a count ("short").
    """
    checked = 0
    for b, p in _panels():
        unit = p["fieldConfig"]["defaults"]["unit"]
        for t in p["targets"]:
            names = {n.removesuffix("_bucket") for n in lint.metric_names(t["expr"])}
            defs = [catalogue.BY_NAME[n] for n in names if n in catalogue.BY_NAME]
            if len(defs) != 1 or len(names) != 1:
                continue
            m = defs[0]
            if t["expr"].startswith("histogram_quantile("):
                want = m.grafana_unit
            elif "/" in t["expr"] or "time()" in t["expr"]:
                continue  # a ratio or an age: checked by eye, not by rule
            elif "rate(" in t["expr"]:
                want = D.rate_unit(m)
            elif _TRANSFORMS.search(t["expr"]):
                continue
            else:
                want = m.grafana_unit
            assert unit == want, f"{b['uid']} {p['title']!r}: unit {unit!r}, {m.name} wants {want!r}"
            checked += 1
    assert checked >= 15


def test_pilot_phase_panels_use_the_span_metric_contract_and_exemplars() -> None:
    b = BOARDS["dashboards/grafana/gwms-pilot-phases.json"]
    exprs = [t["expr"] for p in b["panels"] for t in p["targets"]]
    assert all(N.SPAN_DURATION in e or N.SPAN_CALLS in e for e in exprs)
    assert any(t.get("exemplar") for p in b["panels"] for t in p["targets"])
    ds = yaml.safe_load(PROVISIONING["compose/config/grafana/datasources/gwms-obs.yml"])["datasources"]
    prom = next(d for d in ds if d["type"] == "prometheus")
    jaeger = next(d for d in ds if d["type"] == "jaeger")
    assert prom["jsonData"]["exemplarTraceIdDestinations"] == [{"name": "trace_id", "datasourceUid": jaeger["uid"]}]
    assert {d["type"] for d in ds} == {"prometheus", "jaeger", "alertmanager"}


def test_badput_panel_and_alert_read_one_recorded_ratio() -> None:
    """The ratio the panel draws is the number GwmsEntryBadputHigh compares: one recording rule."""
    (alert,) = (a for a in rules.alerts() if a.name == "GwmsEntryBadputHigh")
    (panel,) = (p for _, p in _panels() if p["title"] == "Badput ratio by entry")
    assert lint.metric_names(alert.expr) == {N.RR_BADPUT_RATIO, N.RR_JOB_SECONDS}
    assert [lint.metric_names(t["expr"]) for t in panel["targets"]] == [{N.RR_BADPUT_RATIO}]
    recorded = {r["record"] for r in rules.recording_rules()}
    assert {N.RR_BADPUT_RATIO, N.RR_JOB_SECONDS} <= recorded


def test_dashboards_provider_points_at_the_installed_json() -> None:
    doc = yaml.safe_load(PROVISIONING["compose/config/grafana/dashboards/gwms-obs.yml"])
    (prov,) = doc["providers"]
    assert prov["type"] == "file" and not prov["allowUiUpdates"]
    assert prov["options"]["path"] == role_defaults("grafana")["grafana_dashboards_dir"]


def test_sdk_pin_names_the_grafana_version() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'"grafana-foundation-sdk==(\d+)!(\d+\.\d+)\.\d+"', text)
    assert m, "grafana-foundation-sdk must be pinned exactly (epoch!version)"
    assert m.group(2) == D.GRAFANA_VERSION == role_defaults("grafana")["grafana_version"]
    assert D.GRAFANA_VERSION in (ROOT / "dashboards/README.md").read_text()


def test_prometheus_job_names_agree_with_the_rules() -> None:
    d = role_defaults("prometheus")
    assert (d["prometheus_exporter_job"], d["prometheus_collector_job"]) == (N.JOB_EXPORTER, N.JOB_COLLECTOR)
    assert [Path(f).name for f in d["prometheus_rule_files"]] == ["gwms-recording.rules.yml", "gwms-alerts.rules.yml"]
