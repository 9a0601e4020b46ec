"""From a number to its pilots, live: the real exporter (a daemon sending its pilot traces through the
real collector to the real Jaeger) scraped by a real Prometheus with exemplar storage. Prometheus's
exemplar API returns the pilot histograms' exemplars and Jaeger holds their traces; the generated
dashboards' data links, filled as Grafana fills them and turned into Jaeger's query API, return
exactly the row's pilots with that outcome (and as many as the panel's number says). Another
factory of the same entries shares the Jaeger (its traces) and the Prometheus (its exporter, its
target labelled with its factory): an entry's row searches its own factory's pilots, never the
other's; a site's, which sums the factories, searches the factory chosen on the board (the hidden
variable's query, run on the Prometheus), or both at All."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from dashboards.gen import names as N
from dashboards.gen.board import PILOT_SEARCHES
from dashboards.gen.boards.common import ENTRY_HEALTH, PROVISIONING, SITE_HEALTH
from gwms_obs import catalogue
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from gwms_obs.tracing import outbox as O
from gwms_obs.tracing.redact import Tally
from tests.support.local_stack import exporter, prometheus_config
from tests.support.servers import export_command, first_scan_done, process, prom_query, prom_value, prometheus
from tests.support.trace_stack import Stack, stack
from tests.test_pilot_links import (
    boards,
    interpolate,
    jaeger_factory_query,
    jaeger_factory_variable,
    jaeger_query,
    panels,
    pilot_links,
    variable_value,
)
from tests.test_pilot_traces import Box, Pilot
from tools.polling import http_get
from tools.polling import poll as wait_for
from tools.tracing_backends import free_port

PILOTS = 60
F = catalogue.FACTORY_LABEL
OTHER = "another-factory"
HISTOGRAMS = (catalogue.PILOT_LIFETIME, catalogue.PILOT_VALIDATION, catalogue.PILOT_QUEUE_TIME)


def _expected(factory: Path, name: str | None = None) -> tuple[dict[str, Pilot], int, Box]:
    """The traces the exporter builds for the tree (the same ids: they are its pilots' identity), in
    process, and their requests; ``name``: as another factory of the same name's files would."""
    box = Box()
    cfg = IngestConfig(str(factory), settle_seconds=0, final=True, lost_after_seconds=0)
    errors = ParseErrors()
    sink = P.PilotTraces(box, name or P.factory_name(cfg.monitor, errors))
    ing = Ingest(cfg, outlets=Outlets(traces=sink), errors=errors)
    ing.scan()
    sink.flush()
    traces = {rs["scopeSpans"][0]["spans"][0]["traceId"]: Pilot(rs) for r in box.requests for rs in r["resourceSpans"]}
    return traces, len(ing.seen), box


def _send(box: Box, st: Stack, work: Path) -> None:
    """The requests into the real collector, as the exporter's forwarder posts them."""
    fw = O.SpoolForwarder(st.col.traces_url, work, ParseErrors(), token=st.col.token, spans_per_second=0)
    for r in box.requests:
        spans = sum(len(ss["spans"]) for rs in r["resourceSpans"] for ss in rs["scopeSpans"])
        assert fw.enqueue(json.dumps(r).encode(), spans, "other factory", scrubbed=Tally())
    assert fw.send_once() and not fw.pending()


def _counted(checkpoint: Path, n: int) -> bool:
    return len(json.loads(checkpoint.read_text())["seen"]) == n


def _searched(p: Pilot) -> set[str]:
    """The searches of PILOT_SEARCHES that find pilot ``p``: its root's outcome, its jobs' categories."""
    attrs = {(a["key"], next(iter(a["value"].values()))) for s in p.spans for a in s["attributes"]}
    return {title for title, key, value in PILOT_SEARCHES if (key, value) in attrs}


@contextlib.contextmanager
def _exporter(factory: Path, st: Stack, work: Path, port: int) -> Iterator[Path]:
    """The exporter daemon sending its pilots' traces; .out files settle for 2 s, so the first scans
    read the event log before the .out counts its pilot (its queue time), as on a factory."""
    token = work / "token"
    token.write_text(st.col.token)
    ck = work / "checkpoint.json"
    cmd = [
        *export_command(factory, port, ck, interval=1, settle=2),
        *("--lost-after-seconds", "0", "--traces-endpoint", st.col.traces_url, "--traces-token-file", str(token)),
    ]
    log = work / "exporter.log"
    with process(cmd, log) as p:
        url = f"http://127.0.0.1:{port}/metrics"

        def scanned() -> bool:
            if p.poll() is not None:
                raise AssertionError(f"export exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            return first_scan_done(http_get(url))

        wait_for("the exporter's first scan", scanned, 120, step=0.5)
        yield ck


def _exemplars(prom: str, metric: catalogue.MetricDef) -> list[tuple[dict[str, str], str]]:
    """(series labels, trace id) of each exemplar Prometheus holds for ``metric``."""
    now = time.time()
    q = urllib.parse.urlencode({"query": f"{metric.name}_bucket", "start": now - 3600, "end": now + 60})
    doc = json.loads(http_get(f"{prom}/api/v1/query_exemplars?{q}"))
    assert doc["status"] == "success", doc
    return [(s["seriesLabels"], e["labels"][catalogue.EXEMPLAR_TRACE_ID]) for s in doc["data"] for e in s["exemplars"]]


def _searched_by(links: list[dict[str, Any]]) -> set[str]:
    """The row's labels a table's pilot searches fill in."""
    return {x for x in ("entry", "client", "site", F) if links and f"fields.{x}:" in links[0]["url"]}


def _jaeger_ids(st: Stack, params: dict[str, str]) -> set[str]:
    doc = json.loads(http_get(f"{st.jaeger.query}/api/traces?{urllib.parse.urlencode(params)}"))
    return {t["traceID"] for t in doc.get("data") or []}


def test_exemplars_and_data_links_lead_to_the_pilots_in_jaeger(tmp_path: Path) -> None:
    now = time.time()
    factory = tmp_path / "factory"
    simulate(factory, PILOTS, seed=5, start=now - 4 * 86400, span_hours=24)
    expected, counted, _ = _expected(factory)
    assert len(expected) == counted > PILOTS // 2
    name = P.factory_name(str(factory / "monitor"), ParseErrors())  # the exporter's, in its traces
    # another factory with the same entries, sites and pilots, sharing the Jaeger
    others, _, other_box = _expected(factory, OTHER)
    assert len(others) == counted and not set(others) & set(expected)
    with stack(tmp_path) as st:
        prom_port, other_port = free_port(), free_port()
        doc = yaml.safe_load(prometheus_config([], port := free_port(), prom_port, factory_name=name))
        # the other factory's exporter (the same files, no traces: they are sent below) in the same job,
        # its target with its factory's label, as a Prometheus several factories share is told to
        job = next(j for j in doc["scrape_configs"] if j["job_name"] == N.JOB_EXPORTER)
        job["static_configs"].append({"targets": [f"127.0.0.1:{other_port}"], "labels": {F: OTHER}})
        (other_work := tmp_path / "other-exporter").mkdir()
        with (
            _exporter(factory, st, tmp_path, port) as ck,
            exporter(factory, other_work, other_port, lost_after_seconds=0),
            prometheus(tmp_path / "prom", yaml.safe_dump(doc), port=prom_port) as prom,
        ):
            # every pilot counted by the daemons, and its traces in Jaeger
            for seen in (ck, other_work / "checkpoint.json"):
                wait_for("every pilot counted", functools.partial(_counted, seen, counted), 120, step=0.5)
            per_factory = [f'sum(gwms_pilots_total{{{F}="{f}"}})' for f in (name, OTHER)]
            wait_for(
                "both factories' pilots in Prometheus",
                lambda: prom_value(prom, per_factory[0]) == prom_value(prom, per_factory[1]) > 0,
                60,
                step=0.5,
            )
            wait_for(
                "Jaeger holding every pilot's trace",
                lambda: (
                    len(J.search(st.jaeger.query, start=now - 10 * 86400, end=now + 86400, limit=10_000)) == counted
                ),
                90,
                step=1.0,
            )
            (tmp_path / "other").mkdir()
            _send(other_box, st, tmp_path / "other")
            wait_for(
                "Jaeger holding the other factory's traces too",
                lambda: (
                    len(J.search(st.jaeger.query, start=now - 10 * 86400, end=now + 86400, limit=10_000)) == 2 * counted
                ),
                90,
                step=1.0,
            )
            # Prometheus scraped the exemplars: each pilot histogram's, each naming a pilot whose trace Jaeger has.
            wait_for(
                "exemplars on every pilot histogram",
                lambda: all(_exemplars(prom, m) for m in HISTOGRAMS),
                60,
                step=1.0,
            )
            # A bucket serves its exemplar at every scrape, without a timestamp: Prometheus keeps it once
            # (a duplicate of the series' last), so its exemplar storage holds pilots, not scrapes.
            scrapes = f'count_over_time(up{{job="{N.JOB_EXPORTER}"}}[1h])'
            done = prom_value(prom, scrapes)
            wait_for("three more scrapes", lambda: prom_value(prom, scrapes) >= done + 3, 30, step=0.5)
            ids: set[str] = set()
            for m in HISTOGRAMS:
                series: dict[tuple[tuple[str, str], ...], list[str]] = defaultdict(list)
                for labels, tid in _exemplars(prom, m):
                    series[tuple(sorted(labels.items()))].append(tid)
                assert all(len(set(tids)) == len(tids) for tids in series.values()), m.name
                for labels, tid in _exemplars(prom, m):
                    p = expected[tid]  # a pilot the exporter built a trace for
                    assert (labels["entry"], labels["client"], labels["site"]) == (
                        p.resource[C.ENTRY],
                        p.resource[C.CLIENT],
                        p.resource[C.SITE],
                    )
                    ids.add(tid)
            for tid in ids:
                (t,) = J.get_trace(st.jaeger.query, tid)
                # the pilot's trace: its root span, same id (the daemon's has the event log's queue span too)
                root = expected[tid].one(C.SPAN_PILOT)["spanId"]
                assert [s["spanID"] for s in t["spans"] if s["operationName"] == C.SPAN_PILOT] == [root]
            print(f"{len(ids)} exemplar traces found in Jaeger", file=sys.stderr)

            # The hidden variable's query on the Prometheus both factories share, read as Grafana reads it:
            # the tag of the one factory chosen; nothing at All, nor for two.
            site_health = boards()[SITE_HEALTH]
            tag: dict[str, str] = {}
            for label, choice in (("All", None), (name, [name]), (OTHER, [OTHER]), ("both", [name, OTHER])):
                promql = jaeger_factory_query(site_health, choice)
                tag[label] = variable_value(jaeger_factory_variable(site_health), prom_query(prom, promql))
            assert tag == {"All": "", name: f"{C.FACTORY}={name}", OTHER: f"{C.FACTORY}={OTHER}", "both": ""}, tag

            # The data links, as Grafana fills them: an entry's rows, an entry and frontend's, the red light's site.
            site_problems = next(p for p in panels(site_health) if p["type"] == "table")
            red_light = next(p for p in panels(site_health) if p["type"] == "state-timeline")
            per_frontend = next(p for p in panels(boards()[PROVISIONING]) if p["type"] == "table")
            # an entry's rows from the exporter's series and from a recording rule's (the site problems,
            # a plain selector), both with the factory label: each row searches its own factory's pilots
            per_entry = next(
                p
                for p in panels(boards()[ENTRY_HEALTH])
                if p["type"] == "table" and _searched_by(pilot_links(p)) == {"entry", F}
            )
            rows = {
                "entry": (pilot_links(per_entry), ("entry",)),
                "entry, recorded": (pilot_links(site_problems), ("entry",)),
                "client": (pilot_links(per_frontend), ("entry", "client")),
                "site": (pilot_links(red_light), ("site",)),
            }
            own_factory = {"entry": True, "entry, recorded": True, "client": True, "site": False}
            attr = {"entry": C.ENTRY, "client": C.CLIENT, "site": C.SITE}
            from_ms, to_ms = int((now - 10 * 86400) * 1000), int((now + 86400) * 1000)
            found: dict[tuple[str, str, str], int] = defaultdict(int)
            excluded = 0  # the other factory's pilots a search left out
            for view, (links, by) in rows.items():
                pilots: dict[str, dict[tuple[tuple[str, ...], str], set[str]]] = {
                    name: defaultdict(set),
                    OTHER: defaultdict(set),
                }
                keys = set()
                for fac, traces in ((name, expected), (OTHER, others)):
                    for tid, p in traces.items():
                        key = tuple(str(p.resource[attr[x]]) for x in by)
                        keys.add(key)
                        for search in _searched(p):
                            pilots[fac][key, search].add(tid)
                for link, (title, tag_key, value) in zip(links, PILOT_SEARCHES, strict=True):
                    own = own_factory[view]
                    assert (f".{F}:percentencode" in link["url"]) == own, (view, link["url"])
                    for key in sorted(keys):
                        for fac, other in ((name, OTHER), (OTHER, name)):
                            mine, theirs = pilots[fac][key, title], pilots[other][key, title]
                            row = dict(zip(by, key, strict=True)) | {F: fac}  # the row of this factory
                            # the board: this factory chosen, or All (a row of its own factory's link reads
                            # no board variable: test_pilot_links)
                            for board in (fac,) if own else (fac, "All"):
                                q = jaeger_query(interpolate(link["url"], row, from_ms, to_ms, tag[board]))
                                got = _jaeger_ids(st, q)
                                if own or board == fac:
                                    assert json.loads(q["tags"])[C.FACTORY] == fac
                                    assert got == mine, (view, row, board, title)
                                    # without the factory, the same search finds the other factory's pilots too
                                    unfiltered = {k: v for k, v in json.loads(q["tags"]).items() if k != C.FACTORY}
                                    both = _jaeger_ids(st, q | {"tags": json.dumps(unfiltered)})
                                    assert both == mine | theirs, (view, row, title)
                                    excluded += len(both - got)
                                    found[view, title, fac] += len(got)
                                else:  # a site's row with every factory chosen: both factories' pilots
                                    assert C.FACTORY not in json.loads(q["tags"])
                                    assert got == mine | theirs, (view, row, board, title)
                            if tag_key == P.OUTCOME:  # the panel's number: the row's pilots with that outcome
                                sel = ",".join(f'{x}="{v}"' for x, v in row.items())
                                n = prom_query(prom, f'sum(gwms_pilots_total{{{sel},outcome="{value}"}})')
                                assert (float(n[0]["value"][1]) if n else 0.0) == len(mine), (row, title)
                    # the panel's time range bounds the search: a range before the factory finds nothing
                    row = dict(zip(by, sorted(keys)[0], strict=True)) | {F: name}
                    early = jaeger_query(interpolate(link["url"], row, from_ms - 86400_000, from_ms, tag[name]))
                    assert _jaeger_ids(st, early) == set()
            # every view found each factory's pilots of every search (the simulated factory has each kind)
            assert len(found) == len(rows) * len(PILOT_SEARCHES) * 2 and all(found.values()), found
            assert excluded > 0, "no search had another factory's pilots to leave out"
            print(f"pilots found through the links: {dict(found)}; left out by factory: {excluded}", file=sys.stderr)
