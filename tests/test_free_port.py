"""tools.tracing_backends.free_port: the ports a test asks for before any server binds one."""

from __future__ import annotations

import itertools
import random

import pytest

from tools import tracing_backends


def test_a_port_is_never_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config takes all its ports before its server binds any: random draws that repeat
    (as two of Jaeger's and the collector's ports once did) must still give distinct ports."""
    lo, hi = tracing_backends._below_ephemeral()
    free = [p for p in range(lo, hi) if p not in tracing_backends._HANDED_OUT][:200:20]
    draws = itertools.chain(*[(p, p) for p in free[:5]], free[5:])  # each of the first five drawn twice
    monkeypatch.setattr(random, "randrange", lambda a, b: next(draws))
    ports = [tracing_backends.free_port() for _ in range(7)]
    assert len(set(ports)) == 7, ports
    assert all(lo <= p < hi for p in ports)


def test_xdist_workers_draw_from_disjoint_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pytest-xdist workers are two processes: their _HANDED_OUT sets do not see each other,
    so each draws from its own slice of the range."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    slices = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(range(*tracing_backends._below_ephemeral()))
    assert slices[0] and slices[1]
    assert not set(slices[0]) & set(slices[1]), slices
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    whole = range(*tracing_backends._below_ephemeral())
    assert set(slices[0]) | set(slices[1]) <= set(whole)
