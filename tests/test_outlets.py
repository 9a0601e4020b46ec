"""Books holds ingest state only; what a counted pilot feeds besides the ledger is the Outlets the
composition root built (ingest/outlets.py), reached by plain calls: Stage.count -> Books.account ->
Ledger.add, then Outlets.counted."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.accounting.pilot import PilotAccount
from gwms_obs.catalogue import Source
from gwms_obs.ingest import checkpoint
from gwms_obs.ingest.books import Books, PilotFacts
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factory")
    simulate(out, 150, seed=7)
    return out


def test_books_has_no_output_hooks(tmp_path: Path) -> None:
    """Nothing is set on Books from outside: its only callable is the clock it was built with."""
    books = Books(IngestConfig(str(tmp_path)), clock=lambda: 0.0)
    hooks = [k for k, v in vars(books).items() if callable(v) and k != "clock"]
    assert not hooks, hooks
    assert not {"sink", "spool_sink", "trace_sink", "before_save", "save", "progress"} & set(vars(books))


def test_every_counted_pilot_reaches_the_outlets_once(factory: Path) -> None:
    accounts: list[PilotAccount] = []
    traced: list[tuple[PilotAccount, PilotFacts]] = []
    ing = Ingest(
        IngestConfig(str(factory), settle_seconds=0, final=True, lost_after_seconds=0),
        outlets=Outlets(accounts=accounts.append, traces=lambda a, f: traced.append((a, f))),
    )
    res = ing.scan()
    assert res.pilots > 100 and len(accounts) == res.pilots
    keys = [a.key for a in accounts]
    assert len(set(keys)) == len(keys)
    # a trace for each pilot with a key, from what counted it
    assert [a for a, _ in traced] == [a for a in accounts if a.key is not None]
    assert {f.source for _, f in traced} <= {s.value for s in Source}
    assert sum(res.by_source.values()) == len(accounts)


def test_a_trace_that_raises_costs_no_account(factory: Path, caplog: pytest.LogCaptureFixture) -> None:
    accounts: list[PilotAccount] = []

    def broken(acc: PilotAccount, facts: PilotFacts) -> None:
        raise RuntimeError("no trace for you")

    plain = Ingest(IngestConfig(str(factory), settle_seconds=0, final=True, lost_after_seconds=0))
    ing = Ingest(
        IngestConfig(str(factory), settle_seconds=0, final=True, lost_after_seconds=0),
        outlets=Outlets(accounts=accounts.append, traces=broken),
    )
    with caplog.at_level(logging.ERROR, logger="gwms_obs.ingest.outlets"):
        res = ing.scan()
    assert len(accounts) == res.pilots == plain.scan().pilots
    assert ing.ledger.to_json() == plain.ledger.to_json()
    assert sum("not built" in r.getMessage() for r in caplog.records) == len([a for a in accounts if a.key])


def test_traces_are_flushed_before_each_checkpoint(
    factory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint marks pilots counted: the traces built for them are written first."""
    order: list[str] = []
    write = checkpoint.write

    def recorded(path: str, state: dict[str, Any]) -> None:
        order.append("checkpoint")
        write(path, state)

    monkeypatch.setattr(checkpoint, "write", recorded)
    ing = Ingest(
        IngestConfig(str(factory), checkpoint=str(tmp_path / "cp.json"), settle_seconds=0, final=True),
        outlets=Outlets(traces=lambda a, f: order.append("trace"), flush_traces=lambda: order.append("flush")),
    )
    ing.scan()
    assert order.count("checkpoint") >= 3 and "trace" in order
    for i, step in enumerate(order):
        if step == "checkpoint":
            assert order[i - 1] == "flush", order[max(0, i - 3) : i + 1]
    last_trace = max(i for i, s in enumerate(order) if s == "trace")
    assert "flush" in order[last_trace:]
