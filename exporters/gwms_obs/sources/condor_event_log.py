"""Reader for the HTCondor-G event logs, ``entry_<entry>/condor_activity_<YYYYMMDD>_<client>.log``.

Standard HTCondor user log: each event is a header line
``NNN (cluster.proc.subproc) DATE TIME text``, optional body lines, and a
line ``...``. DATE is ``YYYY-MM-DD`` since HTCondor 8.9.3 and the year-less
``MM/DD`` before (or with DEFAULT_USERLOG_FORMAT_OPTIONS); the year then
comes from the file name, which is the glidein's submit day. Times are the
factory's local time unless the ISO form carries ``Z`` or an offset.

GlideinWMS's own timings break on the modern date form (formats doc 7.3),
so this parser is the only source of pilot start/end when the .out is lost.

``parse_buffer`` hands an ordinary buffer to the compiled reader when there is
one (native/src/eventlog.rs, see :mod:`gwms_obs.native`): the same events, times
bit for bit, local time included; anything it would not read exactly as the
code below does (a parse error, a ZoneInfo ``tz``, a year out of its range) is
read here, and this code stays the reference (tests/test_native_condor_event_log.py).
"""

from __future__ import annotations

import os
import re
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Any

from .. import native
from ..catalogue import Source
from ..model import HoldInterval, PilotTimes
from ..parse_errors import ParseErrors

MAX_EVENT = 1 << 20  # an event (header + body) longer than this is skipped ("line_too_long")

SUBMITTED, EXECUTING, EVICTED, TERMINATED, ABORTED, HELD, RELEASED, GRID_SUBMITTED = 0, 1, 4, 5, 9, 12, 13, 27
# The gridmanager's view of the CE (the manual's event table; condor_event.cpp GridResourceUpEvent and
# GridResourceDownEvent write "Grid Resource Back Up" / "Detected Down Grid Resource", then
# "    GridResource: <resource>"), one event per job of that resource.
GRID_RESOURCE_UP, GRID_RESOURCE_DOWN = 25, 26
_KEPT = frozenset(
    {
        SUBMITTED,
        EXECUTING,
        EVICTED,
        TERMINATED,
        ABORTED,
        HELD,
        RELEASED,
        GRID_RESOURCE_UP,
        GRID_RESOURCE_DOWN,
        GRID_SUBMITTED,
    }
)
MAX_HOLDS = 20  # hold intervals kept per pilot; later ones are only counted
MAX_EVICTIONS = 20  # eviction times kept per pilot; later ones are only counted

_SRC = Source.CONDOR_EVENT_LOG.value

_END = re.compile(rb"^\.\.\.[ \t\r]*$", re.M)
_HEADER = re.compile(
    rb"(\d{3}) \((\d{1,18})\.(\d{1,9})\.\d{1,9}\) "
    rb"(?:(\d{4})-(\d\d)-(\d\d)|(\d\d)/(\d\d))[ T](\d\d):(\d\d):(\d\d)(\.\d{1,9})?(Z|[+-]\d\d:?\d\d)?(?![^ \t\r\n])"
)
_HEADER_START = re.compile(rb"^\d{3} \(", re.M)  # a new event inside an unterminated one
_NORMAL = re.compile(rb"\(1\) Normal termination \(return value (-?\d{1,9})\)")
_ABNORMAL = re.compile(rb"\(0\) Abnormal termination \(signal (\d{1,9})\)")
# A 012's HoldReasonCode and HoldReasonSubCode: JobHeldEvent::formatBody writes "\tCode %d Subcode %d"
# on the line after the reason (HTCondor src/condor_utils/condor_event.cpp).
_CODES = re.compile(rb"Code (-?\d{1,9}) Subcode (-?\d{1,9})")
_FILE = re.compile(r"condor_activity_(\d{8})_(.+)\.log(?:\.[1-9][0-9]{0,3})?")  # ".log.N": rotated, the same log
_ENTRY_DIR = re.compile(r"entry_(.+)")


@dataclass(slots=True)
class CondorEvent:
    cluster: int
    proc: int
    code: int  # 0 submitted, 1 executing, 4 evicted, 5 terminated, 9 aborted, 12 held, 13 released,
    # 25 grid resource up, 26 grid resource down, 27 grid submitted
    time: float
    return_value: int | None = None  # 005 normal termination
    reason: str | None = None  # 012 hold reason, 009 first body line, 005 "signal N"
    reason_code: int | None = None  # 012: HoldReasonCode ("Code N Subcode M")
    reason_subcode: int | None = None  # 012: HoldReasonSubCode


