"""The daemon's heap frozen out of Python's collector after full scans (daemon.Heap, issue 34): once
at the first full scan, again only HEAP_FREEZE_SECONDS later (collecting what was let go of in
between), and unfrozen when the daemon stops."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gwms_obs import daemon


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_frozen_after_the_first_full_scan_then_at_most_every_period(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(daemon.time, "monotonic", lambda: now[0])
    heap = daemon.Heap(every=3600)
    kept = [Cycle() for _ in range(100)]
    assert heap.after_full_scan()
    frozen = gc.get_freeze_count()
    assert frozen >= 100  # the kept objects, and the rest of what lives now

    now[0] += 60  # a scan-mode interval later: nothing collected or frozen again
    assert not heap.after_full_scan()
    assert gc.get_freeze_count() == frozen

    now[0] += 3600  # an hour after: what the frozen part let go of is collected, the rest frozen again
    del kept
    assert heap.after_full_scan()
    assert gc.get_freeze_count() < frozen  # the 100 cycles (200 objects, with their dicts) were freed

    heap.close()
    assert gc.get_freeze_count() == 0


def test_a_cycle_let_go_while_frozen_is_collected_at_the_next_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    import weakref

    now = [0.0]
    monkeypatch.setattr(daemon.time, "monotonic", lambda: now[0])
    heap = daemon.Heap(every=10)
    c = Cycle()
    ref = weakref.ref(c)
    heap.after_full_scan()
    del c
    gc.collect()  # the collector's own full pass does not see frozen objects
    assert ref() is not None
    now[0] += 10
    heap.after_full_scan()
    assert ref() is None
    heap.close()
