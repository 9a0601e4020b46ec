"""/metrics re-rendered by what changed (issue 34): after random ledger changes the cached body,
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
from gwms_obs.ingest.config import IngestConfig
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


def _mutate(led: Ledger, rng: random.Random) -> str:
    """One change of the kinds the scans make, on a random row; returns what it did (for the message)."""
    kind = rng.choice(("counter", "new_row", "drop_row", "zero", "histogram", "exemplar", "entry", "held"))
    if kind == "counter":
        k = rng.choice(list(led.cpu))
        led.cpu[k] += rng.uniform(1, 1e6)
    elif kind == "new_row":  # a new pool: appended to its families' rows
        k0 = rng.choice(list(led.pilots))
        led.pilots[(f"NEW_{rng.randrange(10**6)}", *k0[1:])] = rng.randrange(1, 50)
    elif kind == "drop_row":
        led.cpu.pop(rng.choice(list(led.cpu)))  # (a ledger never drops a counter; held_now's rows go)
    elif kind == "zero":  # -0.0 equals 0.0 but is written apart: served as a fresh render writes it
        k = rng.choice(list(led.last_completed))
        led.last_completed[k] = -0.0 if led.last_completed[k] == 0.0 and rng.random() < 0.5 else 0.0
    elif kind == "histogram":
        h = rng.choice(list(led.lifetime.values()))
        h.observe(rng.uniform(0, 200_000))
    elif kind == "exemplar":  # the text drops exemplars, OpenMetrics writes them
        h = rng.choice(list(led.lifetime.values()))
        i = rng.randrange(len(h.counts))
        if h.exemplars is None:
            h.exemplars = [None] * len(h.counts)
        h.exemplars[i] = ("SOME_ce", rng.randrange(10**6), 0, 1.7e9, float(rng.randrange(10**4)))
    elif kind == "entry":  # a new schedd_status.xml: the entry's rows in every entry family
        _, (st, site) = rng.choice(sorted(led.entries.items()))
        new = copy.deepcopy(st)
        new.updated = (st.updated or 0.0) + 60
        new.downtime = not st.downtime
        for fs in new.frontends.values():
            fs.status["Running"] = fs.status.get("Running", 0) + rng.randrange(1, 9)
            fs.client_monitor.pop("InfoAge", None)
        led.update_entry(new, site)
    else:
        held = {(k[0], k[1], k[2], "memory"): rng.randrange(0, 3) for k in rng.sample(list(led.lifetime), 3)}
        led.set_held_now(held)
    led.version += 1  # the direct edits above; the setters bump it themselves
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
        for _ in range(rng.randrange(1, 4)):
            done.append(_mutate(ing.ledger, rng))
        assert expo.refresh(), done
        _check(expo, ing.ledger)


def test_a_render_encodes_only_what_changed(factory: Path) -> None:
    ing = _scanned(factory)
    expo = Exposition(ing, factory=FACTORY)
    expo.answer(ACCEPTS[0], None)  # the text, asked for, is rendered with every change beside OpenMetrics
    ing.ledger.version += 1
    expo.refresh()
    first = expo.last_units  # every row, entry and group of the text, its first render with every change
    assert first > 200
    ing.ledger.cpu[next(iter(ing.ledger.cpu))] += 3600.0
    ing.ledger.version += 1
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
    ing.ledger.cpu[next(iter(ing.ledger.cpu))] += 1.0
    ing.ledger.version += 1
    expo.refresh()
    assert len(compressed) == 1  # the chunk holding that row; the others kept their members
    compressed.clear()
    expo.answer(ACCEPTS[1], "gzip")
    assert len(compressed) == 1  # the scrape's own tail
    _check(expo, ing.ledger)
