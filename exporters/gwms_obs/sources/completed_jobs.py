"""Reader for the factory's ``server/entry_<entry>/completed_jobs_YYYYMMDD.log``.

One line per completed glidein, written by ``MonitoringConfig.logCompleted``
with fixed ``%Ns`` widths (so a variable run of spaces between attributes)::

    <job terminated="2022-02-09T05:55:38-08:00" client="..."  username="..."  id="6767402.000" ...>
    <user jobsnr=".." duration=".." goodput=".." terminated=".."/>
    <wastemill validation=".." idle=".." nosuccess=".." badput=".."/></job>

(all on one line). Python-3 factories write ``id="b'6767402.000'"``.

Speed matters (a busy factory writes millions of lines a month and the
exporter re-reads them after a restart), so a whole buffer first meets ONE
compiled whole-line bytes regex via ``findall`` (no Python per line when
every line matches, the usual case); only in a buffer with other lines is
each line looked at, and only lines the pattern refuses go to a careful
per-line XML parse; only lines that also fail are counted bad.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from .. import native
from ..catalogue import Source
from ..model import CompletedJob
from ..parse_errors import ParseErrors

MAX_LINE = 1 << 20  # a longer line is skipped ("line_too_long"), never buffered forever

_SRC = Source.COMPLETED_JOBS.value

# The exact writer format, as one whole-line pattern. Strings are capped so
# that an absurd line falls to the careful path, which length-checks it.
# Quantifiers are possessive: every one is followed by a byte its class
# cannot match, so backtracking could never help, and not recording the
# backtrack points makes the match ~15% faster.
_BODY = (
    rb'<job ++terminated="([^"\n]{0,64}+)" ++client="([^"\n]{0,512}+)" ++username="([^"\n]{0,512}+)"'
    rb" ++id=\"b?'?(?P<cluster>\d{1,18}+)\.(?P<proc>\d{1,9}+)'?\" ++duration=\"(-?\d{1,18}+)\""
    rb' ++condor_started="(True|False)" ++condor_duration="(-?\d{1,18}+)">'
    rb'<user ++jobsnr="(-?\d{1,18}+)" ++duration="(-?\d{1,18}+)" ++goodput="(-?\d{1,18}+)"'
    rb' ++terminated="(-?\d{1,18}+)"/>'
    rb'<wastemill ++validation="(-?\d{1,18}+)" ++idle="(-?\d{1,18}+)" ++nosuccess="(-?\d{1,18}+)"'
    rb' ++badput="(-?\d{1,18}+)"/></job>'
)
# The same language with only the id captured (16 capture groups cost ~40%
# of the match, and the exporter looks only at the id of most lines).
_BODY_ID = re.sub(rb"\((?!\?)", b"(?:", _BODY)
_FULL = re.compile(_BODY)  # one line the scan accepted -> its 16 fields
# Whole buffer, every line good (the usual case): one findall, no per-line
# Python. Each match is exactly one line (no class crosses a newline), so as
# many matches as newlines means every line matched.
_ALL_SCAN = re.compile(rb"(?m)^(" + _BODY_ID + rb")\r?\n")
# Buffers with some other line: the last alternative eats any other line
# whole; the scan is bounded by the last newline, so every byte belongs to
# exactly one match and a long unterminated tail is never rescanned.
_LINE = re.compile(rb"(" + _BODY_ID + rb")\r?\n|([^\n]*)\n")
_ID = re.compile(r"(?:b')?(\d+)\.(\d+)'?")
_ENTRY_DIR = re.compile(r"entry_(.+)")

# A v3.10.12+ line carries the raw (un-normalized) Total next to a normalized
# condor_duration: user time above condor time is impossible when consistent.
_HALF_NORMALIZED_RATIO = 1.01


def entry_from_path(path: str) -> str | None:
    """``.../server/entry_<entry>/completed_jobs_YYYYMMDD.log`` -> ``<entry>``."""
    m = _ENTRY_DIR.fullmatch(os.path.basename(os.path.dirname(path)))
    return m.group(1) if m else None


# ISO8601-with-offset -> epoch. The lines of one factory loop share a few
# timestamps, so a dict beats re-parsing; it is cleared rather than LRU'd
# because a miss costs only one fromisoformat.
_TIMES: dict[bytes, float] = {}
# Most lines have distinct seconds, so the usual hit is the minute: the epoch
# of "YYYY-MM-DDTHH:MM:00<offset>" keyed by (minute, offset), plus the seconds.
# Exact: within one minute and one fixed offset, seconds add linearly.
_MINUTES: dict[tuple[bytes, bytes], float] = {}
_SECS = {b"%02d" % i: i for i in range(60)}


def _epoch(raw: bytes) -> float:
    if len(raw) == 25 and raw[16] == 0x3A:  # YYYY-MM-DDTHH:MM:SS+HH:MM, the writer's shape
        base = _MINUTES.get((raw[:16], raw[19:]))
        secs = _SECS.get(raw[17:19])
        if base is not None and secs is not None:
            return base + secs
    else:
        secs = None
    dt = datetime.fromisoformat(raw.decode("ascii", "replace"))  # a stray byte: ValueError below, not a decode error
    if dt.tzinfo is None:
        # The writer always adds an offset: a naive time is a foreign line.
        raise ValueError("terminated has no UTC offset")
    t = dt.timestamp()
    if len(_TIMES) >= 4096:
        _TIMES.clear()
    _TIMES[raw] = t
    if secs is not None:
        if len(_MINUTES) >= 4096:
            _MINUTES.clear()
        _MINUTES[raw[:16], raw[19:]] = t - secs
    return t


def _careful(line: bytes, entry: str | None) -> CompletedJob | str:
    """Parse one line the regex refused; return the record or a reason word."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "bad_encoding"
    try:
        root: Element = fromstring(text.strip())
    except (ParseError, DefusedXmlException, ValueError):
        return "bad_line"
    if root.tag != "job":
        return "bad_line"
    user = root.find("user")
    waste = root.find("wastemill")
    if user is None or waste is None:
        return "bad_line"
    a, u, w = root.attrib, user.attrib, waste.attrib
    try:
        m = _ID.fullmatch(a["id"].strip())
        if m is None:
            return "bad_line"
        terminated = datetime.fromisoformat(a["terminated"].strip())
        if terminated.tzinfo is None:
            return "bad_line"
        started = a["condor_started"].strip()
        if started not in ("True", "False"):
            return "bad_line"

        def num(d: dict[str, str], k: str) -> int:
            # "%i" always writes ints; accept "12.0" from hand-made files.
            return int(float(d[k]))

        job = CompletedJob(
            terminated.timestamp(),
            a["client"],
            a["username"],
            int(m.group(1)),
            int(m.group(2)),
            num(a, "duration"),
            started == "True",
            num(a, "condor_duration"),
            num(u, "jobsnr"),
            num(u, "duration"),
            num(u, "goodput"),
            num(u, "terminated"),
            num(w, "validation"),
            num(w, "idle"),
            num(w, "nosuccess"),
            num(w, "badput"),
        )
    except (KeyError, ValueError, OverflowError):
        return "bad_line"
    job.half_normalized = job.condor_duration > 0 and job.user_duration > job.condor_duration * _HALF_NORMALIZED_RATIO
    job.entry = entry
    return job


