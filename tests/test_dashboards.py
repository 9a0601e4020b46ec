"""Generated dashboards and rules: valid PromQL, known names, right units, stable UIDs (drift: test_generated.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import gen
from dashboards.gen import board as B
from dashboards.gen import dashboards as D
from dashboards.gen import lint, rules
from dashboards.gen import names as N
from dashboards.gen.boards.overview import THIS_FACTORY
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
        "gwms-site-health",
        "gwms-entry-health",
        "gwms-provisioning",
        "gwms-accounting",
        "gwms-pilot-phases",
        "gwms-stack-health",
        "gwms-frontend",
    }
    for path, b in BOARDS.items():
        assert path == f"dashboards/grafana/{b['uid']}.json"
        assert f"gwms-obs-{__version__}" in b["tags"]
        assert __version__ in b["description"]
        assert b["schemaVersion"] == 41  # Grafana 11.6's schema: the pinned SDK build
        ids = [p["id"] for p in b["panels"]]
        assert len(ids) == len(set(ids))
        # rows take the ids after the panels': a new row renumbers no panel
        assert all(
            p["id"] > max(q["id"] for q in b["panels"] if q["type"] != "row") for p in b["panels"] if p["type"] == "row"
        )


def _panels() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every panel that draws something (rows only group them)."""
    return [(b, p) for b in BOARDS.values() for p in b["panels"] if p["type"] != "row"]


def test_stack_health_has_the_monitoring_controller_row() -> None:
    """A row over the controller's panels: up, decisions by verbosity and kind, denials, rules, auth failures."""
    b = BOARDS["dashboards/grafana/gwms-stack-health.json"]
    rows = [p for p in b["panels"] if p["type"] == "row"]
    assert [r["title"] for r in rows] == ["Monitoring controller"] and rows[0]["collapsed"] is False
    (row,) = rows
    below = [p for p in b["panels"] if p["type"] != "row" and p["gridPos"]["y"] > row["gridPos"]["y"]]
    above = [p for p in b["panels"] if p["type"] != "row" and p["gridPos"]["y"] < row["gridPos"]["y"]]
    exprs = " ".join(t["expr"] for p in below for t in p["targets"])
    assert f'up{{{B.FACTORY_SEL},job="{N.JOB_CONTROLLER}"}}' in exprs
    for m in catalogue.CONTROLLER_METRICS:
        assert m.name in exprs, m.name
    assert all(m.name not in t["expr"] for p in above for t in p["targets"] for m in catalogue.CONTROLLER_METRICS)
    dec, den = catalogue.CONTROLLER_DECISIONS.name, catalogue.CONTROLLER_DENIALS.name
    for by, name in (("verbosity", dec), ("kind", dec), ("reason", den)):
        assert f"sum by ({by}) (rate({name}{{{B.FACTORY_SEL}}}[$__rate_interval]))" in exprs, by
    # nothing overlaps the row: its panels start on the line below it
    assert min(p["gridPos"]["y"] for p in below) == row["gridPos"]["y"] + 1
    assert max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in above) <= row["gridPos"]["y"]


def test_template_variables() -> None:
    F = catalogue.FACTORY_LABEL
    for b in BOARDS.values():
        # The hidden Jaeger tag of the factory chosen, last, on the boards whose pilot searches read it
        # (tests/test_pilot_links.py).
        names = [v["name"] for v in b["templating"]["list"] if v["name"] != B.JAEGER_FACTORY]
        # Every board, the stack's own included, chooses the factories first.
        assert names[:2] == ["datasource", F], b["uid"]
        # Ours preselected by uid, whatever the Grafana's default datasource is.
        assert b["templating"]["list"][0]["current"]["value"] == N.DATASOURCE_PROMETHEUS
        if b["uid"] == "gwms-site-health":
            assert names == ["datasource", F, "entry", "site", "topn"]
        elif b["uid"] == "gwms-pilot-phases":
            assert names == ["datasource", F, "entry", "topn"]
        elif b["uid"] == "gwms-stack-health":
            assert names == ["datasource", F]
        elif b["uid"] == "gwms-frontend":
            assert names == ["datasource", F, "group", "topn"]
        else:
            assert names == ["datasource", F, "entry", "client", "site", "topn"], b["uid"]
        for v in b["templating"]["list"][1:]:
            if v["name"] == B.JAEGER_FACTORY:
                continue
            if v["name"] == "topn":
                assert v["type"] == "custom" and v["current"]["value"] == str(B.TOPN_DEFAULT)
                continue
            assert v["datasource"]["uid"] == "${datasource}" and v["includeAll"] and v["allValue"] == ".*"
            assert v["multi"] and v["refresh"] == 2, v  # 2: on time range change
            if v["name"] == F:
                # From a series every factory's exporter exports; All (".*") preselected, which on one
                # factory's Prometheus, where the label is absent and the query finds no value, matches all.
                assert v["query"] == f"label_values({catalogue.BUILD_INFO.name}, {F})"
                assert v["current"]["value"] == ["$__all"]
            else:
                # The entry, client and site variables chain on the factories chosen.
                assert B.FACTORY_SEL in v["query"], v["query"]
        # The link menu to every other board, carrying the time range and the variables.
        (link,) = b["links"]
        assert link["type"] == "dashboards" and link["tags"] == [B.TAG] and link["keepTime"] and link["includeVars"]


