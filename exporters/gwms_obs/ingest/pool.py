"""The pure part of reading one pilot's files, and the process pool that runs it across cores.

:func:`read_pilot` does everything of a pilot's accounting that depends only
on its two files and the entry's configuration: read and parse the .out and
the .err, check plausibility, build the :class:`~gwms_obs.accounting.pilot.PilotAccount`.
What it found comes back as a small picklable :class:`Read`; everything
stateful (the format evidence, the frontend's name, the ledger, ``seen``,
the health counters, the span spool, the checkpoint) is applied by
:class:`~gwms_obs.ingest.glidein_files.GlideinFilesStage` in the parent, in
the listing's order, for the serial path and the pool alike: one code path,
so the daemon and ``report`` compute the same numbers with any ``workers``.

A backfill (a first scan of a large history) sends chunks of pilots to
:func:`read_chunk` in worker processes. A chunk holds pilots of one entry
(a big entry is split in several), and each worker gets all it needs in its
arguments (:class:`Context`): no state is inherited.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import gc
import multiprocessing
import operator
import os
import signal
import threading
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from ..accounting import plausible
from ..accounting.overuse import Overuse
from ..accounting.partition import Partition, Rules
from ..accounting.pilot import EntryDefaults, PilotAccount, from_glidein
from ..catalogue import Accuracy, Category, Outcome, Overused, Source
from ..model import GlideinErr, GlideinOut, StatsFormat
from ..parse_errors import ParseErrors
from ..sources import glidein_err, glidein_out
from ..sources.budget import Budget

# One skipped piece of input, as ParseErrors.record takes it.
Record = tuple[str, str, str, int | None, str]
# One pilot to read: .out path, .err path, .err listed, entry, cluster, proc, the .out's mtime.
Task = tuple[str, str, bool, str, int, int, float]

# What ParseErrors logs of a detail; the rest need not cross a pipe.
_DETAIL_CHARS = 200


@dataclass(frozen=True, slots=True)
class Context:
    """What reading a pilot needs besides its files: the same for every pilot of a scan."""

    root: str
    max_file_bytes: int
    limits: plausible.Limits
    rules: Rules
    now: float  # the factory's clock: the latest time a pilot may report (plus skew)
    spools: bool  # return the .err's span spool (someone takes it)
    traces: bool  # return the parsed .out and .err (a pilot trace is built from them)
    defaults: dict[str, EntryDefaults]  # entry -> its descript.xml (only the entries read)


class _Recorder(ParseErrors):
    """Keeps the records for the parent to count and log (a worker logs nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[Record] = []

    def record(self, source: str, reason: str, path: str, offset: int | None = None, detail: str = "") -> None:
        self.records.append((source, reason, path, offset, detail[:_DETAIL_CHARS]))


@dataclass(slots=True)
class Read:
    """What reading one pilot found, for the parent to apply (small, picklable)."""

    records: list[Record]  # parse errors, in the order met
    spool_at: int = 0  # how many of them came before the span spool was found
    spool: bytes | None = None  # the .err's span spool, for the spool sink
    out_bytes: bool = False  # the .out's reader returned (its bytes count as read)
    out_read: bool = False  # the .out and .err were parsed (the .out's record count)
    err_read: bool = False  # the .err was parsed
    err_size: int | None = None  # the .err's size, when it was looked at
    stats_format: StatsFormat | None = None  # set when the .out is believed: the entry's format evidence
    acc: PilotAccount | None = None  # None: not counted from its files (bad, or failed)
    failure: str | None = None  # the exception that stopped the reader ("Type: message")
    trace: str = ""  # and its traceback, for the log
    facts: tuple[GlideinOut, GlideinErr | None] | None = None  # with Context.traces: what the trace needs

    def __reduce__(self) -> tuple[Any, ...]:
        # Crosses the pipe as plain tuples, its enums as indexes: pickling the
        # dataclasses and enum members as they are cost ~30 µs a pilot, a third
        # of it in the parent, which every worker waits for (tests/test_backfill_pool.py).
        return (_unpack_read, (_pack_read(self),))


# --- the wire format of a Read: what a worker sends back for each pilot ----------------------
E = TypeVar("E", bound=enum.Enum)


def _indexed(e: type[E]) -> tuple[tuple[E, ...], dict[E, int]]:
    """An enum's members in order, and each one's index: how it crosses the pipe."""
    members = tuple(e)
    return members, {m: i for i, m in enumerate(members)}


_FORMATS, _FORMAT_AT = _indexed(StatsFormat)
_CATEGORIES, _CATEGORY_AT = _indexed(Category)
_OUTCOMES, _OUTCOME_AT = _indexed(Outcome)
_ACCURACIES, _ACCURACY_AT = _indexed(Accuracy)
_OVERUSED, _OVERUSED_AT = _indexed(Overused)
# PilotAccount's fields in order; the three below are packed, every other one is sent as it is
# (a field added to PilotAccount crosses the pipe without a change here).
_ACCOUNT_FIELDS = tuple(f.name for f in dataclasses.fields(PilotAccount))
_OUTCOME_I, _PARTITION_I, _OVERUSE_I = (_ACCOUNT_FIELDS.index(n) for n in ("outcome", "partition", "overuse"))
_ACCOUNT_VALUES = operator.attrgetter(*_ACCOUNT_FIELDS)  # all of them in one C call


def _pack_account(a: PilotAccount) -> list[Any]:
    v = list(_ACCOUNT_VALUES(a))
    p = a.partition
    v[_OUTCOME_I] = _OUTCOME_AT[a.outcome]
    v[_PARTITION_I] = (
        [(_CATEGORY_AT[c], x) for c, x in p.cpu.items()],
        [(_CATEGORY_AT[c], x) for c, x in p.gpu.items()],
        [(_CATEGORY_AT[c], n) for c, n in p.jobs.items()],
        _ACCURACY_AT[p.accuracy],
    )
    v[_OVERUSE_I] = [(_OVERUSED_AT[r], o.measured, o.jobs, o.seconds) for r, o in a.overuse.items()]
    return v


def _unpack_account(v: list[Any]) -> PilotAccount:
    cpu, gpu, jobs, accuracy = v[_PARTITION_I]
    cats = _CATEGORIES
    v[_OUTCOME_I] = _OUTCOMES[v[_OUTCOME_I]]
    v[_PARTITION_I] = Partition(
        {cats[c]: x for c, x in cpu}, {cats[c]: x for c, x in gpu}, {cats[c]: n for c, n in jobs}, _ACCURACIES[accuracy]
    )
    v[_OVERUSE_I] = {_OVERUSED[r]: Overuse(m, j, x) for r, m, j, x in v[_OVERUSE_I]}
    return PilotAccount(*v)


def _pack_read(r: Read) -> tuple[Any, ...]:
    return (
        r.records,
        r.spool_at,
        r.spool,
        r.out_bytes,
        r.out_read,
        r.err_read,
        r.err_size,
        None if r.stats_format is None else _FORMAT_AT[r.stats_format],
        None if r.acc is None else _pack_account(r.acc),
        r.failure,
        r.trace,
        r.facts,
    )


def _unpack_read(t: tuple[Any, ...]) -> Read:
    records, spool_at, spool, out_bytes, out_read, err_read, err_size, fmt, acc, failure, trace, facts = t
    return Read(
        records,
        spool_at,
        spool,
        out_bytes,
        out_read,
        err_read,
        err_size,
        None if fmt is None else _FORMATS[fmt],
        None if acc is None else _unpack_account(acc),
        failure,
        trace,
        facts,
    )


def read_pilot(t: Task, ctx: Context) -> Read:
    """Read one settled pilot; never raises (a failure is returned, for quarantine)."""
    errors = _Recorder()
    r = Read(errors.records)
    try:
        _read(t, ctx, errors, r)
    except Exception as e:  # one hostile file must not stop the scan (nor the worker)
        r.acc = None
        r.failure, r.trace = f"{type(e).__name__}: {e}", traceback.format_exc()
    return r


def _read(t: Task, ctx: Context, errors: _Recorder, r: Read) -> None:
    out_path, err_path, has_err, entry, cluster, proc, mtime = t
    # One budget for the pilot's two files: no file of a pilot may cost more than a real one.
    budget = Budget()
    out = glidein_out.read_out(out_path, errors, ctx.max_file_bytes, root=ctx.root, budget=budget)
    r.out_bytes = True
    if out is None:
        return  # counted as a parse error; its line or event log may still count it
    err = None
    if has_err:  # known from the directory listing: no extra stat per pilot
        err = glidein_err.read_err(err_path, errors, detail=False, root=ctx.root, budget=budget)
        if err is not None and err.trace_spool is not None and ctx.spools:
            r.spool, r.spool_at = err.trace_spool, len(errors.records)
        if err is not None:
            r.err_size = err.size
        else:
            with contextlib.suppress(OSError):
                r.err_size = os.path.getsize(err_path)
        r.err_read = err is not None
    r.out_read = True
    d = ctx.defaults.get(entry)
    b = plausible.bounds(d, ctx.limits, max(ctx.now, mtime))
    verdict = plausible.check_glidein(out, err, b)
    if verdict.problems:
        errors.record(Source.GLIDEIN_OUT, plausible.REASON, out_path, None, "; ".join(verdict.problems))
    _check_labels(out_path, entry, out, err, d, errors)
    if not verdict.believed:
        return  # the factory's own records count it (its line, else the event log)
    r.stats_format = out.stats_format
    acc = from_glidein(out, err, d, entry=entry, client=out.client, end_hint=mtime, rules=ctx.rules)
    if acc is None:
        errors.record(Source.GLIDEIN_OUT, "no_times", out_path)
        return
    # Labels from the factory (the file's place), not from what the pilot wrote;
    # the path's entry/cluster/proc are the key the other sources use.
    acc.entry, acc.cluster, acc.proc = entry, cluster, proc
    r.acc = acc
    if ctx.traces:
        if err is not None:  # what no trace reads need not cross a pipe
            err.config, err.trace_spool = {}, None
        r.facts = (out, err)


def _check_labels(
    path: str, entry: str, out: GlideinOut, err: GlideinErr | None, d: EntryDefaults | None, errors: ParseErrors
) -> None:
    """Count what the pilot says about where it ran that the factory contradicts (never a label)."""
    said = []
    if out.entry is not None and out.entry != entry:
        said.append(f"entry {out.entry!r} in {entry!r}")
    if err is not None and err.site and d is not None and d.site and err.site != d.site:
        said.append(f"GLIDEIN_Site {err.site!r}, entry's {d.site!r}")
    if said:
        errors.record(Source.GLIDEIN_OUT, "label_mismatch", path, None, "; ".join(s[:300] for s in said))


def read_chunk(ctx: Context, tasks: list[Task]) -> list[Read]:
    """A worker's job: one chunk of pilots, in order."""
    return [read_pilot(t, ctx) for t in tasks]


def _worker_init() -> None:
    # Ctrl-C is the parent's to handle: it stops the pool; a worker must not print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_method() -> str:
    """fork in a single-threaded process (report, analyze): fastest, nothing to import again;
    forkserver when other threads run (the exporter's HTTP server): a fork could copy a lock
    one of them holds."""
    return "fork" if threading.active_count() == 1 else "forkserver"


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """While the pool runs, the objects alive when it starts are left out of garbage collection.

    A forked worker inherits this process's heap (the listing, the ledger,
    ``seen``): every full collection in the worker walked those objects and
    wrote to their headers, copying their pages; and this process's own
    collections, which the unpickling of every chunk's results triggers,
    walked them again. Frozen (Python's advice for fork without exec), neither
    does: the thread that unpickles the results took 0.25-0.33 s of CPU instead
    of 0.39-0.48 s in the 20k-pilot benchmark, the whole scan ~3 % less
    (benchmarks/results/backfill.md). What they refer to lives until the pool
    ends anyway; they are unfrozen then.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def executor(workers: int, method: str | None = None) -> ProcessPoolExecutor:
    method = method or start_method()
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload([__name__])  # imported once, in the server, not per worker
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init)
