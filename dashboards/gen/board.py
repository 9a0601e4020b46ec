"""The pieces every dashboard is built from: panels with a question and a series budget.

A :class:`Board` collects :class:`PanelSpec` s and turns them into Grafana 11.6
JSON with grafana-foundation-sdk. Each panel says which operator question it
answers (dashboards/README.md lists them) and how many series it may return
on a factory of 500 entries with the default Top N (the series-budget test
runs every query on a real Prometheus to hold it). The conventions shared by
every board live here: the datasource variable preselecting our datasource
by uid, the factory variable (many factories, one view: see
:data:`FACTORY_SEL`), the entry/client/site variables chained on it, the Top N
variable, the links between boards that carry the time range and variables,
legends as sortable tables.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import (
    bargauge,
    common,
    heatmap,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import dashboard as D
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BarGaugeDisplayMode,
    GraphDrawStyle,
    LegendDisplayMode,
    LegendPlacement,
    StackingMode,
    VisibilityMode,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    GridPos,
    ValueMap,
    ValueMappingResult,
    VariableHide,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from gwms_obs import __version__, catalogue
from gwms_obs.catalogue import FACTORY_LABEL as FACTORY
from gwms_obs.catalogue import Category, Outcome
from gwms_obs.outputs import pilot_traces as PT
from gwms_obs.tracing import conventions as C

from . import names as N

GRAFANA_VERSION = "11.6"  # what the pinned SDK build targets; keep with the pin in pyproject.toml
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "gwms-obs"  # every board carries it; the boards' link menu lists the boards by it
TOPN = "topn"  # the Top N variable; ranked panels read $topn
TOPN_CHOICES = (5, 10, 20, 50)
TOPN_DEFAULT = 10  # what the series budgets are declared for
# Many factories, one view. Grafana reads either one factory's Prometheus, where only the
# exporter's series and the rules kept by factory carry the factory label (a scrape label there;
# an external label, which only Thanos attaches, for the rest), or the global Thanos query, where
# every series does. The variable's All is ".*", and an absent label is the empty
# string to a matcher, which ".*" matches: at All every selector matches on both. Every selector of
# every panel and variable carries FACTORY_SEL, or SPAN_FACTORY_SEL for the span metrics
# (lint.missing_factory holds it).
FACTORY_SEL = f'{FACTORY}=~"${FACTORY}"'
# The span metrics carry the pilots' factory as their own label (names.SPAN_FACTORY; a Prometheus
# several factories' collectors remote-write into has no other); the same variable selects it.
SPAN_FACTORY_SEL = f'{N.SPAN_FACTORY}=~"${FACTORY}"'
# Which factories there are: a series every factory's exporter exports, once per exporter.
FACTORY_SOURCE = catalogue.BUILD_INFO.name
# Drill-down links carry the time range, the datasource and the factories selected.
_URL_TIME = f"${{__url_time_range}}&${{datasource:queryparam}}&${{{FACTORY}:queryparam}}"


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""
    instant: bool = False
    exemplar: bool = False
    # Another unit than the panel's, on a right-hand axis (a time series of two quantities).
    unit: str = ""


@dataclass(frozen=True)
class Drill:
    """A data link: open board ``uid`` with variable ``var`` set from the series' ``label``."""

    uid: str
    title: str
    var: str
    label: str = ""  # defaults to var

    def url(self, table_row: bool) -> str:
        label = self.label or self.var
        # Instant table rows carry labels as fields; series carry them as labels.
        value = f"${{__data.fields.{label}}}" if table_row else f"${{__field.labels.{label}}}"
        return f"/d/{self.uid}/?var-{self.var}={value}&{_URL_TIME}"


