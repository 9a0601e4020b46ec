"""The checkpoint encoded in pieces (ingest/checkpoint.py, issue 34): the same bytes as one json.dumps,
and no single encoding call long enough to stall the daemon's other threads (/metrics)."""

from __future__ import annotations

import json
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
