"""The checkpoint file: every stage's state in one JSON object, written atomically.

A restart neither re-counts nor loses a pilot: the ledger, the log cursors,
the pilots counted and what waits for a .out are all in it. A checkpoint that
cannot be used is refused, never silently replaced (docs/runbooks.md).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

VERSION = 3  # 2: pending lines, format evidence, client_by_user names frontends; 3: cursors' fingerprints
# Versions this one loads: a version 2 checkpoint's cursors have no fingerprint and are
# trusted as they were; its timeline's open pilots, saved without their log, are put in the
# log of their submit day (condor_event_log.PilotTimeline.from_json).
READS = (2, 3)


class CheckpointError(RuntimeError):
    """The checkpoint cannot be used: corrupt, another version, another factory, wrong shape.

    The exporter refuses to start rather than silently re-count or merge
    (docs/runbooks.md says how to recover; ``--reset-checkpoint`` starts over).
    """


# json's C encoder holds the GIL for a whole call: one json.dumps of a 60 MB checkpoint (300,000 pilots)
# stopped every other thread, /metrics' included, for seconds. Encoded in pieces of at most this many
# items of a large dict or list, no call holds it for more than a few ms (same bytes, ~same CPU).
SLICE_ITEMS = 500
# A dict or list of at most this many items is looked into, item by item (the state's parts, the ledger's
# families), rather than encoded whole: its items may be large.
OPEN_ITEMS = 64
_encode = json.JSONEncoder(separators=(",", ":")).encode


def dumps(state: Any) -> str:
    """``json.dumps(state, separators=(",", ":"))``, encoded in pieces that each hold the GIL briefly."""
    return "".join(_pieces(state, 0))


def _pieces(x: Any, depth: int) -> Iterator[str]:
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):  # json's own key coercion (int, float...): whole
            yield _encode(x)
        elif len(x) <= OPEN_ITEMS and depth < 4:
            yield "{"
            for i, (k, v) in enumerate(x.items()):
                yield ("," if i else "") + _encode(k) + ":"
                yield from _pieces(v, depth + 1)
            yield "}"
        elif not x:
            yield "{}"
        else:
            items = iter(x.items())  # sliced as it goes: a list of 400,000 items is itself a long call
            sep = "{"
            while part := _encode(dict(itertools.islice(items, SLICE_ITEMS)))[1:-1]:  # "{...}": its inside
                yield sep + part
                sep = ","
            yield "}"
    elif isinstance(x, (list, tuple)):
        if len(x) <= OPEN_ITEMS and depth < 4:
            yield "["
            for i, v in enumerate(x):
                if i:
                    yield ","
                yield from _pieces(v, depth + 1)
            yield "]"
        elif not x:
            yield "[]"
        else:
            for i in range(0, len(x), SLICE_ITEMS):
                part = _encode(list(x[i : i + SLICE_ITEMS]))
                yield ("[" if i == 0 else ",") + part[1:-1]
            yield "]"
    else:
        yield _encode(x)


def write(path: str, state: dict[str, Any]) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in _pieces(state, 0):  # written as encoded: no whole copy of the text to join
                f.write(piece.encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load(path: str, factory_dir: str) -> dict[str, Any] | None:
    """The checkpoint's state (None: no file yet); CheckpointError when it cannot be used."""
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        # Refuse rather than silently start from zero and re-count everything.
        raise CheckpointError(f"checkpoint {path} unreadable: {e}") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"checkpoint {path} is not a gwms-obs checkpoint (not a JSON object)")
    if data.get("version") not in READS:
        raise CheckpointError(f"checkpoint {path} has version {data.get('version')}, expected {VERSION}")
    mine, theirs = os.path.abspath(factory_dir), data.get("factory_dir")
    if theirs != mine:
        raise CheckpointError(
            f"checkpoint {path} belongs to factory {theirs}, not {mine}: "
            "use another checkpoint file, or --reset-checkpoint to start over"
        )
    return data


def wrong_shape(path: str, e: Exception) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} has the wrong shape ({type(e).__name__}: {e}); "
        "see docs/runbooks.md, or --reset-checkpoint to start over"
    )