# A row's pilots in Jaeger (outputs/pilot_traces.py, one trace per counted pilot): what each search
# is by, as (title, trace attribute, value). Outcomes are on the root span; "preempted" and
# "misconfiguration badput" are pilots with a user job of that category (on the job's span).
PILOT_SEARCHES: tuple[tuple[str, str, str], ...] = (
    ("validation failed", PT.OUTCOME, Outcome.VALIDATION_FAILED.value),
    ("preempted", PT.JOB_CATEGORY, Category.PREEMPTION_BADPUT.value),
    ("misconfiguration badput", PT.JOB_CATEGORY, Category.MISCONFIGURATION_BADPUT.value),
    ("lost", PT.OUTCOME, Outcome.LOST.value),
)
# A metric label -> the pilot trace's resource attribute holding the same value (the factory's names;
# the factory's own: the label its Prometheus gives the exporter's series, prometheus_factory_name).
TRACE_ATTRIBUTES = {"entry": C.ENTRY, "site": C.SITE, "client": C.CLIENT, FACTORY: C.FACTORY}
JAEGER_LIMIT = 1000  # traces a search returns: Jaeger's UI offers up to 1500
# A row that names no factory (a site's, which sums the factories; a frontend's; an alert's) searches
# the factory chosen on the board, when exactly one is: a data link cannot leave a tag out by itself,
# so this hidden variable holds the whole Jaeger tag, ``gwms.factory=NAME``, or nothing (All, several,
# a factory's own Prometheus whose series have no factory label): every factory's pilots then.
JAEGER_FACTORY = "jaeger_factory"
JAEGER_FACTORY_LABEL = "jaeger_tag"  # the variable query's label holding the tag (its regex reads it)
# Unquoted in the search's logfmt: a factory named otherwise gets no tag (every factory searched).
JAEGER_FACTORY_NAME = "[A-Za-z0-9_.:@-]+"


@dataclass(frozen=True)
class PilotSearch:
    """A data link: Grafana Explore on the Jaeger datasource, searching the pilots of the row (or
    series) whose ``labels`` it names, with one of :data:`PILOT_SEARCHES`, over the panel's time range.

    The one place a link to a row's pilots is built; every board uses it through :func:`pilot_links`.
    """

    search: str  # a title of PILOT_SEARCHES
    labels: tuple[str, ...]  # the row's labels that select its pilots: entry, site, client

    def _value(self, label: str, table_row: bool) -> str:
        # percent-encoded: the value lands inside the URL's JSON
        return (
            f"${{__data.fields.{label}:percentencode}}" if table_row else f"${{__field.labels.{label}:percentencode}}"
        )

    def title(self, table_row: bool) -> str:
        named = [x for x in self.labels if x != FACTORY]  # the factory: in the search, not the title
        of = " ".join(f"${{__data.fields.{x}}}" if table_row else f"${{__field.labels.{x}}}" for x in named)
        return f"Pilots of {of} in Jaeger: {self.search}"

    def url(self, table_row: bool) -> str:
        ((key, value),) = ((k, v) for t, k, v in PILOT_SEARCHES if t == self.search)
        # Placeholders survive the percent-encoding of the JSON; Grafana's variables replace them.
        subst = {f"GWMSVAR{i}": self._value(x, table_row) for i, x in enumerate(self.labels)}
        subst |= {"GWMSFROM": "${__from}", "GWMSTO": "${__to}"}
        # logfmt, as Grafana's Jaeger search form writes it; quoted, so a value may hold a space
        terms = [*(f'{TRACE_ATTRIBUTES[x]}="GWMSVAR{i}"' for i, x in enumerate(self.labels)), f"{key}={value}"]
        if FACTORY not in self.labels:  # the board's factory, if one is chosen (empty: logfmt skips it)
            terms.append("GWMSFACTORY")
            subst["GWMSFACTORY"] = f"${{{JAEGER_FACTORY}:percentencode}}"
        tags = " ".join(terms)
        ds = {"type": "jaeger", "uid": N.DATASOURCE_JAEGER}
        query = {
            "refId": "A",
            "datasource": ds,
            "queryType": "search",
            "service": C.SERVICE_PILOT,
            "tags": tags,
            "limit": JAEGER_LIMIT,
        }
        pane = {"datasource": N.DATASOURCE_JAEGER, "queries": [query], "range": {"from": "GWMSFROM", "to": "GWMSTO"}}
        text = urllib.parse.quote(json.dumps({"pilots": pane}, separators=(",", ":")), safe="")
        for token, var in subst.items():
            text = text.replace(token, var)
        return f"/explore?schemaVersion=1&orgId=1&panes={text}"


def pilot_links(*labels: str) -> tuple[PilotSearch, ...]:
    """The links from a row (or a series) with ``labels`` to its pilots in Jaeger, one per search
    (and by its factory where the row has one: :func:`_by_factory`)."""
    assert labels and set(labels) <= set(TRACE_ATTRIBUTES) - {FACTORY}, labels
    return tuple(PilotSearch(title, labels) for title, _, _ in PILOT_SEARCHES)