def test_panels_that_rank_use_topn_and_drill_down_where_they_name_an_entry() -> None:
    ranked = 0
    for b, p in _panels():
        exprs = [t["expr"] for t in p["targets"]]
        if "$topn" in p["title"]:
            assert all("k($topn," in e for e in exprs), (b["uid"], p["title"])
            ranked += 1
        by_entry = any(re.search(r"by \([^)]*\bentry\b", e) for e in exprs)
        if by_entry and p["type"] != "stat":
            links = p["fieldConfig"]["defaults"].get("links", [])
            assert links, f"{b['uid']} {p['title']!r}: per-entry panel without a drill-down link"
            for link in links:
                if link["url"].startswith("/explore?"):
                    continue  # a search of the row's pilots in Jaeger (tests/test_pilot_links.py)
                assert "${__url_time_range}" in link["url"] and "var-" in link["url"], link
                # the factories chosen go along, as the time range and datasource do
                assert f"${{{catalogue.FACTORY_LABEL}:queryparam}}" in link["url"], link
                target = link["url"].split("/d/")[1].split("/")[0]
                assert target in {x["uid"] for x in BOARDS.values()}, link
    assert ranked >= 20


def test_every_per_entry_timeseries_is_bounded_by_topn() -> None:
    """No range query may draw one series per entry: at 500 entries it is unreadable."""
    for b, p in _panels():
        if p["type"] != "timeseries":
            continue
        for t in p["targets"]:
            if re.search(rf"by \(({catalogue.FACTORY_LABEL}, )?(entry|site|gwms_entry)\b", t["expr"]):
                assert "topk($topn," in t["expr"] or "bottomk($topn," in t["expr"], (b["uid"], p["title"])
            assert p["options"]["legend"]["displayMode"] == "table", (b["uid"], p["title"])


def test_every_panel_has_a_question_and_a_series_budget() -> None:
    readme = (ROOT / "dashboards/README.md").read_text()
    for board in D.boards():
        for spec in board.specs:
            assert spec.question and spec.budget >= 1, (board.uid, spec.title)
            assert f"| {spec.question} |" in readme, spec.question


# Catalogue families on no panel, and why (an empty list is the goal).
NOT_CHARTED: dict[str, str] = {
    # Only ever imported history (gwms-obs import-rrd), in GlideinWMS's own buckets, which no panel of ours
    # shares: read in Explore next to the pages they replace (docs/migration.md).
    **{m.name: "imported GlideinWMS history only" for m in catalogue.LEGACY_METRICS},
}


def _recorded_from() -> dict[str, set[str]]:
    """Recording rule -> the series names its expression reads (transitively)."""
    doc = yaml.safe_load(RENDERED["dashboards/rules/gwms-recording.rules.yml"])
    direct = {r["record"]: lint.metric_names(r["expr"]) for g in doc["groups"] for r in g["rules"]}

    def expand(names: set[str]) -> set[str]:
        out = set()
        for n in names:
            out |= expand(direct[n]) if n in direct else {n}
        return out

    return {rr: expand(names) for rr, names in direct.items()}


def test_every_catalogue_family_is_on_a_panel() -> None:
    recorded = _recorded_from()
    charted: set[str] = set()
    for _b, p in _panels():
        for t in p["targets"]:
            for n in lint.metric_names(t["expr"]):
                charted |= recorded.get(n, {n})
    for m in catalogue.ALL:
        on_panel = bool(set(catalogue.exposition_names(m)) & charted)
        if m.name in NOT_CHARTED:
            assert not on_panel, f"{m.name} is charted now: take it off NOT_CHARTED"
        else:
            assert on_panel, f"{m.name} is on no panel: chart it or list it in NOT_CHARTED with the reason"


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


def test_every_panel_and_variable_selector_carries_the_factory_matcher() -> None:
    """On the global Thanos query a selector without it would mix every factory, whatever the variable says."""
    problems: list[str] = []
    n = 0
    for b in BOARDS.values():
        for where, expr in lint.dashboard_exprs(b):
            if where.endswith(f"variable {catalogue.FACTORY_LABEL}"):
                continue  # the variable's own source: which factories there are
            n += 1
            problems += [f"{where}: {p}" for p in lint.missing_factory(expr)]
    assert not problems, "\n".join(problems)
    assert n > 100