def names_from_path(path: str) -> tuple[str | None, date | None, str | None]:
    """``.../entry_<e>/condor_activity_<YYYYMMDD>_<client>.log`` (or ``.log.N``, rotated) -> (entry, day, client)."""
    em = _ENTRY_DIR.fullmatch(os.path.basename(os.path.dirname(path)))
    fm = _FILE.fullmatch(os.path.basename(path))
    day: date | None = None
    client: str | None = None
    if fm:
        client = fm.group(2)
        try:
            day = datetime.strptime(fm.group(1), "%Y%m%d").date()
        except ValueError:
            day = None
    return (em.group(1) if em else None), day, client


def _year_for(month: int, dom: int, ref: date) -> int:
    """The year that puts MM/DD nearest the reference day (the file's submit
    day: events follow it by days, seldom precede it by more than hours)."""
    best = ref.year
    best_gap: int | None = None
    for y in (ref.year - 1, ref.year, ref.year + 1):
        try:
            gap = abs((date(y, month, dom) - ref).days)
        except ValueError:  # 02/29 in a non-leap year
            continue
        if best_gap is None or gap < best_gap:
            best, best_gap = y, gap
    return best


def _to_epoch(m: re.Match[bytes], ref: date, tz: tzinfo | None) -> float:
    g = m.groups()
    if g[3] is not None:
        y, mo, d = int(g[3]), int(g[4]), int(g[5])
    else:
        mo, d = int(g[6]), int(g[7])
        y = _year_for(mo, d, ref)
    frac = float(g[11]) if g[11] else 0.0
    zone = tz
    if g[12]:
        off = g[12].replace(b":", b"")
        zone = (
            UTC
            if off == b"Z"
            else timezone((-1 if off[:1] == b"-" else 1) * timedelta(hours=int(off[1:3]), minutes=int(off[3:5])))
        )
    dt = datetime(y, mo, d, int(g[8]), int(g[9]), int(g[10]), tzinfo=zone)
    # A naive datetime's timestamp() is the host's local time, DST included.
    return dt.timestamp() + frac


def _parse_event(
    ev: bytes, path: str, offset: int, errors: ParseErrors, *, ref: date, tz: tzinfo | None
) -> CondorEvent | None:
    m = _HEADER.match(ev)
    if m is None:
        errors.record(_SRC, "bad_event", path, offset, ev[:200].decode("utf-8", "replace"))
        return None
    code = int(m.group(1))
    if code not in _KEPT:
        return None
    try:
        t = _to_epoch(m, ref, tz)
    except (ValueError, OverflowError, OSError):
        errors.record(_SRC, "bad_time", path, offset, ev[:80].decode("utf-8", "replace"))
        return None
    e = CondorEvent(int(m.group(2)), int(m.group(3)), code, t)
    body = ev[m.end() :]
    if code == TERMINATED:
        n = _NORMAL.search(body)
        if n:
            e.return_value = int(n.group(1))
        else:
            s = _ABNORMAL.search(body)
            if s:
                e.reason = f"signal {int(s.group(1))}"
    elif code in (HELD, ABORTED):
        # The reason is the first body line that is not "Code ..."; a 012's codes are the
        # first body line that is exactly "Code N Subcode M" (the line after the reason).
        for line in body.split(b"\n")[1:]:
            text = line.strip()
            if not text:
                continue
            if text.startswith(b"Code "):
                if code == HELD and e.reason_code is None and (c := _CODES.fullmatch(text)):
                    e.reason_code, e.reason_subcode = int(c.group(1)), int(c.group(2))
            elif e.reason is None:
                e.reason = text.decode("utf-8", "replace")[:500]
            if e.reason is not None and (code != HELD or e.reason_code is not None):
                break
    return e


_PYTHON_ONLY = "python"


def _native_zone(tz: tzinfo | None) -> int | str | None:
    """The zone as the compiled reader takes it: None (local time), whole seconds east of
    UTC (a fixed ``timezone``), or ``_PYTHON_ONLY`` (any other tzinfo: a ZoneInfo, a
    sub-second offset) for the Python reader alone."""
    if tz is None:
        return None
    if type(tz) is timezone:
        off = tz.utcoffset(None)
        if not off.microseconds:
            return off.days * 86400 + off.seconds
    return _PYTHON_ONLY


