"""/metrics re-rendered by what changed (issue 34): after random ledger changes, made through the
ledger's own mutators (each marks the rows it changes: a mark forgotten fails here), the cached body,
built from the rows kept since the render before and the few encoded again, is byte for byte a
fresh render of the whole ledger, in text and OpenMetrics, and its gzip (a member per chunk)
decompresses to it."""

from __future__ import annotations

import copy
import gzip
import random
from pathlib import Path

import pytest
from prometheus_client.exposition import choose_encoder

from gwms_obs import catalogue
from gwms_obs.accounting.ledger import Ledger
from gwms_obs.accounting.overuse import Overuse
from gwms_obs.accounting.partition import Partition
from gwms_obs.accounting.pilot import PilotAccount
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.model import FrontendGroupStatus, FrontendMatch, PilotTimes
from gwms_obs.outputs import prometheus
from gwms_obs.outputs.prometheus import Exposition, _encode, _snapshot, ledger_families
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate

FACTORY = "incfactory"
ACCEPTS = (
    "",  # text 0.0.4
    "application/openmetrics-text; version=1.0.0; charset=utf-8",  # as Prometheus asks (exemplars)
    "text/plain;version=1.0.0;escaping=allow-utf-8",
)
_PER_SCRAPE = b"# HELP " + catalogue.PARSE_ERRORS.base.encode()


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inc") / "factory"
    simulate(root, 200, seed=5)
    return root


def _scanned(root: Path) -> Ingest:
    ing = Ingest(IngestConfig(str(root), settle_seconds=0, final=True, lost_after_seconds=0))
    assert ing.scan().pilots > 0
    return ing


def _check(expo: Exposition, led: Ledger, accepts: tuple[str, ...] = ACCEPTS) -> None:
    """Each encoding served, plain and gzipped, is the whole ledger rendered afresh + the per-scrape part
    (one asked for the first time joins those rendered with every change)."""
    snap = _snapshot(led)
    for accept in accepts:
        encoder, _ = choose_encoder(accept)
        full = _encode(encoder, ledger_families(snap, FACTORY))
        _, plain = expo.answer(accept, None)
        _, zipped = expo.answer(accept, "gzip")
        for body in (plain, gzip.decompress(zipped)):
            assert body[: len(full)] == full, accept
            assert body[len(full) :].startswith(_PER_SCRAPE), accept


def _account(led: Ledger, rng: random.Random, pool: tuple[str, ...] | None = None) -> PilotAccount:
    """A pilot of a pool the ledger has (or a new one), with a random partition, overuse and outcome."""
    entry, client, site = pool or rng.choice(list(led.lifetime))
    part = Partition(accuracy=rng.choice(list(catalogue.Accuracy)))
    for cat in rng.sample(list(catalogue.Category), rng.randrange(1, 4)):
        part.add(cat, cpu=rng.uniform(1, 1e5), gpu=rng.choice((0.0, rng.uniform(1, 1e3))))
        part.jobs[cat] = rng.randrange(0, 5)
    start = 1.7e9 + rng.uniform(0, 1e5)
    overused = rng.sample(list(catalogue.Overused), rng.randrange(0, 3))
    return PilotAccount(
        entry, client, site, rng.randrange(10**6), rng.randrange(4), rng.choice(list(catalogue.Outcome)),
        start, start + rng.choice((0.0, -0.0, rng.uniform(1, 2e5))), 8, None, 0,
        rng.choice((None, rng.uniform(1, 900))), part,
        overuse={r: Overuse(3, rng.randrange(0, 3), rng.uniform(0, 1e4)) for r in overused},
    )  # fmt: skip


def _group(rng: random.Random, group: str, entries: list[str]) -> FrontendGroupStatus:
    def some(names: tuple[str, ...]) -> dict[str, int]:
        return {n: rng.randrange(0, 100) for n in names if rng.random() < 0.8}

    factories = {
        (e, "gfactory_instance"): FrontendMatch(
            rng.choice((None, True, False)), some(("Idle", "EffIdle", "Running")), some(("Total", "Idle")),
            some(("Total", "Running")), some(("Idle", "MaxRun")),
        )
        for e in rng.sample(entries, 3)
    }  # fmt: skip
    return FrontendGroupStatus(
        group, 1.7e9 + rng.uniform(0, 1e5), some(("Idle", "OldIdle", "Running", "Total")),
        some(("Idle", "Running", "Total")), factories, {"Unmatched": FrontendMatch(None, some(("Idle", "OldIdle")))},
    )  # fmt: skip