_READS = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")
# An aggregation (with its by/without list, if any) and a vector match's on/ignoring list.
_AGG = re.compile(
    r"\b(sum|min|max|avg|group|count|stddev|stdvar|count_values|quantile|topk|bottomk|limitk)"
    r"\s*(?:(by|without)\s*\(([^)]*)\))?\s*\("
)
_MATCH = re.compile(r"(\S+)\s+(on|ignoring)\s*\(([^)]*)\)\s*(group_left|group_right)?")


def keeps_factory(expr: str) -> bool:
    """Whether every result of ``expr`` keeps its series' factory label: no aggregation drops it
    (by without it, or none), nor a one-to-one vector match on labels without it."""
    for op, how, listed in _AGG.findall(expr):
        names = {x.strip() for x in listed.split(",")}
        if how and (how == "by") != (FACTORY in names):  # by without it, or without it listed
            return False
        if not how and op not in ("topk", "bottomk", "limitk"):  # these keep their series' labels
            return False
    for before, how, listed, group in _MATCH.findall(expr):
        names = {x.strip() for x in listed.split(",")}
        if before in ("and", "or", "unless") or group:  # the left side's (the many side's) labels stay
            continue
        if (how == "on") != (FACTORY in names):
            return False
    return True


def _by_factory(spec: PanelSpec, link: Link) -> Link:
    """A row's pilot search also by its factory when the row has one: every query keeps the factory
    label (:func:`keeps_factory`; a plain selector does, as the site problems' table), and reads only
    series that carry it: the exporter's (its scrape target label, prometheus_factory_name; Thanos's
    external label on the global view) and the recording rules' kept by factory
    (names.RECORDED_BY_FACTORY). An alert's series and a frontend's exporter's are no factory's, the
    span metrics name theirs otherwise (gwms_factory), and a per-site row sums the factories: those
    rows search the factory chosen on the board (:data:`JAEGER_FACTORY`)."""
    if not isinstance(link, PilotSearch):
        return link
    factory = [m.name for m in catalogue.ALL if not m.name.startswith("gwms_frontend_")]
    exporters = {*factory, *(f"{n}_bucket" for n in factory), *N.RECORDED_BY_FACTORY}
    read = {name for t in spec.targets for name in _READS.findall(t.expr)}
    if read and read <= exporters and all(keeps_factory(t.expr) for t in spec.targets):
        return PilotSearch(link.search, (FACTORY, *link.labels))
    return link


Link = Drill | PilotSearch


@dataclass
class PanelSpec:
    kind: str  # timeseries, stat, table, bargauge, statetimeline, heatmap
    title: str
    description: str
    unit: str
    targets: list[Target]
    budget: int  # most series this panel may return at 500 entries, Top N = TOPN_DEFAULT
    question: str = ""  # the operator question it answers (dashboards/README.md)
    w: int = 12
    h: int = 8
    stacked: bool = False
    percent: bool = False  # stacked to 100 %
    drill: tuple[Link, ...] = ()
    states: tuple[tuple[int, str, str], ...] = ()  # value mappings: (value, text, colour)
    # A table of one row per label set: its targets' instant tables merged on their labels, each
    # target a column named by its legend (in its own unit, if it has one).
    merge: bool = False


