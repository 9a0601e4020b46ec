"""The checkpoint encoded in pieces (ingest/checkpoint.py, issue 34): the same bytes as one json.dumps,
and no single encoding call long enough to stall the daemon's other threads (/metrics)."""

from __future__ import annotations

import gc
import json
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.ingest import checkpoint

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(max_size=6), kids, max_size=6),
    max_leaves=40,
)


def whole(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"))


@given(values)
@settings(max_examples=300)
def test_pieces_are_json_dumps(x: Any) -> None:
    assert checkpoint.dumps(x) == whole(x)


@pytest.mark.parametrize(
    "x",
    [
        {},
        [],
        {"a": {}, "b": []},
        {str(i): [i, float(i) / 3, None] for i in range(checkpoint.SLICE_ITEMS * 3 + 7)},
        [[i, "x"] for i in range(checkpoint.SLICE_ITEMS * 2)],
        {"ledger": {"cpu": [[f"e{i}", 1.5] for i in range(1234)]}, "seen": {str(i): 1 for i in range(1001)}},
        {1: "int keys", 2.5: "float"},  # json's own key coercion
        {"t": (1, 2, (3,))},
        {"deep": [[[[[[{"k": list(range(900))}]]]]]]},
        {"nan": float("nan"), "inf": [float("inf")]},
    ],
)
def test_pieces_of_large_and_odd_values(x: Any) -> None:
    assert checkpoint.dumps(x) == whole(x)


def state(pilots: int) -> dict[str, Any]:
    """A checkpoint's shape at a large factory: a few parts, the large ones maps of small records."""
    return {
        "version": checkpoint.VERSION,
        "factory_dir": "/var/log/gwms-factory",
        "seen": {f"schedd.example.org#{i}.0": [1_700_000_000.5 + i, "entry_CMS_T2_US_Example"] for i in range(pilots)},
        "cursors": {
            f"/var/log/f/server/entry_{i % 500}/completed_jobs_{i}.log": [i, 4096, "ab" * 16]
            for i in range(pilots // 10)
        },
        "ledger": {"cpu": [["entry", "site", "frontend", f"user{i}", 3600.25 * i] for i in range(2000)]},
    }


def test_no_piece_holds_the_gil_for_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every encoding call handles at most SLICE_ITEMS items of a large map: its bytes are a sliver of the whole."""
    s = state(100_000)
    sizes: list[int] = []
    encode = checkpoint._encode

    def counted(x: Any) -> str:
        out = encode(x)
        sizes.append(len(out))
        return out

    monkeypatch.setattr(checkpoint, "_encode", counted)
    total = len(checkpoint.dumps(s))
    assert total == len(whole(s))
    assert max(sizes) < total / 100, (max(sizes), total)


def test_a_thread_keeps_running_while_the_checkpoint_is_written(tmp_path: Any) -> None:
    """A thread that wakes every millisecond (as /metrics' threads wake for a scrape) is late by
    milliseconds, not by the whole encoding, while a large checkpoint is written."""
    s = state(400_000)
    t0 = time.process_time()
    whole(s)
    one_call = time.process_time() - t0
    # The state must be large enough that one call would show: else this test could not fail.
    assert one_call > 0.3, f"one json.dumps took {one_call:.2f} s of CPU: make the state larger"

    late: list[float] = []
    done = threading.Event()

    def heartbeat() -> None:
        while not done.is_set():
            t = time.perf_counter()
            time.sleep(0.001)
            late.append(time.perf_counter() - t)

    # The heap frozen as the daemon does (daemon.Heap): else a full collection of this process's
    # millions of objects, set off by any allocation, is itself a long hold of the GIL.
    gc.collect()
    gc.freeze()
    hb = threading.Thread(target=heartbeat)
    hb.start()
    try:
        checkpoint.write(str(tmp_path / "checkpoint.json"), s)
    finally:
        done.set()
        hb.join()
        gc.unfreeze()
    assert json.loads((tmp_path / "checkpoint.json").read_text()) == json.loads(whole(s))
    # Generous for a shared machine (a sleeper waits for a CPU too); a whole call would be one_call long.
    assert max(late) < min(0.15, one_call / 2), (max(late), one_call)