KINDS = (
    "add", "add_new_pool", "add_times", "hold", "held_seconds", "held_now", "grid_resource", "submitted",
    "submit_events", "submit_failure", "removed", "entry", "group", "drop_groups", "frontend",
)  # fmt: skip


def _mutate(led: Ledger, rng: random.Random) -> str:
    """One change of the kinds the scans make, through the ledger's own mutators (each marks what it
    changes for the renderer); returns what it did (for the message)."""
    kind = rng.choice(KINDS)
    entry, client, site = rng.choice(list(led.lifetime))
    entries = sorted(led.entries)
    if kind == "add":
        led.add(_account(led, rng))
    elif kind == "add_new_pool":  # new rows, appended to their tables
        led.add(_account(led, rng, (f"NEW_{rng.randrange(10**6)}", client, site)))
    elif kind == "add_times":  # the event log's view: queue and grid-queue histograms, their exemplars
        t = PilotTimes(1, 0, submitted=1.7e9, grid_submitted=1.7e9 + rng.uniform(0, 60), started=1.7e9 + 600)
        led.add(_account(led, rng), t)
    elif kind == "hold":
        led.add_hold(entry, client, site, rng.choice(("memory", "disk", "other", f"NEW_{rng.randrange(99)}")))
    elif kind == "held_seconds":
        led.add_held_seconds(entry, client, site, rng.uniform(1, 1e4))
    elif kind == "held_now":  # replaced whole: rows come, go, and change order
        held = {
            (k[0], k[1], k[2], rng.choice(("memory", "disk"))): rng.randrange(0, 3)
            for k in rng.sample(list(led.lifetime), 3)
        }
        led.set_held_now(held)
    elif kind == "grid_resource":  # the CE's tables, replaced whole; a new site moves its row
        led.grid_resource(
            rng.choice(entries), rng.choice((site, "OTHER_SITE")), rng.random() < 0.5, 1.7e9 + rng.uniform(0, 1e5)
        )
    elif kind == "submitted":
        led.add_submitted(entry, client, site, rng.randrange(1, 20))
    elif kind == "submit_events":
        led.add_submit_events(entry, client, site, rng.randrange(1, 20))
    elif kind == "submit_failure":
        led.add_submit_failure(entry, site)
    elif kind == "removed":
        led.add_removed(entry, site, rng.choice(list(catalogue.RemovalReason)).value, rng.randrange(1, 5))
    elif kind == "entry":  # a new schedd_status.xml: the entry's rows in every entry family, its integrals
        name = rng.choice(entries)
        st, site = led.entries[name]
        new = copy.deepcopy(st)
        new.updated = (st.updated or 0.0) + 60
        new.downtime = not st.downtime
        for fs in new.frontends.values():
            fs.status["Running"] = fs.status.get("Running", 0) + rng.randrange(1, 9)
            fs.client_monitor.pop("InfoAge", None)
            fs.client_monitor["JobsIdle"] = rng.choice((0, 5))
        if rng.random() < 0.2:  # a new entry: a new unit among the sorted ones
            new.entry = f"NEW_{rng.randrange(10**6)}"
        led.update_entry(new, site)
    elif kind == "group":  # a group's new frontend_status.xml, or a new group
        led.update_frontend_group(_group(rng, rng.choice(("main", "cms", f"g{rng.randrange(9)}")), entries), client)
    elif kind == "drop_groups":  # the frontend no longer has them: their series end
        led.drop_frontend_groups(set(rng.sample(sorted(led.frontend_groups), min(2, len(led.frontend_groups)))))
    else:
        led.update_frontend(rng.choice((None, 1.7e9 + rng.uniform(0, 1e5))))
    return kind


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_after_random_changes_the_served_body_is_a_fresh_render(factory: Path, seed: int) -> None:
    ing = _scanned(factory)
    expo = Exposition(ing, factory=FACTORY)
    for accept in ACCEPTS:  # the third encoding joins those rendered with every change
        expo.answer(accept, "gzip")
    rng = random.Random(seed)
    done = []
    for _ in range(40):
        version = ing.ledger.version
        for _ in range(rng.randrange(1, 4)):
            done.append(_mutate(ing.ledger, rng))
        assert expo.refresh() == (ing.ledger.version != version), done  # (held_now the same: no change)
        _check(expo, ing.ledger)


