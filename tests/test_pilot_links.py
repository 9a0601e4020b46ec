"""From a number to its pilots, in the generated dashboards: the pilot histograms' panels show
exemplars, and every per-entry, per-site and per-frontend row (and the site red light) links to a
Jaeger search of its pilots by outcome (dashboards/gen/board.py PilotSearch)."""

from __future__ import annotations

import json
import re
import shlex
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from dashboards.gen import dashboards as D
from dashboards.gen import names as N
from dashboards.gen.board import JAEGER_FACTORY, PILOT_SEARCHES, TRACE_ATTRIBUTES, keeps_factory
from dashboards.gen.boards.common import PHASES, SITE_HEALTH
from gwms_obs import catalogue
from gwms_obs.tracing import conventions as C

ROOT = Path(__file__).resolve().parents[1]
PILOT_HISTOGRAMS = (catalogue.PILOT_LIFETIME, catalogue.PILOT_VALIDATION, catalogue.PILOT_QUEUE_TIME)
_VAR = re.compile(r"\$\{(__data\.fields\.|__field\.labels\.)([A-Za-z_]+)(:percentencode)?\}")


def boards() -> dict[str, dict[str, Any]]:
    """The committed dashboard JSON, by uid (what Grafana provisions)."""
    out = {}
    for f in sorted((ROOT / "dashboards/grafana").glob("*.json")):
        doc = json.loads(f.read_text())
        out[doc["uid"]] = doc
    return out


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p.get("type") != "row"]


def interpolate(url: str, row: dict[str, str], from_ms: int, to_ms: int, jaeger_factory: str = "") -> str:
    """A data link's URL as Grafana fills it: the row's (or series') values, the panel's time range,
    the board's hidden Jaeger tag of its factory (its value: :func:`variable_value`; none at All)."""

    def value(m: re.Match[str]) -> str:
        v = row[m.group(2)]
        return urllib.parse.quote(v, safe="") if m.group(3) else v

    out = _VAR.sub(value, url).replace("${__from}", str(from_ms)).replace("${__to}", str(to_ms))
    out = out.replace(f"${{{JAEGER_FACTORY}:percentencode}}", urllib.parse.quote(jaeger_factory, safe=""))
    assert "${" not in out, out
    return out


def chosen(factories: list[str] | None) -> str:
    """``$factory`` as Grafana's Prometheus datasource puts it into a query (a multi-value variable with
    All): All's ".*" as is; one value or several, regex-escaped, several as an alternation."""
    if factories is None:
        return ".*"
    esc = [re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), f.replace("\\", "\\" * 4)) for f in factories]
    return esc[0] if len(esc) == 1 else "(" + "|".join(esc) + ")"


def variable_value(variable: dict[str, Any], result: list[dict[str, Any]]) -> str:
    """A hidden query_result variable's value as Grafana sets it from its query's instant ``result``:
    each series as text (``name{k="v",...} value time``), the first the variable's regex matches,
    its first group; no match, no option: the empty string."""
    (body,) = re.fullmatch(r"/(.*)/", variable["regex"]).groups()  # type: ignore[union-attr]
    for s in result:
        labels = dict(s["metric"])
        name = labels.pop("__name__", "")
        text = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        text += f" {s['value'][1]} {int(float(s['value'][0]) * 1000)}"
        if m := re.search(body, text):
            return m.group(1)
    return ""


