"""The checkpoint: every stage's state in one JSON object written atomically (the base), and a
journal of what changed since, appended between two bases.

A restart neither re-counts nor loses a pilot: the ledger, the log cursors,
the pilots counted and what waits for a .out are all in it. A checkpoint that
cannot be used is refused, never silently replaced (docs/runbooks.md).

The journal (``<checkpoint>.journal``): at 300,000 pilots the base is ~39 MB and ~1.2 s of CPU to
write, mostly the pilots counted and the event log's open pilots, of which a watching daemon's five
minutes change a few hundred. Each record is that change (the small parts whole, the large ones as
their rows set and deleted), framed by its length and CRC-32 and fsync'd; records carry the
base's generation (random, so a journal never applies to a base it was not written after, even one
rewritten from scratch) and a sequence number. A load applies the records that follow the base in
order and stops at the first that is torn or out of sequence: a kill -9 mid-append leaves the state
of the record before it, as a kill mid-write of a base leaves the base before it. Each base write
deletes the journal after its own rename.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

# 2: pending lines, format evidence, client_by_user names frontends; 3: cursors' fingerprints;
# 4: a generation, the journal's records apply to the base of theirs.
VERSION = 4
# Versions this one loads: a version 2 checkpoint's cursors have no fingerprint and are
# trusted as they were; its timeline's open pilots, saved without their log, are put in the
# log of their submit day (condor_event_log.PilotTimeline.from_json). Versions 2 and 3 have no
# journal (no generation): any file beside them is not theirs and is ignored.
READS = (2, 3, 4)
JOURNAL_SUFFIX = ".journal"
_FRAME = struct.Struct(">II")  # a record's payload length and CRC-32, then the payload (JSON)
# A journal operation: (kind, path of keys into the state, value):
#   ("whole", path, value)                      the part written whole;
#   ("dict", path, {"set": {k: v}, "del": [k]})  a large JSON object's keys set and deleted;
#   ("rows", path, {"n": n, "set": [row], "del": [key]})  a large list of rows keyed by their
#       first n items, in order: deleted first, then each set row replaced where it is or appended.
Op = tuple[str, list[str], Any]


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


class Journal:
    """The journal after one base: appends its records, and says when a new base is due."""

    def __init__(self, path: str, generation: int, base_bytes: int) -> None:
        self.path = path + JOURNAL_SUFFIX
        self.generation = generation
        self.base_bytes = base_bytes
        self.bytes = 0  # appended since the base
        self.records = 0

    def full(self) -> bool:
        """Past the base's own size, the next checkpoint is a base: a load reads at most twice it."""
        return self.bytes >= max(self.base_bytes, 1 << 20)

    def append(self, ops: list[Op]) -> None:
        """Append one record, fsync'd. On an error the caller writes a base next (a torn record may
        be left at the tail, which a load ignores and no later record follows)."""
        self.records += 1
        payload = "".join(_pieces({"generation": self.generation, "seq": self.records, "ops": ops}, 0)).encode()
        new = self.bytes == 0
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if new else 0), 0o600)
        try:
            os.write(fd, _FRAME.pack(len(payload), zlib.crc32(payload)) + payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:  # the journal's name itself survives a power cut
            _fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        self.bytes += _FRAME.size + len(payload)


def _fsync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: str, state: dict[str, Any]) -> Journal:
    """Write ``state`` as the base, atomically, and start its (empty) journal."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    generation = int.from_bytes(os.urandom(8), "big") >> 1  # fits an int64, for any JSON reader of the file
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            # as encoded: no whole copy to join; its own generation, whatever ``state`` was loaded with
            for piece in _pieces({**state, "generation": generation}, 0):
                f.write(piece.encode())
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # Stale from here on (another generation): deleted so that a load does not read it for nothing.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + JOURNAL_SUFFIX)
    return Journal(path, generation, size)


def load(path: str, factory_dir: str, torn: Callable[[str, int, str], None] | None = None) -> dict[str, Any] | None:
    """The checkpoint's state, its journal applied (None: no file yet); CheckpointError when it
    cannot be used. ``torn(journal path, offset, why)``: told of a journal's tail that is ignored."""
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
    generation = data.pop("generation", None)
    if generation is not None:
        try:
            for ops in records(path + JOURNAL_SUFFIX, generation, torn):
                for op in ops:
                    apply(data, op)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:  # a valid record, wrong shape
            raise wrong_shape(path + JOURNAL_SUFFIX, e) from e
    return data