@dataclass
class Board:
    uid: str
    title: str
    description: str
    audience: str
    variables: tuple[str, ...] = ("entry", "client", "site", TOPN)
    specs: list[PanelSpec] = field(default_factory=list)
    # (index in specs of the first panel under it, title): rows start on a line of their own
    rows: list[tuple[int, str]] = field(default_factory=list)

    def row(self, title: str) -> None:
        """A row (an expanded Grafana row panel) over the panels added after it."""
        self.rows.append((len(self.specs), title))

    def add(
        self,
        kind: str,
        title: str,
        description: str,
        unit: str,
        targets: list[Target],
        *,
        budget: int,
        question: str = "",
        w: int = 12,
        h: int = 8,
        stacked: bool = False,
        percent: bool = False,
        drill: tuple[Link, ...] = (),
        states: tuple[tuple[int, str, str], ...] = (),
        merge: bool = False,
    ) -> None:
        assert not merge or (kind == "table" and all(t.legend for t in targets)), "merge: a table, columns named"
        self.specs.append(
            PanelSpec(
                kind, title, description, unit, targets, budget, question, w, h, stacked, percent, drill, states, merge
            )
        )

    def build(self) -> dict[str, object]:
        d = (
            D.Dashboard(self.title)
            .uid(self.uid)
            .description(f"{self.description} Generated by gwms-obs {__version__}; do not edit in the UI.")
            .tags([TAG, f"gwms-obs-{__version__}", "generated"])
            .time("now-24h", "now")
            .refresh("1m")
            .timezone("utc")
            .tooltip(DashboardCursorSync.CROSSHAIR)
            .readonly()
            .links(
                [
                    D.DashboardLink("gwms-obs dashboards")
                    .type(DashboardLinkType.DASHBOARDS)
                    .tags([TAG])
                    .as_dropdown(True)
                    .keep_time(True)
                    .include_vars(True)
                ]
            )
            .with_variable(_datasource_var())
            .with_variable(_factory_var())
        )
        for v in self.variables:
            d = d.with_variable(_topn_var() if v == TOPN else _query_var(v))
        searches = [_by_factory(s, x) for s in self.specs for x in s.drill]
        if any(isinstance(x, PilotSearch) and FACTORY not in x.labels for x in searches):
            d = d.with_variable(_jaeger_factory_var())
        x = y = row_h = 0
        # Panel ids follow the specs; rows take the ids after them, so adding a row renumbers nothing.
        rows = {at: (len(self.specs) + k, title) for k, (at, title) in enumerate(self.rows, 1)}
        for i, spec in enumerate(self.specs, 1):
            if i - 1 in rows:
                rid, title = rows[i - 1]
                y, x, row_h = y + row_h, 0, 0
                d = d.with_row(D.Row(title).id(rid).collapsed(False).grid_pos(GridPos(h=1, w=24, x=0, y=y)))
                y += 1
            if x + spec.w > 24:
                x, y, row_h = 0, y + row_h, 0
            d = d.with_panel(_panel(i, spec, GridPos(h=spec.h, w=spec.w, x=x, y=y)))
            x, row_h = x + spec.w, max(row_h, spec.h)
        doc: dict[str, object] = json.loads(JSONEncoder(sort_keys=True).encode(d.build()))
        return doc


def _datasource_var() -> D.DatasourceVariable:
    # Preselect ours by uid: on a Grafana with other Prometheus datasources, the
    # default one is theirs, not ours (the grafana role never makes ours default
    # unless told to). The user may still pick another.
    return (
        D.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(VariableOption(selected=True, text=N.DATASOURCE_PROMETHEUS, value=N.DATASOURCE_PROMETHEUS))
    )