def parse_buffer(
    buf: bytes,
    path: str,
    base_offset: int,
    errors: ParseErrors,
    *,
    tz: tzinfo | None = None,
    ref_day: date | None = None,
) -> tuple[list[CondorEvent], int]:
    """Parse every complete event (ending with a ``...`` line) of ``buf``.

    Returns the kept events (codes 000/001/004/005/009/012/013/025/026/027) and the bytes
    consumed; an unterminated last event is left for the next call unless it
    is already longer than ``MAX_EVENT``. ``tz`` is the factory's zone
    (None: this host's local zone); ``ref_day`` anchors year-less dates and
    defaults to the date in the file name, else today.
    """
    if ref_day is None:
        ref_day = names_from_path(path)[1] or date.today()
    if native.core is not None and type(buf) is bytes:
        # The compiled fast path (native/src/eventlog.rs): the same events and times, bit for
        # bit, or None for any buffer this reader would find fault with.
        zone = _native_zone(tz)
        if zone is not _PYTHON_ONLY:
            found = native.core.parse_eventlog(
                buf, CondorEvent, zone, (ref_day.year, ref_day.month, ref_day.day), MAX_EVENT
            )
            if found is not None:
                events: list[CondorEvent] = found[0]
                return events, found[1]
    out: list[CondorEvent] = []
    pos = 0
    for em in _END.finditer(buf):
        start = pos
        pos = em.end() + 1 if em.end() < len(buf) else em.end()
        if em.end() >= len(buf):
            # "..." without its newline yet: wait, the writer may still be mid-line.
            pos = start
            break
        chunk = buf[start : em.start()]
        if len(chunk) > MAX_EVENT:
            errors.record(_SRC, "line_too_long", path, base_offset + start, f"{len(chunk)} bytes")
            continue
        # A crash can cut an event and the next one start right after it,
        # without "...": split there so the later, complete event survives.
        heads = [h.start() for h in _HEADER_START.finditer(chunk)]
        if not heads or heads[0] != 0:
            lead = chunk[: heads[0]] if heads else chunk
            if lead.strip():
                errors.record(_SRC, "bad_event", path, base_offset + start, lead[:200].decode("utf-8", "replace"))
        for i, h in enumerate(heads):
            piece = chunk[h : heads[i + 1] if i + 1 < len(heads) else len(chunk)]
            if i + 1 < len(heads):
                cut = piece[:80].decode("utf-8", "replace")
                errors.record(_SRC, "truncated_event", path, base_offset + start + h, cut)
                continue
            ev = _parse_event(piece, path, base_offset + start + h, errors, ref=ref_day, tz=tz)
            if ev is not None:
                out.append(ev)
    if len(buf) - pos > MAX_EVENT:
        errors.record(_SRC, "line_too_long", path, base_offset + pos, f"> {MAX_EVENT} bytes, unterminated")
        pos = len(buf)
    return out, pos


_PROC = (1 << 30) - 1

# One event log, as the timeline knows it: (entry, client, submit day YYYYMMDD or None).
LogKey = tuple[str | None, str | None, str | None]


def _job(cluster: int, proc: int) -> int:
    """A pilot within its log, as one int: a proc has at most 9 digits (< 2**30)."""
    return cluster << 30 | proc


class _Jobs:
    """The ended pilots of one log (_job ints): a sorted array, 8 bytes a pilot (a set of ints is ~90).
    A pilot ends after most of those before it in its log, so an insert moves little."""

    __slots__ = ("_a", "_wide")
    _FITS = 1 << 63  # a cluster id beyond 2**33 (the reader takes 18 digits) is kept in a set

    def __init__(self, jobs: Iterable[int] = ()) -> None:
        self._wide: set[int] = set()
        self._a = array("q")
        for j in sorted(jobs):
            if j < self._FITS:
                self._a.append(j)
            else:
                self._wide.add(j)

    def __contains__(self, job: int) -> bool:
        if job >= self._FITS:
            return job in self._wide
        a = self._a
        i = bisect_left(a, job)
        return i < len(a) and a[i] == job

    def add(self, job: int) -> None:
        """Add a pilot not in it."""
        if job >= self._FITS:
            self._wide.add(job)
        elif not self._a or job > self._a[-1]:
            self._a.append(job)
        else:
            self._a.insert(bisect_left(self._a, job), job)

    def drop(self, n: int) -> int:
        """Forget ``n`` pilots at most, the lowest ids first; the number forgotten."""
        k = min(n, len(self._a))
        del self._a[:k]
        while k < n and self._wide:
            self._wide.pop()
            k += 1
        return k

    def __len__(self) -> int:
        return len(self._a) + len(self._wide)

    def fingerprint(self) -> tuple[int, ...]:
        """Changes whenever its pilots do: adds change its length; drop() takes the lowest, so an add
        and a drop that change what it holds change its lowest."""
        a = self._a
        return (len(a), a[0] if a else -1, a[-1] if a else -1, *sorted(self._wide))

    def __iter__(self) -> Iterator[int]:
        yield from self._a
        yield from sorted(self._wide)