# A line the fast pattern matched: (the line without its newline, cluster,
# proc) as bytes, converted only when needed (most lines belong to pilots
# already counted from their .out, and then only the id is looked at).
RawLine = tuple[bytes, bytes, bytes]


def _lines(buf: bytes, end: int) -> int:
    return buf.count(b"\n", 0, end)


def scan_buffer(
    buf: bytes, path: str, base_offset: int, errors: ParseErrors, entry: str | None = None
) -> tuple[list[RawLine | CompletedJob], int]:
    """Split ``buf`` (which starts at file byte ``base_offset``) into lines, lazily.

    Lines the whole-line pattern matched come back as :data:`RawLine`; the
    others have already been through the careful path and come back as
    records (or were counted as bad). Returns them and the bytes consumed: an
    unterminated last line is left for the next call, unless it is already
    longer than ``MAX_LINE`` (then it is consumed and counted as
    ``line_too_long``; its tail, read later, is counted once more as a bad
    line — the price of a stateless reader). ``entry`` defaults to the one in
    ``path``.
    """
    end = buf.rfind(b"\n") + 1
    if len(buf) - end <= MAX_LINE:
        found: list[RawLine] = _ALL_SCAN.findall(buf, 0, end)
        if len(found) == _lines(buf, end):
            return found, end  # type: ignore[return-value]  # list is invariant; RawLine is in the union
    if entry is None:
        entry = entry_from_path(path)
    out: list[RawLine | CompletedJob] = []
    append = out.append
    for m in _LINE.finditer(buf, 0, end):
        line, cluster, proc, other = m.groups()
        if other is None:
            append((line, cluster, proc))
            continue
        if len(other) > MAX_LINE:
            errors.record(_SRC, "line_too_long", path, base_offset + m.start(), f"{len(other)} bytes")
            continue
        if not other.strip():
            continue  # blank lines carry nothing; not worth a counter
        rec = _careful(other, entry)
        if isinstance(rec, str):
            errors.record(_SRC, rec, path, base_offset + m.start(), other[:200].decode("utf-8", "replace"))
        else:
            append(rec)
    if len(buf) - end > MAX_LINE:
        errors.record(_SRC, "line_too_long", path, base_offset + end, f"> {MAX_LINE} bytes, unterminated")
        end = len(buf)
    return out, end


