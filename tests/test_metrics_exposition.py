"""/metrics rendered once per change (issue 34): the cached exposition equals what the old path
served, a scrape during a scan gets the previous render at once, OpenMetrics keeps its exemplars."""

from __future__ import annotations

import gzip
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import make_wsgi_app

from gwms_obs import catalogue
from gwms_obs.accounting.ledger import Ledger
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.outputs.http import MetricsServer, SharedRenders, exposition_app
from gwms_obs.outputs.prometheus import Exposition, exporter_registry
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing.outbox import ForwarderStats
from tools.tracing_backends import free_port

FACTORY = "cachedfactory"
ACCEPTS = (
    None,  # text 0.0.4
    "application/openmetrics-text; version=1.0.0; charset=utf-8",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.3",
    "text/plain;version=1.0.0;escaping=underscores",
    "application/openmetrics-text",
)
# Families whose values move between two calls on their own (CPU time, memory, collections).
_VOLATILE = (b"process_", b"python_gc_")
# The first family built per scrape: what precedes it is the ledger's render.
_PER_SCRAPE = b"# HELP " + catalogue.PARSE_ERRORS.base.encode()


def _wsgi(
    app: Any, accept: str | None, encoding: str | None = None, query: str = ""
) -> tuple[str, dict[str, str], bytes]:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": query}
    if accept is not None:
        environ["HTTP_ACCEPT"] = accept
    if encoding is not None:
        environ["HTTP_ACCEPT_ENCODING"] = encoding
    got: list[Any] = []
    body = b"".join(app(environ, lambda status, headers, exc_info=None: got.extend((status, headers))))
    return got[0], dict(got[1]), body


def _steady(body: bytes) -> bytes:
    return b"\n".join(line for line in body.split(b"\n") if not line.lstrip(b"# HELPTYPE").startswith(_VOLATILE))


def _ingest(root: Path, pilots: int, seed: int, now: float) -> Ingest:
    simulate(root, pilots, seed=seed)
    # One clock for both paths: the lag is the same in both expositions.
    cfg = IngestConfig(str(root), settle_seconds=0, final=True, lost_after_seconds=0)
    return Ingest(cfg, clock=lambda: now)


@pytest.mark.parametrize(("pilots", "seed"), [(40, 3), (300, 11)])
def test_a_scrape_equals_the_old_rendering_byte_for_byte(tmp_path: Path, pilots: int, seed: int) -> None:
    ing = _ingest(tmp_path / "factory", pilots, seed, time.time() + 600)
    stats = ForwarderStats()
    stats.sent_spans, stats.failures = 17, 2
    expo = Exposition(ing, stats, FACTORY)
    old = make_wsgi_app(exporter_registry(ing, stats, FACTORY))
    new = exposition_app(expo)
    for scan in range(2):  # the empty ledger, then the scanned one (a second scan adds nothing new)
        if scan:
            assert ing.scan().pilots > 0
            assert expo.refresh()  # what the renderer does when the daemon's scan ends
        for accept in ACCEPTS:
            for encoding in (None, "gzip"):
                s_old, h_old, b_old = _wsgi(old, accept, encoding)
                s_new, h_new, b_new = _wsgi(new, accept, encoding)
                assert (s_new, h_new) == (s_old, h_old), (accept, encoding)
                if encoding:
                    b_old, b_new = gzip.decompress(b_old), gzip.decompress(b_new)
                assert _steady(b_new) == _steady(b_old), (scan, accept, encoding)
                assert b_new.startswith(b_new.split(_PER_SCRAPE)[0]) and _PER_SCRAPE in b_new
        # name[] picks families from the render and the per-scrape part alike (in the order of a set
        # of collectors, in prometheus_client too: compared line by line).
        query = "name[]=gwms_pilots_total&name[]=gwms_obs_lag_seconds&name[]=gwms_pilot_lifetime_seconds_bucket"
        (s_old, h_old, b_old), (s_new, h_new, b_new) = (_wsgi(app, ACCEPTS[1], query=query) for app in (old, new))
        assert (s_new, h_new) == (s_old, h_old) and sorted(b_new.split(b"\n")) == sorted(b_old.split(b"\n"))
        assert b"gwms_obs_lag_seconds{" in b_new and b"gwms_cpu_seconds" not in b_new
    assert b"gwms_pilots_total{" in b_new and b" # {trace_id=" in _wsgi(new, ACCEPTS[1])[2]
    renders = expo.renders
    assert _wsgi(new, None)[2] and expo.renders == renders  # no change, no render
    assert not expo.refresh()


