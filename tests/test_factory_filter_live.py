"""Every path from a number to its pilots keeps to its factory (issue 31): two factories with the
same entries, sites and pilots share one real Jaeger (their traces through our real collector, as
tests/test_pilot_links_live.py sends them), and `gwms-obs traces`, `gwms-obs analyze --jaeger` and
the controller's pilot list each return the one factory's pilots when given it, and both without."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gwms_obs.analysis.collect import collect
from gwms_obs.cli import main
from gwms_obs.controller.api import create_app
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from tests.support.trace_stack import stack
from tests.test_pilot_links_live import OTHER, _expected, _send
from tests.test_pilot_page import SECRET, _controller, _login
from tests.test_pilot_traces import Pilot
from tools.polling import poll as wait_for

pytestmark = pytest.mark.live

PILOTS = 40


@dataclass
class Shared:
    jaeger: str  # Jaeger's query API
    factory: Path  # the simulated factory's files (both factories' pilots are theirs)
    name: str  # its own name, as export names its traces (descript.xml's FactoryName)
    ours: dict[str, Pilot]  # trace id -> pilot, of each factory
    others: dict[str, Pilot]
    since: float
    until: float

    def ids(self, pilots: dict[str, Pilot], entry: str) -> set[str]:
        return {tid for tid, p in pilots.items() if p.resource[C.ENTRY] == entry}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    tmp = tmp_path_factory.mktemp("two-factories")
    now = time.time()
    factory = tmp / "factory"
    simulate(factory, PILOTS, seed=5, start=now - 4 * 86400, span_hours=24)
    name = P.factory_name(str(factory / "monitor"), ParseErrors())
    ours, counted, box = _expected(factory)
    others, _, other_box = _expected(factory, OTHER)
    assert len(ours) == len(others) == counted > PILOTS // 2 and not set(ours) & set(others)
    with stack(tmp) as st:
        for who, b in (("ours", box), ("other", other_box)):
            (tmp / who).mkdir()
            _send(b, st, tmp / who)
        since, until = now - 10 * 86400, now + 86400
        wait_for(
            "Jaeger holding both factories' traces",
            lambda: len(J.search(st.jaeger.query, start=since, end=until, limit=10_000)) == 2 * counted,
            90,
            step=1.0,
        )
        yield Shared(st.jaeger.query, factory, name, ours, others, since, until)


def _entry(s: Shared) -> str:
    """An entry with pilots of both factories (every entry has: the same files)."""
    return sorted({p.resource[C.ENTRY] for p in s.ours.values()})[0]


def _traces_cli(s: Shared, tmp: Path, *args: str) -> set[str]:
    out = tmp / f"t{len(list(tmp.glob('t*.csv')))}.csv"
    window = ("--since", str(s.since), "--until", str(s.until), "--limit", "1000")
    assert main(["traces", "--jaeger", s.jaeger, *window, *args, "--format", "csv", "-o", str(out)]) == 0
    return {row["trace:span"].split(":")[0] for row in csv.DictReader(io.StringIO(out.read_text()))}


def test_traces_lists_the_factory_it_is_given(shared: Shared, tmp_path: Path) -> None:
    entry = _entry(shared)
    ours, others = shared.ids(shared.ours, entry), shared.ids(shared.others, entry)
    assert ours and others
    assert _traces_cli(shared, tmp_path, "--entry", entry, "--factory-name", shared.name) == ours
    assert _traces_cli(shared, tmp_path, "--entry", entry, "--factory-name", OTHER) == others
    # the exporter's config names the factory as export names its traces
    cfg = tmp_path / "exporter.toml"
    cfg.write_text(f'factory_dir = "{shared.factory}"\nfactory_name = "{OTHER}"\n')
    assert _traces_cli(shared, tmp_path, "--entry", entry, "--config", str(cfg)) == others
    cfg.write_text(f'factory_dir = "{shared.factory}"\n')  # no name: its monitor dir's FactoryName
    assert _traces_cli(shared, tmp_path, "--entry", entry, "--config", str(cfg)) == ours
    # no factory named: every factory's, as before
    assert _traces_cli(shared, tmp_path, "--entry", entry) == ours | others
    assert _traces_cli(shared, tmp_path, "--factory-name", shared.name) == set(shared.ours)


def test_analyze_reads_its_own_factorys_spans_from_jaeger(shared: Shared, tmp_path: Path) -> None:
    def spans(factory: str | None) -> int:
        data, _, _ = collect(
            str(shared.factory), since=shared.since, until=shared.until, jaeger=shared.jaeger, factory=factory
        )
        return data.jaeger_spans

    # the same files under two names: as many phase spans each, and both when no factory is given
    ours = spans(shared.name)
    assert ours > 0 and spans(OTHER) == ours
    assert spans(None) == 2 * ours  # the mix the filter keeps out
    # The command: the factory from the tree (descript.xml), as export names it, or --factory-name.
    out = tmp_path / "a.json"
    window = ("--since", str(shared.since), "--until", str(shared.until))
    base = ["analyze", "--factory-dir", str(shared.factory), "--jaeger", shared.jaeger, *window, "--format", "json"]
    assert main([*base, "-o", str(out)]) == 0
    assert json.loads(out.read_text())["jaeger_spans"] == ours
    cfg = tmp_path / "exporter.toml"
    cfg.write_text(f'factory_dir = "{shared.factory}"\nfactory_name = "elsewhere"\n')
    assert main([*base, "--config", str(cfg), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["jaeger_spans"] == 0  # no pilot of a factory named so


def test_the_controllers_pilot_list_keeps_to_the_factory_asked_for(shared: Shared, tmp_path: Path) -> None:
    app = create_app(_controller(tmp_path, jaeger_query_url=shared.jaeger), SECRET)
    op = _login(app, "operator")
    entry = _entry(shared)

    def listed(query: str) -> set[str]:
        r = op.get(f"/pilots?{query}&since=30d&limit=500")
        assert r.status_code == 200, r.text
        return set(re.findall(r'href="/pilots/([0-9a-f]{32})"', r.text))

    ours, others = shared.ids(shared.ours, entry), shared.ids(shared.others, entry)
    assert listed(f"entry={entry}&factory={shared.name}") == ours
    assert listed(f"entry={entry}&factory={OTHER}") == others
    assert listed(f"entry={entry}") == ours | others
    assert listed(f"factory={OTHER}") == set(shared.others)
    page = op.get(f"/pilots?entry={entry}&factory={OTHER}&since=30d").text
    assert f'name="factory" value="{OTHER}"' in page and f"<td>{OTHER}</td>" in page  # shown, and kept in the form
    assert op.get("/pilots?factory=a%20b").status_code == 400
    # a pilot's page links to its entry's other pilots at its own factory
    page = op.get(f"/pilots/{sorted(others)[0]}").text
    link = re.search(r'href="(/pilots\?[^"]+)">Other pilots of', page)
    assert link and listed(html.unescape(link.group(1)).split("?", 1)[1]) == others