def jaeger_factory_variable(board: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = [v for v in board["templating"]["list"] if v["name"] == JAEGER_FACTORY]
    (v,) = found
    return v


def jaeger_factory_query(board: dict[str, Any], factories: list[str] | None) -> str:
    """The hidden variable's PromQL with the factories chosen (None: All), as Grafana sends it."""
    q = jaeger_factory_variable(board)["query"]
    inner = re.fullmatch(r"query_result\((.*)\)", q, re.S)
    assert inner, q
    return inner.group(1).replace(f"${catalogue.FACTORY_LABEL}", chosen(factories))


def jaeger_query(url: str) -> dict[str, str]:
    """The query-API parameters (/api/traces) of a Grafana Explore link to a Jaeger search."""
    parts = urllib.parse.urlsplit(url)
    assert parts.path == "/explore", url
    (panes,) = urllib.parse.parse_qs(parts.query)["panes"]
    (pane,) = json.loads(panes).values()
    (q,) = pane["queries"]
    assert pane["datasource"] == q["datasource"]["uid"] == N.DATASOURCE_JAEGER and q["datasource"]["type"] == "jaeger"
    assert q["queryType"] == "search"
    tags = dict(kv.split("=", 1) for kv in shlex.split(q["tags"]))  # logfmt: key=value, key="a value"
    return {
        "service": q["service"],
        "tags": json.dumps(tags),
        "start": str(int(pane["range"]["from"]) * 1000),  # Grafana's ms, Jaeger's us
        "end": str(int(pane["range"]["to"]) * 1000),
        "limit": str(q["limit"]),
    }


def pilot_links(panel: dict[str, Any]) -> list[dict[str, Any]]:
    return [x for x in panel["fieldConfig"]["defaults"].get("links", []) if x["url"].startswith("/explore?")]


def row_labels(panel: dict[str, Any]) -> set[str]:
    """The entry/site/client labels a panel's rows (or series) carry: those its queries group by."""
    labels: set[str] = set()
    for t in panel["targets"]:
        for by in re.findall(r"by \(([^)]*)\)", t["expr"]):
            labels |= {x.strip() for x in by.split(",")} & set(TRACE_ATTRIBUTES)
    return labels


def test_every_panel_of_a_pilot_histogram_shows_its_exemplars() -> None:
    names = tuple(f"{m.name}_bucket" for m in PILOT_HISTOGRAMS)
    seen: set[str] = set()
    for uid, b in boards().items():
        for p in panels(b):
            for t in p["targets"]:
                used = [n for n in names if n in t["expr"]]
                if used and p["type"] == "table":
                    continue  # a table's instant query draws no exemplar: its rows link to their pilots
                if used:
                    assert t.get("exemplar") is True, (uid, p["title"], t["refId"])
                    seen.update(used)
                if p["type"] == "heatmap":
                    assert t.get("exemplar") is True, (uid, p["title"])
    assert seen == set(names)  # each pilot histogram is charted, with its exemplars


def test_exemplars_link_to_the_jaeger_datasource_by_the_exporters_label() -> None:
    from tools.render import render

    doc = json.loads(json.dumps(__import__("yaml").safe_load(render("grafana", "datasources.yml.j2"))))
    by_type = {d["type"]: d for d in doc["datasources"]}
    assert by_type["prometheus"]["jsonData"]["exemplarTraceIdDestinations"] == [
        {"name": catalogue.EXEMPLAR_TRACE_ID, "datasourceUid": by_type["jaeger"]["uid"]}
    ]
    assert by_type["jaeger"]["uid"] == N.DATASOURCE_JAEGER


def test_every_row_of_entries_sites_or_frontends_links_to_its_pilots_by_outcome() -> None:
    """Every table or bar gauge with per-entry, per-site or per-frontend rows, and the site red light,
    has one Jaeger search per outcome, selecting the row's pilots by the labels its rows carry: by the
    row's own factory where its series carry one (the exporter's, prometheus_factory_name, and the
    rules' kept by factory, the site problems' included), so two factories sharing a Jaeger do not mix;
    otherwise (a site's rows sum the factories) by the factory chosen on the board, if one is."""
    F = catalogue.FACTORY_LABEL
    checked = by_factory = by_choice = 0
    for uid, b in boards().items():
        if uid == PHASES:
            continue  # another board's business
        for p in panels(b):
            red_light = uid == SITE_HEALTH and p["type"] == "state-timeline"
            labels = row_labels(p)  # with the factory, where its rows have one
            named = labels - {F}
            # A table's rows are per entry when its query groups by one, or when it links to its
            # pilots already (a recording rule's series: the site problems, per entry and site).
            rows = p["type"] in ("table", "bargauge")
            if not (rows and (named or pilot_links(p))) and not red_light:
                continue
            links = pilot_links(p)
            assert len(links) == len(PILOT_SEARCHES), (uid, p["title"])
            table = p["type"] == "table"
            row = {"entry": "CMS_T2_US_Nebraska_x", "site": "Nebraska", "client": "fe_cms.main", F: "fnal"}
            # the row's factory where the rows have it: grouped by it, or not aggregated at all (a
            # plain selector), from series that carry it on one factory's Prometheus too (the
            # factory's exporter's, its scrape target's label, and the recording rules' that keep
            # it), not an alert's, the span metrics' nor a frontend's
            exprs = [t["expr"] for t in p["targets"]]
            read = {n for e in exprs for n in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", e)}
            exporters = {m.name for m in catalogue.ALL if not m.name.startswith("gwms_frontend_")}
            exporters |= {f"{n}_bucket" for n in exporters} | set(N.RECORDED_BY_FACTORY)
            plain = not any(re.search(r"\b(sum|min|max|avg|count|group)\b", e) for e in exprs)
            own = read <= exporters and (F in labels or plain)
            for link, (title, key, value) in zip(links, PILOT_SEARCHES, strict=True):
                assert link["title"].endswith(title), link["title"]
                assert ("__data.fields." in link["url"]) == table, link["url"]
                assert F not in link["title"]  # the factory: in the search, not the title
                # the row's site (a site's row, the red light), else its entry, and frontend where per frontend
                want = {"site"} if red_light or named == {"site"} else named - {"site"} or {"entry"}
                # the board's choice: one factory (the hidden variable holds its tag), or All (empty)
                for choice in ("", f"{C.FACTORY}=fermi"):
                    url = interpolate(link["url"], row, 1_700_000_000_000, 1_700_086_400_000, choice)
                    q = jaeger_query(url)
                    tags = json.loads(q["tags"])
                    by = {x for x, attr in TRACE_ATTRIBUTES.items() if attr in tags}
                    assert by == want | ({F} if own or choice else set()), (uid, p["title"], by)
                    factory = row[F] if own else "fermi" if choice else None
                    assert tags == {TRACE_ATTRIBUTES[x]: row[x] for x in want} | {key: value} | (
                        {C.FACTORY: factory} if factory else {}
                    ), (uid, p["title"], tags)
                    assert q["service"] == C.SERVICE_PILOT
                    assert (q["start"], q["end"]) == ("1700000000000000", "1700086400000000")
                # a row's own factory is the row's, not the board's; a row without one, the board's
                assert (f"fields.{F}:" in link["url"] or f"labels.{F}:" in link["url"]) == own
                assert (f"${{{JAEGER_FACTORY}:percentencode}}" in link["url"]) != own
            checked += 1
            by_factory += own
            by_choice += not own
            if not own:
                jaeger_factory_variable(b)  # the board has the hidden variable the links read
    # the per-entry rows of the exporter's series and the site problems (a plain selector)
    assert by_factory >= 13
    # the per-site rows, the red light, the frontend's rows and the alerts table
    assert by_choice >= 8
    # 17 before issue 33 and the frontend board (seven tables, nine bar gauges, the red light), and
    # since: the entry-health tables of holds by class, CEs down, removals by reason and why
    # glideins are not running, and the frontend's two per-entry tables.
    assert checked == 23


def test_only_the_boards_with_rows_of_no_factory_have_the_hidden_variable() -> None:
    for uid, b in boards().items():
        reads = any(f"${{{JAEGER_FACTORY}:" in x["url"] for p in panels(b) for x in pilot_links(p))
        names = [v["name"] for v in b["templating"]["list"]]
        assert (JAEGER_FACTORY in names) == reads, uid
        if reads:
            v = jaeger_factory_variable(b)
            assert names[-1] == JAEGER_FACTORY  # after the factory variable it reads
            assert v["hide"] == 2 and not v["multi"] and not v["includeAll"] and v["refresh"] == 2, v
            assert f'{catalogue.FACTORY_LABEL}=~"${catalogue.FACTORY_LABEL}"' in v["query"]


@pytest.mark.parametrize(
    ("expr", "keeps"),
    [
        ('sum by (factory, entry) (x{factory=~"$factory"})', True),
        ('x{factory=~"$factory"}', True),
        ('sort_desc(topk($topn, sum by (factory, entry) (x{factory=~"$factory"})))', True),
        ('sum by (site) (x{factory=~"$factory"})', False),
        ('sum(x{factory=~"$factory"})', False),
        ('sum without (factory) (x{factory=~"$factory"})', False),
        ('sum without (instance) (x{factory=~"$factory"})', True),
        ('x{factory=~"$factory"} / on (entry, site) y{factory=~"$factory"}', False),
        ('x{factory=~"$factory"} / on (factory, entry) y{factory=~"$factory"}', True),
        ('x{factory=~"$factory"} / ignoring (factory) y{factory=~"$factory"}', False),
        ('x{factory=~"$factory"} and on (site) y{factory=~"$factory"}', True),
        ('x{factory=~"$factory"} * on (entry) group_left (site) y{factory=~"$factory"}', True),
        ('histogram_quantile(0.9, sum by (factory, le) (rate(x_bucket{factory=~"$factory"}[5m])))', True),
        ('max_over_time(x{factory=~"$factory"}[1h])', True),
    ],
)
def test_which_queries_keep_the_row_factory(expr: str, keeps: bool) -> None:
    assert keeps_factory(expr) is keeps


@pytest.mark.parametrize(
    ("result", "value"),
    [
        ([{"metric": {"jaeger_tag": f"{C.FACTORY}=fa"}, "value": [1.5, "1"]}, {"metric": {}, "value": [1.5, "1"]}],
         f"{C.FACTORY}=fa"),
        ([{"metric": {}, "value": [1.5, "1"]}], ""),
        ([], ""),
    ],
)  # fmt: skip
def test_the_hidden_variable_is_the_tag_or_nothing(result: list[dict[str, Any]], value: str) -> None:
    """Grafana's reading of the variable's query: the tag of its one tagged series, else nothing (All)."""
    v = jaeger_factory_variable(boards()[SITE_HEALTH])
    assert variable_value(v, result) == value


@pytest.mark.parametrize("entry", ["a&b=c", "x%2Fy", "sp ace", "quo'te"])
def test_a_row_value_is_percent_encoded_into_the_link(entry: str) -> None:
    """Whatever the label holds, the link's JSON parses and the search names it exactly."""
    (link, *_) = pilot_links(next(p for p in panels(boards()[SITE_HEALTH]) if p["type"] == "table"))
    q = jaeger_query(interpolate(link["url"], {"entry": entry, catalogue.FACTORY_LABEL: entry}, 0, 1))
    assert json.loads(q["tags"])[C.ENTRY] == json.loads(q["tags"])[C.FACTORY] == entry


def test_the_committed_boards_are_the_generators() -> None:
    """The links are tested on the committed JSON; it is what dashboards/gen renders (test_generated holds it too)."""
    for board in D.boards():
        assert boards()[board.uid]["panels"] == board.build()["panels"], board.uid


def test_every_prometheus_stores_exemplars_from_the_roles_one_list() -> None:
    """The unit Ansible installs, the compose stack's container and the tests' Prometheus run
    with the same --enable-feature, read from the prometheus role's prometheus_feature_flags."""
    import yaml

    from tests.support.servers import feature_flags
    from tests.support.thanos_stack import exec_start

    flag = feature_flags()
    assert "exemplar-storage" in flag.split("=", 1)[1].split(",")
    assert flag in exec_start("prometheus", "prometheus.service.j2")
    compose = yaml.safe_load((ROOT / "compose/docker-compose.yml").read_text())
    assert flag in compose["services"]["prometheus"]["command"]