def records(journal: str, generation: int, torn: Callable[[str, int, str], None] | None = None) -> Iterator[list[Op]]:
    """The operations of each valid record of ``generation``, in order, up to the first that is not."""
    try:
        with open(journal, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return
    except OSError as e:
        raise CheckpointError(f"checkpoint journal {journal} unreadable: {e}") from e
    at, seq = 0, 1
    while at < len(raw):
        why = ""
        if len(raw) - at < _FRAME.size:
            why = "a record's header cut short"
        else:
            n, crc = _FRAME.unpack_from(raw, at)
            payload = raw[at + _FRAME.size : at + _FRAME.size + n]
            if len(payload) < n:
                why = f"a record cut short ({len(payload)} of {n} bytes)"
            elif zlib.crc32(payload) != crc:
                why = "a record's checksum does not match"
            else:
                try:
                    rec = json.loads(payload)
                except ValueError as e:
                    why = f"a record that is not JSON ({e})"
                else:
                    if not isinstance(rec, dict) or rec.get("generation") != generation:
                        return  # an older base's journal, left by a kill between a base's rename and its unlink
                    if rec.get("seq") != seq:
                        why = f"record {rec.get('seq')} where {seq} was due"
                    else:
                        yield [(str(k), list(p), v) for k, p, v in rec["ops"]]
                        at += _FRAME.size + n
                        seq += 1
                        continue
        if torn is not None:
            torn(journal, at, why)
        return


def apply(state: dict[str, Any], op: Op) -> None:
    """Apply one journal operation (:data:`Op`) to a loaded state."""
    kind, path, value = op
    parent = state
    for k in path[:-1]:
        parent = parent.setdefault(k, {})
    last = path[-1]
    if kind == "whole":
        parent[last] = value
    elif kind == "dict":
        d = parent.setdefault(last, {})
        for k in value["del"]:
            d.pop(k, None)
        d.update(value["set"])
    elif kind == "rows":
        n = value["n"]
        rows = {tuple(r[:n]): r for r in parent.get(last, [])}
        for k in value["del"]:
            rows.pop(tuple(k), None)
        for r in value["set"]:
            rows[tuple(r[:n])] = r
        parent[last] = list(rows.values())
    else:
        raise ValueError(f"unknown journal operation {kind!r}")


# What a part of the state kept of a map when it was last saved: key -> (position, fingerprint, value).
Marks = dict[tuple[Any, ...], tuple[int, Any, Any]]


def mark_rows(items: Iterable[tuple[tuple[Any, ...], Any]], fingerprint: Callable[[Any], Any]) -> Marks:
    """A map's marks (the value is kept so that an ``id`` fingerprint cannot be reused)."""
    return {k: (i, fingerprint(v), v) for i, (k, v) in enumerate(items)}


def rows_changed(
    marks: Marks,
    live: Mapping[tuple[Any, ...], Any],
    fingerprint: Callable[[Any], Any],
    row: Callable[[Any, Any], list[Any]],
    n: int,
) -> dict[str, Any]:
    """A "rows" operation's value: what changed in an insertion-ordered ``live`` map since ``marks``.

    Its rows are replaced in place, deleted, or added at its end; a key deleted and added again
    moved to the end. The keys still in their marked order come first; from the first key that is
    new or out of that order, every row is written (its old one deleted), so the applied rows are in
    ``live``'s order.
    """
    out: list[list[Any]] = []
    moved: list[list[Any]] = []
    last, tail = -1, False
    for k, v in live.items():
        old = marks.get(k)
        if not tail and old is not None and old[0] > last:
            last = old[0]
            if old[1] == fingerprint(v):
                continue
        else:
            tail = True
            if old is not None:
                moved.append(list(k))
        out.append(row(k, v))
    gone = [list(k) for k in marks.keys() - live.keys()]
    return {"n": n, "set": out, "del": gone + moved}


def wrong_shape(path: str, e: Exception) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} has the wrong shape ({type(e).__name__}: {e}); "
        "see docs/runbooks.md, or --reset-checkpoint to start over"
    )
