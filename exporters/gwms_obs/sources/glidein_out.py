"""Reader of a glidein's stdout, ``job.<C>.<P>.out`` (formats doc §1.3, §2.2-2.4).

The file is written by a worker node, so it is hostile input: any byte
sequence must parse without raising. Bad pieces are skipped and recorded in
:class:`ParseErrors`; the rest of the file still counts.

For speed everything works on bytes: each marker is located with
``bytes.find`` (memmem), and a small compiled regex is matched on that one
line only. Lines longer than :data:`MAX_LINE` are never handed to a regex,
so a hostile 50 MB line costs one linear scan. Markers are searched in the
order GlideinWMS writes them, each after the previous one, as the factory's
``_extract_log_data`` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from xml.etree.ElementTree import Element, ParseError, XMLParser

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring as defused_fromstring

from .. import native
from ..catalogue import Source
from ..model import GlideinOut, SlotStat, StatsFormat
from ..parse_errors import ParseErrors
from . import files
from .budget import REASON as BUDGET
from .budget import Budget, BudgetExceeded

MAX_LINE = 64 << 10  # longer lines are never parsed
MAX_XML = 1 << 20  # the stdout XML is ~2 KB
MAX_METRICS = 1000
MAX_VALUE = 4096  # metric and header values are cut to this
MAX_DIGITS = 18  # int() of longer digit runs is slow (and > 4300 raises)
MAX_STATS_BLOCKS = 64
STATS_TAIL = 64 << 10  # the count lines close the block; per-job lines precede them
TAIL_BYTES = 8 << 20  # read_out keeps this much of the end of a too-large file
KNOWN_SLOT_STATS = frozenset({"Total", "goodZ", "goodNZ", "badSignal", "badOther"})

_HEADER_KEYS = {
    b"condorg_cluster": "cluster",
    b"condorg_subcluster": "proc",
    b"condorg_schedd": "schedd",
    b"glidein_uuid": "uuid",
    b"glidein_factory": "factory",
    b"glidein_name": "glidein_name",
    b"glidein_entry": "entry",
    b"client_name": "client",
    b"client_group": "client_group",
}

_HEADER = re.compile(rb"(\w+)[ \t]*= '([^'\n]*)'[ \t\r]*$", re.M)
# Each is matched at a marker's offset, on that one line. The "(epoch)" is
# optional because the factory's own regexes do not need it.
_STARTUP = re.compile(rb"Starting glidein_startup\.sh at .*?\((\d+)\)")
_VALIDATE_END = re.compile(rb"=== Last script starting (?:.*?\((\d+)\))?.*? after validating for (\d+) ===")
_CONDOR_START = re.compile(rb"=== Condor starting (?:.*?\((\d+)\))?.*?===")
_CONDOR_END = re.compile(rb"=== Condor ended (?:.*?\((\d+)\))?.*? after (\d+) ===")
_STATS_HEAD = re.compile(rb"=== Stats of (\S+) ===")
_ACTIVATIONS = re.compile(rb"Total number of activations/claims: (\d+)")
_GLIDEIN_END = re.compile(rb"=== Glidein ending (?:.*?\((\d+)\))?.*? with code (\d+) after (\d+) ===")
_CPUS = re.compile(rb"Setting GLIDEIN_CPUS=(\d+)")
_MEMORY = re.compile(rb"Setting GLIDEIN_MaxMemMBs=(\d+)")
_COUNT = re.compile(rb"^(?:\((Real|Normalized)\) )?Total(?: (\w+))? jobs (\d+) [^\n]*?utilization (\d+)", re.M)
_NORMALIZATION = re.compile(rb"^Normalization \[parallelism\] factor (\d+)", re.M)
# Fallback for a description that is not well-formed (values are not escaped
# by the shell scripts that write them, so a "&" in a URL breaks the XML).
_RX_STATUS = re.compile(rb"<status>\s*([^<\s]{1,100})\s*</status>")
_RX_METRIC = re.compile(rb'<metric name="([^"<>]{1,200})"[^>\n]{0,500}>([^<\n]{0,4096})</metric>')

XML_BEGIN = b"=== XML description of glidein activity ==="
XML_END = b"=== End XML description of glidein activity ==="

_XML_ERRORS = (ParseError, ValueError, LookupError, UnicodeError)


class Scanner:
    """Marker search on one file's bytes, recording what it must skip."""

    __slots__ = ("data", "errors", "path", "source", "truncated")

    def __init__(self, data: bytes, path: str, errors: ParseErrors, source: str) -> None:
        self.data = data
        self.path = path
        self.errors = errors
        self.source = source
        self.truncated = False  # one "truncated" per file is enough

    def record(self, reason: str, offset: int | None, detail: str = "") -> None:
        if reason == "truncated":
            if self.truncated:
                return
            self.truncated = True
        self.errors.record(self.source, reason, self.path, offset, detail)

    def lines(self, marker: bytes, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, bytes]]:
        """(offset, text from the marker to the end of its line) for each occurrence.

        An over-long line is recorded and skipped as a whole, so that a line
        full of markers costs one scan, not one per marker.
        """
        data = self.data
        stop = len(data) if stop is None else stop
        pos = start
        while pos < stop:
            i = data.find(marker, pos, stop)
            if i < 0:
                return
            eol = data.find(b"\n", i, min(i + MAX_LINE, stop))
            if eol < 0:
                if stop - i <= MAX_LINE:
                    eol = stop
                else:
                    eol = data.find(b"\n", i, stop)
                    eol = stop if eol < 0 else eol
                    self.record("line_too_long", i, f"{eol - i} bytes")
                    pos = eol + 1
                    continue
            yield i, data[i:eol]
            pos = eol + 1

    def match_at(self, rx: re.Pattern[bytes], marker: bytes, start: int = 0) -> tuple[int, re.Match[bytes]] | None:
        """Like :meth:`match`, with the file offset just past the match."""
        for off, line in self.lines(marker, start):
            m = rx.match(line)
            if m is not None:
                return off + m.end(), m
        return None

    def num(self, raw: bytes | None, offset: int) -> int | None:
        """A digit run as int; too many digits is recorded as bad_number."""
        if raw is None:
            return None
        if len(raw) > MAX_DIGITS:
            self.record("bad_number", offset, raw[:40].decode("ascii", "replace"))
            return None
        return int(raw)

    def check_long_lines(self) -> None:
        """Record every line longer than MAX_LINE (memrchr jumps, ~len/MAX_LINE steps)."""
        data = self.data
        n = len(data)
        pos = 0
        while n - pos > MAX_LINE:
            nl = data.rfind(b"\n", pos, pos + MAX_LINE + 1)
            if nl >= 0:
                pos = nl + 1
                continue
            end = data.find(b"\n", pos + MAX_LINE)
            end = n if end < 0 else end
            self.record("line_too_long", pos, f"{end - pos} bytes")
            pos = end + 1