def _factory_var() -> D.QueryVariable:
    # On one factory's Prometheus the label is absent: no values, All (".*") selected,
    # and every selector still matches. On the global Thanos query: one value per factory.
    return (
        D.QueryVariable(FACTORY)
        .label("Factory")
        .description(
            "The GlideinWMS factories (the factory external label, on the global Thanos query);"
            " empty on one factory's own Prometheus, where All matches everything."
        )
        .datasource(DS)
        .query(f"label_values({FACTORY_SOURCE}, {FACTORY})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(VariableOption(selected=True, text=["All"], value=["$__all"]))
    )


def jaeger_factory_query() -> str:
    """The PromQL of :data:`JAEGER_FACTORY`: one series whose JAEGER_FACTORY_LABEL is the Jaeger tag of
    the one factory chosen, and a series without it (so the query always has data) otherwise.

    Which factories the choice selects is read from the factories' exporters (FACTORY_SOURCE), as the
    factory variable's values are; at All (".*", the whole of "$factory") nothing is tagged, even
    where the choice selects one factory."""
    chosen = f"group by ({FACTORY}) ({FACTORY_SOURCE}{{{FACTORY_SEL}}})"
    at_all = (
        f'label_replace(vector(1), "v", "${FACTORY}", "", "") and on (v) label_replace(vector(1), "v", ".*", "", "")'
    )
    one = f"(({chosen} and on () (count({chosen}) == 1)) unless on () ({at_all}))"
    tag = f'label_replace({one}, "{JAEGER_FACTORY_LABEL}", "{C.FACTORY}=$1", "{FACTORY}", "({JAEGER_FACTORY_NAME})")'
    return f"group by ({JAEGER_FACTORY_LABEL}) ({tag}) or on () vector(1)"


def _jaeger_factory_var() -> D.QueryVariable:
    # query_result: the series as text, {jaeger_tag="gwms.factory=NAME"} 1 <time>, of which the regex
    # keeps the tag; the label-less series matches not, and no value is the empty string.
    return (
        D.QueryVariable(JAEGER_FACTORY)
        .label("Factory's Jaeger tag")
        .description("The pilot searches' gwms.factory tag: the factory chosen, if exactly one (hidden).")
        .hide(VariableHide.HIDE_VARIABLE)
        .datasource(DS)
        .query(f"query_result({jaeger_factory_query()})")
        .regex(f'/{JAEGER_FACTORY_LABEL}="([^"]+)"/')
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
    )


def _topn_var() -> D.CustomVariable:
    choices = ",".join(str(n) for n in TOPN_CHOICES)
    return (
        D.CustomVariable(TOPN)
        .label("Top N")
        .description("How many entries, sites or frontends the ranked panels show.")
        .values(choices)
        .current(VariableOption(selected=True, text=str(TOPN_DEFAULT), value=str(TOPN_DEFAULT)))
        .options([VariableOption(selected=n == TOPN_DEFAULT, text=str(n), value=str(n)) for n in TOPN_CHOICES])
    )


def _query_var(name: str) -> D.QueryVariable:
    # Chained: entry narrows to the chosen factories, client and site to the chosen entries.
    # The metric is one every entry has (its downtime flag / its queue), so no entry is missed.
    src = {
        "entry": f"label_values({catalogue.ENTRY_DOWNTIME.name}{{{FACTORY_SEL}}}, entry)",
        "site": f'label_values({catalogue.ENTRY_DOWNTIME.name}{{{FACTORY_SEL},entry=~"$entry"}}, site)',
        "client": f'label_values({catalogue.ENTRY_GLIDEINS.name}{{{FACTORY_SEL},entry=~"$entry"}}, client)',
        # A VO frontend's groups: every group's file has a time (the frontend board).
        "group": f"label_values({catalogue.FRONTEND_GROUP_UPDATED.name}{{{FACTORY_SEL}}}, group)",
    }[name]
    return (
        D.QueryVariable(name)
        .label(name.capitalize())
        .datasource(DS)
        .query(src)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def _legend() -> common.VizLegendOptions:
    # A table under the chart, sortable, biggest first: readable with many series.
    return (
        common.VizLegendOptions()
        .display_mode(LegendDisplayMode.TABLE)
        .placement(LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "max", "lastNotNull"])
        .sort_by("Mean")
        .sort_desc(True)
    )


# What a panel over time says of the years before gwms-obs (issue 35, docs/migration.md).
HISTORY_KINDS = ("timeseries", "heatmap", "statetimeline")
HISTORY_IMPORTED = " Before the cutover: GlideinWMS's own RRD history (gwms-obs import-rrd, docs/migration.md)."
HISTORY_PARTLY = (
    " Only its {names} lines have GlideinWMS RRD history before the cutover (gwms-obs import-rrd); "
    "the rest has no RRD counterpart (docs/migration.md)."
)
HISTORY_NONE = " No GlideinWMS RRD counterpart: it starts with gwms-obs's own data (docs/migration.md)."
_OWN = ("gwms_obs_", "gwms_controller_", "gwms:obs_")
_SERIES = re.compile(r"\bgwms[_:][A-Za-z0-9_:]+")


def history_note(spec: PanelSpec) -> str:
    """Whether a panel over time can show the GlideinWMS pages' imported history, said in its description."""
    if spec.kind not in HISTORY_KINDS:
        return ""
    # The factory's series: not the exporter's or the controller's own health, which GlideinWMS never had.
    used = {n for t in spec.targets for n in _SERIES.findall(t.expr) if not n.startswith(_OWN)}
    imported = {m.name for m in catalogue.RRD_IMPORTED}
    if not used:
        return ""
    if used <= imported:
        return HISTORY_IMPORTED
    if used & imported:
        return HISTORY_PARTLY.format(names=", ".join(sorted(used & imported)))
    return HISTORY_NONE


Built = timeseries.Panel | stat.Panel | table.Panel | bargauge.Panel | statetimeline.Panel | heatmap.Panel


def _title(link: Link, table_row: bool) -> str:
    return link.title(table_row) if isinstance(link, PilotSearch) else link.title


def _panel(pid: int, spec: PanelSpec, pos: GridPos) -> Built:
    p: Built
    table_rows = spec.kind == "table"
    if spec.kind == "stat":
        p = stat.Panel()
    elif spec.kind == "statetimeline":
        p = statetimeline.Panel().show_value(VisibilityMode.NEVER).merge_values(True).row_height(0.8)
    elif spec.kind == "table" and spec.merge:  # sorted by its first column
        first = spec.targets[0].legend
        p = (
            table.Panel()
            .sort_by([common.TableSortByFieldState().display_name(first).desc(True)])
            .with_transformation(DataTransformerConfig(id_val="merge", options={}))
            .with_transformation(DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True}}))
        )
        for i, t in enumerate(spec.targets):
            unit = [DynamicConfigValue(id_val="unit", value=t.unit)] if t.unit else []
            named = [DynamicConfigValue(id_val="displayName", value=t.legend), *unit]
            p = p.override_by_name(f"Value #{chr(ord('A') + i)}", named)
    elif spec.kind == "table":
        p = table.Panel().sort_by([common.TableSortByFieldState().display_name("Value").desc(True)])
    elif spec.kind == "heatmap":
        # A histogram's buckets as Prometheus holds them (no recalculation); exemplars are its dots.
        p = heatmap.Panel().calculate(False).y_axis(heatmap.YAxisConfig().unit(spec.unit))
    elif spec.kind == "bargauge":
        p = (
            bargauge.Panel()
            .orientation(VizOrientation.HORIZONTAL)
            .display_mode(BarGaugeDisplayMode.GRADIENT)
            .show_unfilled(True)
            .min(0)
        )
    else:
        ts = timeseries.Panel().draw_style(GraphDrawStyle.LINE).fill_opacity(10).legend(_legend())
        if spec.stacked or spec.percent:
            mode = StackingMode.PERCENT if spec.percent else StackingMode.NORMAL
            ts = ts.stacking(common.StackingConfig().mode(mode)).fill_opacity(60)
        p = ts
    desc = spec.description + history_note(spec)
    p = p.id(pid).title(spec.title).description(desc).datasource(DS).unit(spec.unit).grid_pos(pos)
    if spec.states:
        p = p.mappings(
            [
                ValueMap(
                    options={
                        str(v): ValueMappingResult(text=t, color=c, index=i) for i, (v, t, c) in enumerate(spec.states)
                    }
                )
            ]
        )
    if spec.drill:
        links = [_by_factory(spec, d) for d in spec.drill]
        p = p.data_links([D.DashboardLink(_title(d, table_rows)).url(d.url(table_rows)) for d in links])
    for i, t in enumerate(spec.targets):
        q = prometheus.Dataquery().expr(t.expr).ref_id(chr(ord("A") + i)).legend_format(t.legend or "__auto")
        if t.instant or spec.kind in ("table", "bargauge"):
            q = q.instant().format(PromQueryFormat.TABLE if table_rows else PromQueryFormat.TIME_SERIES)
        elif spec.kind == "heatmap":
            q = q.format(PromQueryFormat.HEATMAP)
        if t.exemplar:
            q = q.exemplar(True)
        p = p.with_target(q)
        if t.unit and not spec.merge:  # a merged table's column has it already
            assert isinstance(p, timeseries.Panel), "a second unit needs a time series' second axis"
            p = p.override_by_query(
                chr(ord("A") + i),
                [
                    DynamicConfigValue(id_val="unit", value=t.unit),
                    DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                ],
            )
    return p


# --- PromQL building blocks ----------------------------------------------------------------------


def ranked(by: str, series: str, rank: str, k: str = "topk") -> str:
    """``series`` kept only for the $topn values of ``by`` that ``rank`` ranks highest (or lowest).

    ``rank`` should look at the whole time range evaluated at its end
    (``[$__range] @ end()``), so a range query draws the same N series at
    every step instead of whichever were on top at each moment.
    """
    return f"{series} and on ({by}) {k}(${TOPN}, {rank})"


def at_end(selector: str) -> str:
    """``selector[$__range] @ end()``: the whole dashboard range, at its end."""
    return f"{selector}[$__range] @ end()"