def test_a_render_encodes_only_what_changed(factory: Path) -> None:
    ing = _scanned(factory)
    expo = Exposition(ing, factory=FACTORY)
    expo.answer(ACCEPTS[0], None)  # the text, asked for, is rendered with every change beside OpenMetrics
    ing.ledger.version += 1
    expo.refresh()
    first = expo.last_units  # every row, entry and group of the text, its first render with every change
    assert first > 200
    entry, client, site = next(iter(ing.ledger.held_seconds))
    ing.ledger.add_held_seconds(entry, client, site, 3600.0)
    assert expo.refresh()
    assert expo.last_units == 2  # that one row, in each encoding
    _check(expo, ing.ledger, ACCEPTS[:2])
    _, (st, site) = next(iter(sorted(ing.ledger.entries.items())))
    new = copy.deepcopy(st)
    new.updated = (st.updated or 0.0) + 60
    ing.ledger.update_entry(new, site)  # also adds its integrals' rows over the 60 s
    assert expo.refresh()
    assert 2 <= expo.last_units <= 2 * (1 + 2 * len(new.frontends))
    _check(expo, ing.ledger, ACCEPTS[:2])


def test_unchanged_chunks_keep_their_gzip_members(factory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ing = _scanned(factory)
    expo = Exposition(ing, factory=FACTORY)
    compressed: list[int] = []
    real = prometheus._gzip_member

    def counted(data: bytes) -> bytes:
        compressed.append(len(data))
        return real(data)

    monkeypatch.setattr(prometheus, "_gzip_member", counted)
    expo.refresh()  # OpenMetrics is gzipped with every render (as Prometheus asks for it)
    chunks = len(compressed)
    assert chunks > 20 and max(compressed) < 4 * prometheus.CHUNK_BYTES
    compressed.clear()
    entry, client, site = next(iter(ing.ledger.held_seconds))
    ing.ledger.add_held_seconds(entry, client, site, 1.0)
    expo.refresh()
    assert len(compressed) == 1  # the chunk holding that row; the others kept their members
    compressed.clear()
    expo.answer(ACCEPTS[1], "gzip")
    assert len(compressed) == 1  # the scrape's own tail
    _check(expo, ing.ledger)


def test_a_pilot_costs_its_rows_and_a_new_ledger_is_rendered_whole(factory: Path) -> None:
    ing = _scanned(factory)
    expo = Exposition(ing, factory=FACTORY)
    expo.refresh()
    whole = expo.last_units
    rng = random.Random(7)
    with ing.lock:
        ing.ledger.add(_account(ing.ledger, rng, next(iter(ing.ledger.lifetime))))
    assert expo.refresh()
    assert 3 <= expo.last_units <= 20  # its pool's rows in the tables it touched, of 1,000s
    _check(expo, ing.ledger, ACCEPTS[1:2])
    with ing.lock:  # a restored checkpoint: a new object, rendered whole
        ing.books.ledger = Ledger.from_json(ing.ledger.to_json())
        assert ing.ledger.version == 0
    assert expo.refresh()
    assert expo.last_units > whole // 2  # every row it has (exemplars and the frontend's are not saved)
    _check(expo, ing.ledger, ACCEPTS[1:2])


def test_changes_taken_by_another_reader_make_the_next_render_whole(factory: Path) -> None:
    ing = _scanned(factory)
    expo = Exposition(ing, factory=FACTORY)
    expo.refresh()
    whole = expo.last_units
    rng = random.Random(8)
    _mutate(ing.ledger, rng)
    ing.ledger.take_changes()  # what the render would have read, gone
    _mutate(ing.ledger, rng)
    assert expo.refresh()
    assert expo.last_units >= whole
    _check(expo, ing.ledger, ACCEPTS[1:2])


def test_name_filter_and_an_older_render_read_their_own_snapshot(factory: Path) -> None:
    """The snapshot a render keeps (name[], an encoding asked for the first time) is brought forward by
    copying the tables that changed: the one an older render holds is left as it was."""
    ing = _scanned(factory)
    expo = Exposition(ing, factory=FACTORY)
    expo.refresh()
    old = expo._current
    assert old is not None
    before = _encode(choose_encoder("")[0], old.families())
    rng = random.Random(9)
    for _ in range(30):
        _mutate(ing.ledger, rng)
    assert expo.refresh()
    assert _encode(choose_encoder("")[0], old.families()) == before
    name = catalogue.PILOT_LIFETIME.name
    _, body = expo.answer("", None, [f"{name}_bucket"])
    full = _encode(choose_encoder("")[0], ledger_families(_snapshot(ing.ledger), FACTORY))
    mine = [
        ln
        for ln in full.splitlines()
        if ln.startswith((f"{name}_bucket{{".encode(), f"# HELP {name} ".encode(), f"# TYPE {name} ".encode()))
    ]
    assert len(mine) > 100 and body.splitlines() == mine