def log_of(path: str) -> LogKey:
    """The log a path is (its rotated names ``.log.N`` are the same log)."""
    em = _ENTRY_DIR.fullmatch(os.path.basename(os.path.dirname(path)))
    fm = _FILE.fullmatch(os.path.basename(path))
    return (em.group(1) if em else None), (fm.group(2) if fm else None), (fm.group(1) if fm else None)


class PilotTimeline:
    """Folds events into :class:`PilotTimes`, one per (entry, client, cluster, proc).

    A pilot is returned by :meth:`feed` and forgotten as soon as it ends (005
    or 009); a hold alone is not an end, since 013 may release it. Memory is
    bounded: pilots silent for ``max_age`` seconds of their log's own time (see
    :meth:`expire`) or beyond ``max_pilots`` are returned as they are, oldest first.
    An ended pilot is remembered, so that a late stray event of it is refused, while its
    log is on disk (:meth:`forget_ended`), and ``max_pilots`` of them at most.
    """

    def __init__(self, max_pilots: int = 200_000, max_age: float = 30 * 86400) -> None:
        self.max_pilots = max_pilots
        self.max_age = max_age
        # Value: (pilot, time of its newest event, its log); ordered by insertion.
        self._open: OrderedDict[tuple[str | None, str | None, int, int], tuple[PilotTimes, float, LogKey]] = (
            OrderedDict()
        )
        # The newest event time read from each log with open pilots: the log's own clock.
        self._newest: dict[LogKey, float] = {}
        # Late stray events of an ended pilot must not resurrect it: per log (in the order their first
        # pilot ended), its ended pilots (_Jobs: ~9 bytes a pilot, where a key tuple in an OrderedDict
        # took ~210). Day None: a log with no day in its name, or the keys of a checkpoint written
        # before ended pilots kept their log (looked up for every day's log).
        self._ended: dict[LogKey, _Jobs] = {}
        self._n_ended = 0
        # The open pilots held now (a subset of _open): what held_now() walks.
        self._held: set[tuple[str | None, str | None, int, int]] = set()
        # What the last feed() saw besides pilots' ends, for its caller to take (drain()):
        # holds begun (a 012 of a pilot not held), the seconds of holds ended, and the
        # gridmanager's 025/026 events (log, code, time).
        self.holds_begun: list[tuple[LogKey, CondorEvent]] = []
        self.holds_ended: list[tuple[LogKey, float]] = []
        self.grid_resource: list[tuple[LogKey, int, float]] = []
        # The log of each 000 of a pilot not seen before: a glidein the schedd accepted (drain_submits()).
        self.submits: list[LogKey] = []

    def __len__(self) -> int:
        return len(self._open)

    def feed(self, events: Iterable[CondorEvent], path: str) -> list[PilotTimes]:
        """Apply events read from ``path``; return the pilots that ended, then any beyond
        ``max_pilots`` (not ended: forgotten unfinished, oldest first)."""
        log = log_of(path)
        entry, client, day = log
        done: list[PilotTimes] = []
        newest = self._newest.get(log)
        ended = self._ended.get(log)
        undated = self._ended.get((entry, client, None)) if day is not None else None
        for e in events:
            if newest is None or e.time > newest:
                newest = e.time
            if e.code in (GRID_RESOURCE_DOWN, GRID_RESOURCE_UP):  # the CE's, not the pilot's
                self.grid_resource.append((log, e.code, e.time))
                continue
            job = _job(e.cluster, e.proc)
            if (ended is not None and job in ended) or (undated is not None and job in undated):
                continue
            key = (entry, client, e.cluster, e.proc)
            item = self._open.get(key)
            p = PilotTimes(e.cluster, e.proc, entry=entry, client=client) if item is None else item[0]
            if e.code == SUBMITTED:
                if p.submitted is None:
                    p.submitted = e.time
                    self.submits.append(log)
            elif e.code == GRID_SUBMITTED:
                p.grid_submitted = e.time
            elif e.code == EXECUTING:
                p.started = e.time
                if p.first_started is None:
                    p.first_started = e.time
            elif e.code == HELD:
                if key not in self._held:  # a second 012 while held adds nothing
                    self.holds_begun.append((log, e))
                    self._held.add(key)
                p.ended, p.end_event, p.held_reason = e.time, "held", e.reason
                if not p.holds or p.holds[-1].released is not None:
                    if len(p.holds) < MAX_HOLDS:
                        p.holds += (HoldInterval(e.time, None, e.reason_code, e.reason_subcode, e.reason),)
                    else:
                        p.holds_dropped += 1
            elif e.code == RELEASED:
                self._held.discard(key)
                if p.end_event == "held":
                    p.ended = p.end_event = None
                if p.holds and p.holds[-1].released is None:  # else it released a hold only counted
                    self.holds_ended.append((log, max(0.0, e.time - p.holds[-1].held)))
                    p.holds = (*p.holds[:-1], p.holds[-1]._replace(released=e.time))
            elif e.code == EVICTED:
                if len(p.evictions) < MAX_EVICTIONS:
                    p.evictions += (e.time,)
                else:
                    p.evictions_dropped += 1
            elif e.code in (TERMINATED, ABORTED):
                if key in self._held:  # removed (or ended) while held: the hold ends here
                    self._held.discard(key)
                    if p.holds and p.holds[-1].released is None:
                        self.holds_ended.append((log, max(0.0, e.time - p.holds[-1].held)))
                p.ended = e.time
                p.end_event = "terminated" if e.code == TERMINATED else "aborted"
                if e.code == TERMINATED:
                    p.return_value = e.return_value
                self._open.pop(key, None)
                if ended is None:
                    ended = self._ended[log] = _Jobs()
                ended.add(job)
                self._n_ended += 1
                if self._n_ended > self.max_pilots:
                    self._trim_ended()
                    ended = self._ended.get(log)
                done.append(p)
                continue
            self._open[key] = (p, e.time, log)
        if newest is not None:
            self._newest[log] = newest
        while len(self._open) > self.max_pilots:
            k, (p, _, _) = self._open.popitem(last=False)
            self._held.discard(k)
            done.append(p)
        return done

    def _trim_ended(self) -> None:
        """Forget ended pilots beyond ``max_pilots``, those of the log whose first pilot ended first."""
        while self._n_ended > self.max_pilots:
            first = next(iter(self._ended))
            jobs = self._ended[first]
            self._n_ended -= jobs.drop(self._n_ended - self.max_pilots)
            if not jobs:
                del self._ended[first]

    def ended_count(self) -> int:
        """The ended pilots remembered."""
        return self._n_ended

    def forget_ended(self, present: Iterable[LogKey]) -> int:
        """Forget the ended pilots of the logs not ``present`` (every file of them deleted or rotated
        away: no stray event can come from them); the number forgotten.

        This is the tighter of the two bounds a counted pilot has (ingest/counted.py's cutoff is the
        other): a pilot ends after the start of its log's day, and that cutoff lies a day before the
        oldest log's day on disk, so it never passes a pilot whose log is present. Undated keys (an old
        checkpoint's) are kept while a log of their entry and client is present.
        """
        keep = set(present)
        pools = {(entry, client) for entry, client, _ in keep}
        gone = [g for g in self._ended if g not in keep and not (g[2] is None and (g[0], g[1]) in pools)]
        n = 0
        for g in gone:
            n += len(self._ended.pop(g))
        self._n_ended -= n
        return n

    def drain(
        self,
    ) -> tuple[list[tuple[LogKey, CondorEvent]], list[tuple[LogKey, float]], list[tuple[LogKey, int, float]]]:
        """Take what the feeds since the last drain saw: (holds begun, seconds of holds ended, 025/026 events)."""
        out = (self.holds_begun, self.holds_ended, self.grid_resource)
        self.holds_begun, self.holds_ended, self.grid_resource = [], [], []
        return out

    def drain_submits(self) -> list[LogKey]:
        """Take the logs of the glideins submitted (their 000) that the feeds since the last call saw."""
        out, self.submits = self.submits, []
        return out

    def held_now(self) -> list[tuple[LogKey, HoldInterval | None, PilotTimes]]:
        """The open pilots held now, each with its newest hold (None: a hold beyond MAX_HOLDS, only counted)."""
        out = []
        for k in self._held:
            p, _, log = self._open[k]
            h = p.holds[-1] if p.holds and p.holds[-1].released is None else None
            out.append((log, h, p))
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON-safe state for the exporter's checkpoint."""
        return {
            "open": [self.open_row(k, v) for k, v in self._open.items()],
            # Per log: [entry, client, day, [cluster, proc, cluster, proc, ...]] (was "ended", a row a pilot).
            "ended_by_log": [self.ended_row(log, jobs) for log, jobs in self._ended.items()],
            "newest": self.newest_rows(),
        }

    def newest_rows(self) -> list[list[Any]]:
        return [[*log, t] for log, t in self._newest.items()]

    # What the checkpoint's journal (ingest/checkpoint.py) needs to write only the rows that changed:
    # the two maps, their rows as to_json writes them, and what tells a row changed. Every event of an
    # open pilot stores a new (pilot, time, log) tuple: its identity (the mark keeps it alive).
    @property
    def open_map(self) -> Mapping[tuple[str | None, str | None, int, int], tuple[PilotTimes, float, LogKey]]:
        return self._open

    @property
    def ended_map(self) -> Mapping[LogKey, _Jobs]:
        return self._ended

    @staticmethod
    def open_row(k: tuple[str | None, str | None, int, int], v: tuple[PilotTimes, float, LogKey]) -> list[Any]:
        p, t, log = v
        return [*k, asdict(p), t, log[2]]

    @staticmethod
    def ended_mark(jobs: _Jobs) -> tuple[int, ...]:
        return jobs.fingerprint()

    @staticmethod
    def ended_row(log: LogKey, jobs: _Jobs) -> list[Any]:
        return [*log, [x for j in jobs for x in (j >> 30, j & _PROC)]]

    @classmethod
    def from_json(cls, data: dict[str, Any], max_pilots: int = 200_000, max_age: float = 30 * 86400) -> PilotTimeline:
        """Inverse of :meth:`to_json`; ``{}`` gives an empty timeline.

        An open pilot saved without its log's day (before logs kept their own time) is put
        in the log of its submit (or newest event's) local day, as the factory names it.
        """
        tl = cls(max_pilots, max_age)
        for row in data.get("open", []):
            entry, client, cluster, proc, p, t = row[:6]
            pilot = PilotTimes(**p)
            day = row[6] if len(row) > 6 else None
            if day is None:
                day = datetime.fromtimestamp(pilot.submitted or float(t)).strftime("%Y%m%d")
            tl._open[(entry, client, int(cluster), int(proc))] = (pilot, float(t), (entry, client, day))
        for entry, client, day, t in data.get("newest", []):
            tl._newest[(entry, client, day)] = float(t)
        ended: dict[LogKey, set[int]] = {}
        for entry, client, cluster, proc in data.get("ended", []):  # a checkpoint before ended_by_log: undated
            ended.setdefault((entry, client, None), set()).add(_job(int(cluster), int(proc)))
        for entry, client, day, flat in data.get("ended_by_log", []):
            jobs = ended.setdefault((entry, client, day), set())
            jobs.update(_job(int(c), int(p)) for c, p in zip(flat[::2], flat[1::2], strict=True))
        tl._ended = {log: _Jobs(jobs) for log, jobs in ended.items()}
        tl._n_ended = sum(len(jobs) for jobs in tl._ended.values())
        tl._trim_ended()
        tl._held = {k for k, (p, _, _) in tl._open.items() if p.end_event == "held"}
        return tl

    def expire(self) -> list[tuple[PilotTimes, LogKey]]:
        """Return (with their log) and forget the pilots silent for ``max_age`` seconds of their own log's time
        (held forever, or whose end fell in a file deleted or rotated away).

        A pilot is silent when its log has gone on for ``max_age`` past the pilot's newest
        event; the wall clock is not asked, so a log read long after it was written (a
        backfill of archived logs, a restore) keeps its open pilots until their end arrives.
        """
        old: list[tuple[str | None, str | None, int, int]] = []
        keep: set[LogKey] = set()
        for k, (_, t, log) in self._open.items():
            if self._newest.get(log, t) - t > self.max_age:
                old.append(k)
            else:
                keep.add(log)
        if len(keep) != len(self._newest):
            # Only the logs with open pilots need their clock (a log's next events are its newest).
            self._newest = {log: t for log, t in self._newest.items() if log in keep}
        self._held.difference_update(old)
        return [(p, log) for p, _, log in (self._open.pop(k) for k in old)]