def test_the_render_follows_the_ledger_and_only_it(tmp_path: Path) -> None:
    ing = _ingest(tmp_path / "factory", 40, 5, time.time() + 600)
    expo = Exposition(ing)
    assert expo.refresh() and not expo.refresh()
    ing.scan()
    assert expo.refresh()  # the scan counted pilots
    ing.books.ledger = Ledger.from_json(ing.books.ledger.to_json())  # a restore: another ledger, version 0
    assert expo.refresh() and not expo.refresh()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Ingest, Exposition, str]]:
    ing = _ingest(tmp_path / "factory", 200, 23, time.time() + 600)
    expo = Exposition(ing, factory=FACTORY, min_gap=0.05, poll=0.05)
    port = free_port()
    server = MetricsServer("127.0.0.1", port, SharedRenders(exposition_app(expo)))
    expo.start()
    try:
        yield ing, expo, f"http://127.0.0.1:{port}/metrics"
    finally:
        server.close()
        expo.stop()


def _get(url: str, accept: str | None = None) -> tuple[float, str, bytes]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
        return time.monotonic() - t0, r.headers["Content-Type"], body


def test_a_scrape_during_a_long_scan_gets_the_previous_exposition_at_once(
    served: tuple[Ingest, Exposition, str],
) -> None:
    ing, expo, url = served
    _, _, before = _get(url)
    assert b"gwms_pilots_total{" not in before  # nothing counted yet
    # The scan stops in its first pilot's accounting, holding the ingest lock, until released.
    led = ing.books.ledger
    add, entered, release = led.add, threading.Event(), threading.Event()

    def held_add(*args: Any, **kw: Any) -> None:
        add(*args, **kw)
        entered.set()
        assert release.wait(30)

    led.add = held_add  # type: ignore[method-assign]
    scan = threading.Thread(target=ing.scan)
    scan.start()
    try:
        assert entered.wait(30)
        renders = expo.renders
        expo.changed()  # the renderer now waits for the lock, as a render mid-scan would
        for accept in ACCEPTS[:2]:
            took, _, during = _get(url, accept)
            assert took < 1.0, took  # at once: neither the lock nor the render is waited for
            assert _PER_SCRAPE in during  # the health, built for this scrape
        took, _, during = _get(url)
        assert took < 1.0 and during.split(_PER_SCRAPE)[0] == before.split(_PER_SCRAPE)[0]
        assert expo.renders == renders
    finally:
        release.set()
        scan.join(60)
    led.add = add  # type: ignore[method-assign]
    assert not scan.is_alive()
    expo.refresh()  # the scan's end rendered (by the thread meanwhile, or here: one render at a time)
    assert expo.renders > renders
    old = make_wsgi_app(exporter_registry(ing, factory=FACTORY))
    assert _steady(_get(url)[2]) == _steady(_wsgi(old, None)[2])


def test_openmetrics_is_negotiated_with_its_exemplars(served: tuple[Ingest, Exposition, str]) -> None:
    ing, expo, url = served
    ing.scan()
    expo.refresh()  # the scan's end rendered (by the thread meanwhile, or here)
    _, ctype, om = _get(url, ACCEPTS[1])
    assert ctype.startswith("application/openmetrics-text; version=1.0.0") and om.endswith(b"# EOF\n")
    assert om.count(b"# EOF") == 1 and b' # {trace_id="' in om
    _, ctype, text = _get(url)
    assert ctype.startswith("text/plain; version=0.0.4") and b"trace_id" not in text and b"# EOF" not in text
    # gzip as Prometheus asks for it: one valid stream holding the same exposition.
    req = urllib.request.Request(url, headers={"Accept": ACCEPTS[1], "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Content-Encoding"] == "gzip"
        assert _steady(gzip.decompress(r.read())) == _steady(om)


def test_a_change_nobody_announced_is_rendered_after_the_gap(served: tuple[Ingest, Exposition, str]) -> None:
    """A stage that moves the ledger mid-scan says nothing: the renderer's own look at the version finds it."""
    ing, expo, url = served
    renders = expo.renders
    ing.scan()  # no changed(): only the renderer's poll can see it
    deadline = time.monotonic() + 30
    while b"gwms_pilots_total{" not in _get(url)[2]:
        assert time.monotonic() < deadline, "the ledger's change was never rendered"
        time.sleep(0.05)  # polling for the condition, bounded above
    assert expo.renders > renders