def iso_epoch(text: str | None) -> float | None:
    """ISO8601 with an offset (``date +%Y-%m-%dT%H:%M:%S%:z``) → epoch; else None."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if dt.tzinfo is None:  # local time of an unknown node: not an instant
        return None
    return dt.timestamp()


def hostile_xml(xml: bytes) -> bool:
    """A DTD, an entity declaration or a NUL: refused, not even salvaged."""
    return b"<!DOCTYPE" in xml or b"<!ENTITY" in xml or b"\0" in xml


def parse_xml(sc: Scanner, xml: bytes, offset: int) -> Element | None:
    """Parse untrusted XML; DTDs and entity declarations are refused by defusedxml.

    defusedxml runs the pure-Python ElementTree parser, ~5x slower than the C
    one (1.2 ms for a 20-script long XML), so only documents that could carry
    a declaration (any ``<!``) or another encoding (a NUL byte: UTF-16/32)
    go to it. The rest cannot define an entity and take the C parser.
    """
    if b"<!" in xml or b"\0" in xml:
        try:
            root: Element = defused_fromstring(xml, forbid_dtd=True)
        except DefusedXmlException as e:
            sc.record("xml_forbidden", offset, f"{type(e).__name__}: {e}")
            return None
        except (*_XML_ERRORS, UnicodeError) as e:
            sc.record("bad_xml", offset, str(e))
            return None
        return root
    try:
        parser = XMLParser(encoding="utf-8")
        parser.feed(xml)
        root = parser.close()
    except _XML_ERRORS as e:
        sc.record("bad_xml", offset, str(e))
        return None
    return root


def text_of(el: Element | None) -> str | None:
    if el is None or el.text is None:
        return None
    return el.text.strip()[:MAX_VALUE]


def element_metrics(el: Element) -> dict[str, str]:
    """``<metric name=..>`` values under ``el``, first one of each name kept."""
    out: dict[str, str] = {}
    for m in el.iter("metric"):
        name = m.get("name")
        if name and name not in out:
            out[name[:200]] = (m.text or "").strip()[:MAX_VALUE]
            if len(out) >= MAX_METRICS:
                break
    return out


def regex_metrics(xml: bytes) -> tuple[str | None, dict[str, str]]:
    """(status, metrics) salvaged from XML that does not parse."""
    st = _RX_STATUS.search(xml)
    status = st.group(1).decode("utf-8", "replace") if st else None
    out: dict[str, str] = {}
    for m in _RX_METRIC.finditer(xml):
        name = m.group(1).decode("utf-8", "replace")
        if name not in out:
            out[name] = m.group(2).decode("utf-8", "replace").strip()
            if len(out) >= MAX_METRICS:
                break
    return status, out


def _header(sc: Scanner, out: GlideinOut) -> int:
    """Header ``key = 'value'`` lines; returns where the header ends."""
    data = sc.data
    start = 0
    for off, line in sc.lines(b"Starting glidein_startup.sh at ", 0, min(len(data), MAX_LINE)):
        m = _STARTUP.match(line)
        if m:
            out.startup_time = _epoch(sc.num(m.group(1), off))
        start = off
        break
    # The header block ends at the first blank line; bounded for garbage files.
    end = data.find(b"\n\n", start, start + MAX_LINE)
    end = min(len(data), start + MAX_LINE) if end < 0 else end
    region = b"\n" + data[start:end]
    for key, attr in _HEADER_KEYS.items():
        i = region.find(b"\n" + key)  # first occurrence wins
        m = _HEADER.match(region, i + 1) if i >= 0 else None
        if m is None or m.group(1) != key:
            continue
        off = start + m.start(2) - 1
        raw = m.group(2)[:MAX_VALUE]
        if attr in ("cluster", "proc"):
            if raw.isdigit():
                setattr(out, attr, sc.num(raw, off))
            elif raw:
                sc.record("bad_number", off, raw[:40].decode("utf-8", "replace"))
        else:
            setattr(out, attr, raw.decode("utf-8", "replace"))
    return end


def _epoch(v: int | None) -> float | None:
    return None if v is None else float(v)


def _stats(sc: Scanner, out: GlideinOut, start: int, budget: Budget) -> int:
    """Every ``=== Stats of <slot> ===`` block after ``start``; returns the end."""
    data = sc.data
    pos = start
    seen_block = False
    real = False
    counted = False
    for _ in range(MAX_STATS_BLOCKS):
        hit = sc.match_at(_STATS_HEAD, b"=== Stats of ", pos)
        if hit is None:
            break
        budget.cpu()
        hdr_end, m = hit
        slot = m.group(1)
        body = data.find(b"\n", hdr_end)
        body = len(data) if body < 0 else body
        close = data.find(b"=== End Stats of ", body)
        if close < 0:
            sc.record("truncated", hdr_end, "Stats block without its end")
            return len(data)
        pos = close + 17
        if slot.endswith(b"1"):  # legacy monitoring slot, ignored as the factory does
            continue
        seen_block = True
        # Per-job lines come first and can be many; the counts are at the end.
        tail_start = max(body, close - STATS_TAIL)
        for c in _COUNT.finditer(data, tail_start, close):
            kind, name_b, jobs_b, secs_b = c.groups()
            jobsnr = sc.num(jobs_b, c.start(3))
            secs = sc.num(secs_b, c.start(4))
            if jobsnr is None or secs is None:
                continue
            name = "Total" if name_b is None else name_b.decode("ascii", "replace")
            if name not in KNOWN_SLOT_STATS:
                continue
            counted = True
            if kind == b"Real":
                real = True
                if name == "Total" and out.stats_real_total is None:
                    out.stats_real_total = SlotStat(jobsnr, secs)
                continue
            if kind == b"Normalized":
                real = True
            if name not in out.stats:
                out.stats[name] = SlotStat(jobsnr, secs)
        if out.normalization is None:
            n = _NORMALIZATION.search(data, tail_start, close)
            if n:
                out.normalization = sc.num(n.group(1), n.start(1))
    if real:
        out.stats_format = StatsFormat.REAL
    elif counted:
        out.stats_format = StatsFormat.LEGACY
    elif seen_block:
        out.stats_format = StatsFormat.EMPTY
    return pos


def _xml(sc: Scanner, out: GlideinOut, start: int) -> None:
    data = sc.data
    begin = data.find(XML_BEGIN, start)
    if begin < 0:
        return
    body = begin + len(XML_BEGIN)
    end = data.find(XML_END, body, body + MAX_XML + len(XML_END))
    if end < 0:
        if data.find(XML_END, body) >= 0:
            sc.record("too_large", body, "XML description")
        else:
            sc.record("truncated", body, "XML description without its end")
        return
    xml = data[body:end].strip()
    root = parse_xml(sc, xml, body)
    if root is not None:
        out.status = text_of(root.find(".//status"))
        out.metrics = element_metrics(root)
    elif not hostile_xml(xml):
        out.status, out.metrics = regex_metrics(xml)
    out.failure = out.metrics.get("failure")
    if out.failure is not None or out.status == "ERROR":  # only a failure has a detail worth keeping
        out.detail = _regex_detail(xml)


_RX_DETAIL = re.compile(rb"<detail>([^<]{0,%d})" % MAX_VALUE)


def _regex_detail(xml: bytes) -> str | None:
    d = _RX_DETAIL.search(xml)
    return d.group(1).decode("utf-8", "replace").strip() or None if d else None


def _failure_detail(data: bytes) -> str | None:
    """The ``<detail>`` of a failed pilot's XML, for the compiled reader's result (which has no
    field for it: only failed pilots have one, so it is looked for in Python, for them alone)."""
    begin = data.find(XML_BEGIN)
    if begin < 0:
        return None
    body = begin + len(XML_BEGIN)
    end = data.find(XML_END, body, body + MAX_XML + len(XML_END))
    return _regex_detail(data[body:end]) if end >= 0 else None


def parse_out(data: bytes, path: str, errors: ParseErrors, *, budget: Budget | None = None) -> GlideinOut:
    """Everything the stdout tells; never raises on any input.

    ``budget`` (a fresh :class:`Budget` when None) is checked for CPU time
    between the phases; when it runs out, parsing stops, reason ``budget`` is
    recorded, ``budget.exceeded`` is set and the fields found so far are
    returned (incomplete: :func:`read_out` does not use them).
    """
    if not data:
        return GlideinOut(path=path)
    budget = Budget() if budget is None else budget
    if native.core is not None and budget.allows():
        fields = native.core.parse_out(data)
        if fields is not None:
            got = _from_native(path, fields)
            if got.failure is not None or got.status == "ERROR":
                got.detail = _failure_detail(data)
            return got
    out = GlideinOut(path=path)
    sc = Scanner(data, path, errors, Source.GLIDEIN_OUT.value)
    try:
        _parse(sc, out, budget)
    except BudgetExceeded as e:
        sc.record(BUDGET, None, str(e))
    return out


_FORMATS = (StatsFormat.ABSENT, StatsFormat.EMPTY, StatsFormat.LEGACY, StatsFormat.REAL)


def _from_native(path: str, t: tuple[Any, ...]) -> GlideinOut:
    """A GlideinOut from the fields gwms_obs_native.parse_out found (in native/src/lib.rs's order)."""
    (cluster, proc, schedd, uuid, factory, glidein_name, entry, client, client_group) = t[:9]
    (startup, val_end, val_dur, started, c_start, c_end, c_dur, g_end, g_dur, exit_code, claims) = t[9:20]
    fmt, stats, real_total, normalization, cpus, memory_mb, metrics, status = t[20:]
    return GlideinOut(
        path=path,
        cluster=cluster,
        proc=proc,
        schedd=schedd,
        uuid=uuid,
        factory=factory,
        glidein_name=glidein_name,
        entry=entry,
        client=client,
        client_group=client_group,
        startup_time=startup,
        validation_end=val_end,
        validation_duration=val_dur,
        condor_started=started,
        condor_start=c_start,
        condor_end=c_end,
        condor_duration=c_dur,
        glidein_end=g_end,
        glidein_duration=g_dur,
        exit_code=exit_code,
        activations_claims=claims,
        stats_format=_FORMATS[fmt],
        stats={name: SlotStat(jobs, secs) for name, jobs, secs in stats},
        stats_real_total=None if real_total is None else SlotStat(*real_total),
        normalization=normalization,
        cpus=cpus,
        memory_mb=memory_mb,
        metrics=metrics,
        status=status,
        failure=metrics.get("failure"),
    )


def _parse(sc: Scanner, out: GlideinOut, budget: Budget) -> None:
    data = sc.data
    budget.cpu()  # a shared budget may be spent already
    if len(data) > MAX_LINE:
        sc.check_long_lines()
    _header(sc, out)

    # Set during validation, before the markers below: searched from the top.
    hit = sc.match_at(_CPUS, b"Setting GLIDEIN_CPUS=")
    if hit:
        out.cpus = sc.num(hit[1].group(1), hit[0])
    hit = sc.match_at(_MEMORY, b"Setting GLIDEIN_MaxMemMBs=")
    if hit:
        out.memory_mb = sc.num(hit[1].group(1), hit[0])

    pos = 0
    hit = sc.match_at(_VALIDATE_END, b"=== Last script starting ")
    if hit:
        pos, m = hit
        out.validation_end = _epoch(sc.num(m.group(1), pos))
        out.validation_duration = sc.num(m.group(2), pos)
    hit = sc.match_at(_CONDOR_START, b"=== Condor starting ", pos)
    if hit:
        pos, m = hit
        out.condor_started = True
        out.condor_start = _epoch(sc.num(m.group(1), pos))
        hit = sc.match_at(_CONDOR_END, b"=== Condor ended ", pos)
        if hit:
            pos, m = hit
            out.condor_end = _epoch(sc.num(m.group(1), pos))
            out.condor_duration = sc.num(m.group(2), pos)
    budget.cpu()
    pos = _stats(sc, out, pos, budget)
    hit = sc.match_at(_ACTIVATIONS, b"Total number of activations/claims: ", pos)
    if hit:
        pos, m = hit
        out.activations_claims = sc.num(m.group(1), pos)
    hit = sc.match_at(_GLIDEIN_END, b"=== Glidein ending ", pos)
    if hit:
        pos, m = hit
        out.glidein_end = _epoch(sc.num(m.group(1), pos))
        out.exit_code = sc.num(m.group(2), pos)
        out.glidein_duration = sc.num(m.group(3), pos)
    budget.cpu()
    _xml(sc, out, pos)

    if out.startup_time is None and out.glidein_end is None and out.cluster is None and not out.condor_started:
        sc.record("garbage", 0, "no glidein_startup.sh marker")
    elif not data.endswith(b"\n"):
        sc.record("truncated", len(data), "last line incomplete")


def read_out(
    path: str,
    errors: ParseErrors,
    max_bytes: int = 64 << 20,
    *,
    root: str | None = None,
    budget: Budget | None = None,
) -> GlideinOut | None:
    """Read and parse one .out; None (and a recorded error) when unreadable.

    A file over ``max_bytes`` is recorded as too_large and only its head and
    its last :data:`TAIL_BYTES` are parsed: the header and validation lines
    are at the top, the condor/stats/XML tail at the bottom. Only a regular
    file is read (inside ``root``, when given; see :mod:`gwms_obs.sources.files`),
    and only up to the size it had when opened.

    None too when ``budget`` (see :func:`parse_out`) ran out: a .out parsed
    only in part would be accounted wrongly (a pilot whose end was not reached
    looks as if HTCondor never ran), so it is not used at all.
    """
    data = files.fast_read(path, root, max_bytes)  # the common case: one compiled call
    if data is not None:
        budget = Budget() if budget is None else budget
        out = parse_out(data, path, errors, budget=budget)
        return None if budget.exceeded is not None else out
    src = Source.GLIDEIN_OUT.value
    f = files.open_or_record(path, errors, src, root=root)
    if f is None:
        return None
    try:
        with f:
            size = f.size
            if size <= max_bytes:
                data = f.read()
            else:
                tail = min(TAIL_BYTES, max_bytes // 2)
                head = f.read(max_bytes - tail)
                f.seek(size - tail)
                data = head + b"\n" + f.read(tail)
                errors.record(src, "too_large", path, len(head), f"{size} bytes, middle skipped")
    except OSError as e:
        errors.record(src, "unreadable", path, None, files.describe(e))
        return None
    budget = Budget() if budget is None else budget
    out = parse_out(data, path, errors, budget=budget)
    return None if budget.exceeded is not None else out