@pytest.mark.parametrize(
    "expr",
    [
        "sum(rate(gwms_pilots_total[$__rate_interval]))",  # no matcher at all
        'sum(gwms_entry_glideins{factory=~"$factory"}) / sum(gwms_entry_glideins{entry=~"$entry"})',  # one side
        'gwms_entry_glideins{factory=~".*"}',  # hard-coded: ignores the variable
        'gwms_entry_glideins{factory="$factory"}',  # equality: a multi-value or All selection matches nothing
        'topk($topn, gwms_entry_glideins{factory!~"$factory"})',
        # the span metrics: the exporter's label, which a collector's remote-written series never has
        'sum(rate(traces_span_metrics_calls_total{factory=~"$factory"}[$__rate_interval]))',
        'gwms_pilots_total{gwms_factory=~"$factory"}',  # and the span label on the exporter's series
    ],
)
def test_lint_finds_a_selector_without_the_factory_matcher(expr: str) -> None:
    assert lint.missing_factory(expr), expr
    assert not lint.missing_factory(
        'topk($topn, sum(rate(gwms_pilots_total{factory=~"$factory"}[$__rate_interval])) or on () vector(0))'
    )
    span = f'{N.SPAN_FACTORY}=~"$factory"'
    assert not lint.missing_factory(f"sum(rate({N.SPAN_CALLS}{{{span}}}[$__rate_interval])) / {N.RR_PHASE_Z}{{{span}}}")


def test_per_factory_panel_names_the_absent_label() -> None:
    """Which factory provides how much, and is any silent: one series per factory and quantity; on one
    factory's Prometheus the one unlabelled series is named, and the age has its own unit and axis."""
    F = catalogue.FACTORY_LABEL
    overview = BOARDS["dashboards/grafana/gwms-factory-overview.json"]
    (p,) = (p for p in overview["panels"] if p["title"] == "CPU units and last pilot age, per factory")
    cpu, age = p["targets"]
    assert f"sum by ({F}) ({N.RR_CPU_RATE}{{" in cpu["expr"]
    assert f"time() - max by ({F}) ({catalogue.PILOT_LAST_COMPLETED.name}{{" in age["expr"]
    for t in (cpu, age):
        # label_replace's regex is anchored: "" matches only the absent (empty) label
        assert t["expr"].startswith("label_replace(")
        assert t["expr"].endswith(f', "{F}", "{THIS_FACTORY}", "{F}", "")')
        assert t["legendFormat"].startswith(f"{{{{{F}}}}} ")
    (override,) = p["fieldConfig"]["overrides"]
    assert override["matcher"] == {"id": "byFrameRefID", "options": age["refId"]}
    assert {x["id"]: x["value"] for x in override["properties"]} == {"unit": "s", "custom.axisPlacement": "right"}


def test_series_per_entry_process_or_alert_keep_the_factory() -> None:
    """The rule in dashboards/README.md: an entry, a process (instance, job) or an alert is one factory's,
    so grouping by one keeps the factory label; sites, frontends, categories are summed across factories."""
    F = catalogue.FACTORY_LABEL
    loose = []
    frontend = {m.name for m in catalogue.FRONTEND_METRICS}
    for b, p in _panels():
        for t in p["targets"]:
            names = lint.metric_names(t["expr"])
            if names & frontend and names - frontend:
                # The frontend's request against the factory's record of it joins on (entry, client) alone: the
                # frontend's series carry its own Prometheus's factory label, not the factory's of the entry.
                continue
            for by in re.findall(r"\bby \(([^)]*)\)", t["expr"]):
                labels = [x.strip() for x in by.split(",")]
                # the span metrics' entry keeps theirs: the pilots' factory (names.SPAN_FACTORY)
                factory = N.SPAN_FACTORY if N.SPAN_ENTRY in labels else F
                if {"entry", N.SPAN_ENTRY, "instance", "job", "alertname"} & set(labels) and factory not in labels:
                    loose.append(f"{b['uid']} {p['title']!r}: by ({by})")
    assert not loose, "\n".join(loose)
    readme = (ROOT / "dashboards/README.md").read_text()
    assert "summed across factories" in readme


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
                want = m.rate_grafana_unit
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
    (panel,) = (p for _, p in _panels() if p["title"].startswith("Badput ratio"))
    assert lint.metric_names(alert.expr) == {N.RR_BADPUT_RATIO, N.RR_JOB_SECONDS}
    assert [lint.metric_names(t["expr"]) for t in panel["targets"]] == [{N.RR_BADPUT_RATIO}]
    assert panel["targets"][0]["expr"].startswith(f"{N.RR_BADPUT_RATIO}{{")  # the ratio itself, ranked
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
    assert m.group(2) == B.GRAFANA_VERSION == role_defaults("grafana")["grafana_version"]
    assert B.GRAFANA_VERSION in (ROOT / "dashboards/README.md").read_text()


def test_prometheus_job_names_agree_with_the_rules() -> None:
    d = role_defaults("prometheus")
    assert (d["prometheus_exporter_job"], d["prometheus_collector_job"], d["prometheus_controller_job"]) == (
        N.JOB_EXPORTER,
        N.JOB_COLLECTOR,
        N.JOB_CONTROLLER,
    )
    assert [Path(f).name for f in d["prometheus_rule_files"]] == ["gwms-recording.rules.yml", "gwms-alerts.rules.yml"]