def scan_unseen(buf: bytes, entry: str, seen: dict[str, float]) -> tuple[int, int, list[tuple[str, RawLine]]] | None:
    """The exporter's path over ``buf`` in compiled code, or None (then use :func:`scan_buffer`).

    Only a buffer whose every line :data:`_ALL_SCAN` matches is taken (the
    usual one); returns (bytes consumed, lines, and ``(key, line)`` for each
    line whose :func:`line_keys` key is not in ``seen``), the same as
    ``scan_buffer`` + ``line_keys`` + the ``seen`` filter, without a Python
    object for the lines of pilots already counted. None when the compiled
    module is absent or the buffer holds any other line (or nothing but an
    unterminated line): the Python path reads it, counts its errors.
    """
    core = native.core
    if core is None:
        return None
    got: tuple[int, int, list[tuple[str, RawLine]]] | None = core.scan_unseen(buf, entry, seen, MAX_LINE)
    return got


def line_id(rec: RawLine | CompletedJob) -> tuple[int, int]:
    """(cluster, proc) of a line, without converting the rest."""
    if isinstance(rec, CompletedJob):
        return rec.cluster, rec.proc
    return int(rec[1]), int(rec[2])


def line_keys(lines: list[RawLine | CompletedJob], entry: str) -> list[str]:
    """``entry/cluster.proc`` of each line: the pipeline's key for "already counted"."""
    prefix = entry + "/"
    try:
        # The usual batch is all RawLine: one comprehension, no per-line call.
        return [f"{prefix}{int(r[1])}.{int(r[2])}" for r in lines]  # type: ignore[index]
    except TypeError:  # a CompletedJob from the careful path is not subscriptable
        return [f"{prefix}{c}.{p}" for c, p in map(line_id, lines)]


_strs: dict[bytes, str] = {}  # client/username repeat on nearly every line


def _str(b: bytes) -> str:
    s = _strs.get(b)
    if s is None:
        if len(_strs) > 4096:
            _strs.clear()
        s = _strs[b] = b.decode("utf-8", "replace")  # pilot-adjacent text: any byte, never an exception
    return s


def _convert(g: tuple[bytes, ...], entry: str | None) -> CompletedJob | str:
    """A record from the 16 fields of :data:`_FULL`, or a reason word."""
    term, cl, us, c, p, dur, cs, cdur, jn, ud, gp, ut, wv, wi, wn, wb = g
    t = _TIMES.get(term)
    if t is None:
        try:
            t = _epoch(term)
        except ValueError:
            # An odd timestamp: the careful path decides, on the rebuilt line.
            return "bad_line"
    udur = int(ud)
    cdur_i = int(cdur)
    return CompletedJob(
        t,
        _strs.get(cl) or _str(cl),
        _strs.get(us) or _str(us),
        int(c),
        int(p),
        int(dur),
        cs == b"True",
        cdur_i,
        int(jn),
        udur,
        int(gp),
        int(ut),
        int(wv),
        int(wi),
        int(wn),
        int(wb),
        cdur_i > 0 and udur > cdur_i * _HALF_NORMALIZED_RATIO,
        entry,
    )


def to_record(rec: RawLine | CompletedJob, entry: str | None) -> CompletedJob | str:
    """The full record of a line, or a reason word when it does not convert."""
    if isinstance(rec, CompletedJob):
        return rec
    m = _FULL.fullmatch(rec[0])
    if m is None:  # cannot happen for a line the scan accepted: same language
        return "bad_line"
    return _convert(m.groups(), entry)  # all 16 groups always participate
