"""Reader of a glidein's stderr, ``job.<C>.<P>.err`` (formats doc §2.4-2.6).

Hostile input, as for the .out: nothing raises; every framed section,
the GPU line, the glidein_config dump and the encoded long XML are read
independently, so one bad piece never hides the others.
"""

from __future__ import annotations

import re
from operator import methodcaller
from xml.etree.ElementTree import Element

from .. import native
from ..catalogue import Source
from ..model import GlideinErr, Job, ScriptTiming
from ..parse_errors import ParseErrors
from ..tracing import conventions as C
from . import classad, condor_sections, files
from .budget import REASON as BUDGET
from .budget import Budget, BudgetExceeded
from .glidein_out import (
    MAX_LINE,
    Scanner,
    hostile_xml,
    iso_epoch,
    parse_xml,
    text_of,
)

HISTORY_SECTION = "StartdHistoryLog"
MAX_LONG_XML = 8 << 20
MAX_CONFIG = 4 << 20  # a glidein_config is ~50 KB
MAX_SCRIPTS = 10_000
MAX_GPU_LINES = 100

CONFIG_BEGIN = b"-------- glidein_config in condor_startup.sh ----------"
XML_BEGIN = b"=== Encoded XML description of glidein activity ==="
XML_END = b"=== End encoded XML description of glidein activity ==="

_GPUS = re.compile(rb"[^\n]*?condor_gpu_discovery\)? found (\d+) GPUs")
_NO_GPUS = b"No GPUs found with condor_gpu_discovery"
_DASHES = re.compile(rb"-+\r?(?=\n|\Z)")
# "KEY rest-of-line", like gconfig_get's `cut -d ' ' -f 2-`.
_SPLIT1 = methodcaller("split", " ", 1)
# Fallback for a long XML that is not well-formed: one chunk per script.
_RX_SUB = re.compile(rb"<OSGTestResult\s[^>]*?id=\"([^\"]{0,500})\"[^>]*>(.*?)</OSGTestResult>", re.S)
_RX_TSTART = re.compile(rb"<tStart>([^<]{0,64})</tStart>")
_RX_TEND = re.compile(rb"<tEnd>([^<]{0,64})</tEnd>")
_RX_STATUS = re.compile(rb"<status>\s*([^<\s]{1,100})\s*</status>")
_RX_FAILURE = re.compile(rb'<metric name="failure"[^>\n]{0,500}>([^<\n]{0,4096})</metric>')


def _int(v: classad.Value) -> int | None:
    """An integral literal (bool excluded); finite reals are truncated."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)  # parse_value only returns finite floats
    return None


# The attributes a Job is made of (the compiled reader, native/src/err.rs, reads the same list).
JOB_ATTRS = (
    "JobCurrentStartDate",
    "JobStartDate",
    "JobStatus",
    "CompletionDate",
    "LastVacateTime",
    "EnteredCurrentStatus",
    "ExitCode",
    "ExitBySignal",
    "ExitSignal",
    "GlobalJobId",
    "CpusProvisioned",
    "RequestCpus",
    "MemoryProvisioned",
    "RequestMemory",
    "GPUsProvisioned",
    "RequestGPUs",
    "MemoryUsage",
    "ProportionalSetSizeKb",
    "ResidentSetSize",
    "RemoteUserCpu",
    "RemoteSysCpu",
)
_JOB_ATTRS = classad.names_pattern(JOB_ATTRS)

# What no job can have used anywhere (a PiB of memory, a century of CPU): a value over
# these is refused here; the entry's own bounds come later (accounting/plausible.py).
MAX_USAGE_MB = 1 << 30
MAX_CPU_SECONDS = 100 * 365 * 86400.0


def _value(raw: bytes) -> classad.Value:
    return classad.parse_value(raw.decode("utf-8", "replace"))


def _digit_run(raw: bytes) -> int | None:
    """A plain digit run as int, skipping the decode and the classad regexes (most values); else None."""
    return int(raw) if raw.isdigit() and len(raw) <= 19 else None  # what classad's _INT accepts, unsigned


def _iv(raw: bytes | None) -> int | None:
    """``_int(parse_value(raw))``, digit runs first."""
    if raw is None:
        return None
    v = _digit_run(raw)
    return v if v is not None else _int(_value(raw))


def _amount(
    ad: dict[bytes, bytes], name: bytes, cap: float, problems: list[str], expr_ok: bool = False
) -> float | None:
    """A usage value in [0, cap]; None when absent, undefined, or bad (then a line in ``problems``).

    ``expr_ok``: an expression is HTCondor's own (MemoryUsage is one in many ads), not an error.
    """
    raw = ad.get(name)
    if raw is None:
        return None
    v: classad.Value = _digit_run(raw)
    if v is None and raw[-2:] == b".0":  # how HTCondor writes CPU times
        v = _digit_run(raw[:-2])
    if v is None:
        v = _value(raw)
        if v is None or (expr_ok and isinstance(v, classad.Expr)):
            return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= cap:
        problems.append(f"{name.decode()} = {raw[:40].decode('utf-8', 'replace')}")
        return None
    return float(v)


def _usage(ad: dict[bytes, bytes], problems: list[str]) -> tuple[int | None, float | None]:
    """(peak memory MiB, user + system CPU seconds) of one ad; None where unknown.

    Memory: ``MemoryUsage`` when it is a number, else what the glidein's
    MEMORY_USAGE_METRIC computes, ``((ProportionalSetSizeKb ?: ResidentSetSize) + 1023) / 1024``.
    CPU: ``RemoteUserCpu + RemoteSysCpu``; None when either is bad (a part is not the whole).
    """
    mem = _amount(ad, b"MemoryUsage", MAX_USAGE_MB, problems, expr_ok=True)
    if mem is None:
        kib = _amount(ad, b"ProportionalSetSizeKb", MAX_USAGE_MB * 1024.0, problems)
        if kib is None:
            kib = _amount(ad, b"ResidentSetSize", MAX_USAGE_MB * 1024.0, problems)
        mem = None if kib is None else (kib + 1023) // 1024
    n = len(problems)
    user = _amount(ad, b"RemoteUserCpu", MAX_CPU_SECONDS, problems)
    sys_ = _amount(ad, b"RemoteSysCpu", MAX_CPU_SECONDS, problems)
    cpu = None if len(problems) > n or (user is None and sys_ is None) else (user or 0.0) + (sys_ or 0.0)
    return (None if mem is None else int(mem)), cpu


def _first_int(ad: dict[bytes, bytes], names: tuple[bytes, ...], minimum: int) -> int | None:
    for name in names:
        v = _iv(ad.get(name))
        if v is not None and v >= minimum:
            return v
    return None


def _job(ad: dict[bytes, bytes], problems: list[str]) -> Job | None:
    """A :class:`Job` from one ad's raw picked values; None when it has no start.

    A usage value that is not a number is left out of the job and described in ``problems``.
    """
    start = _first_int(ad, (b"JobCurrentStartDate", b"JobStartDate"), 1)
    if start is None:
        return None
    memory_usage, cpu_seconds = _usage(ad, problems)
    status = _iv(ad.get(b"JobStatus"))
    end = _first_int(ad, (b"CompletionDate", b"LastVacateTime"), 1)
    if end is None and status in (3, 4):
        end = _first_int(ad, (b"EnteredCurrentStatus",), 1)
    exit_code = _iv(ad.get(b"ExitCode"))
    raw = ad.get(b"ExitBySignal")
    # ClassAd booleans are case-insensitive literals; anything else is not "true".
    by_signal = raw is not None and raw.strip().lower() == b"true"
    raw = ad.get(b"GlobalJobId")
    if raw is not None and len(raw) > 1 and raw[:1] == raw[-1:] == b'"' and b"\\" not in raw:
        gid: classad.Value = raw[1:-1].decode("utf-8", "replace")  # a plain quoted string: no escapes to undo
    else:
        gid = None if raw is None else _value(raw)
    return Job(
        start=float(start),
        end=None if end is None else float(end),
        cpus=_first_int(ad, (b"CpusProvisioned", b"RequestCpus"), 1) or 1,
        memory_mb=_first_int(ad, (b"MemoryProvisioned", b"RequestMemory"), 0) or 0,
        gpus=_first_int(ad, (b"GPUsProvisioned", b"RequestGPUs"), 0) or 0,
        exited=(exit_code is not None or by_signal) and end is not None,
        exit_code=exit_code,
        exit_by_signal=by_signal,
        exit_signal=_iv(ad.get(b"ExitSignal")),
        job_status=status,
        global_job_id=gid if isinstance(gid, str) and not isinstance(gid, classad.Expr) else None,
        memory_usage_mb=memory_usage,
        cpu_seconds=cpu_seconds,
    )


def parse_history(sc: Scanner, text: bytes, offset: int, *, budget: Budget | None = None) -> list[Job]:
    """Jobs of a decoded StartdHistoryLog; ads without a start are recorded.

    Each ad is charged to ``budget`` (which raises :class:`BudgetExceeded`
    once the file's ads are spent); without one, only the per-section limit holds.
    """
    jobs: list[Job] = []
    problems: list[str] = []
    for n, ad in enumerate(classad.iter_ads(text, classad.MAX_ADS + 1)):
        if n >= classad.MAX_ADS:
            sc.record("too_many_ads", offset, f"more than {classad.MAX_ADS}")
            break
        if budget is not None:
            budget.ad()
        job = _job(ad.pick_raw(_JOB_ATTRS), problems)
        if problems:  # the rest of the ad is kept
            for p in problems:
                sc.record("bad_number", offset, f"ad {n}: {p}")
            problems.clear()
        if job is None:
            sc.record("no_start", offset, f"ad {n}")
        else:
            jobs.append(job)
    return jobs


def _sections(sc: Scanner, err: GlideinErr, max_section_bytes: int, budget: Budget) -> None:
    """Decode the history and trace sections; on a budget overrun, keep none of them.

    A budget overrun stops the file: a subset of a pilot's jobs would put the
    missing jobs' time into overhead, so the jobs (and the trace spool) found
    so far are dropped and ``err.jobs`` stays None, as for a pilot that sent
    no history. The caller sees :attr:`Budget.exceeded`.
    """
    jobs: list[Job] | None = None
    spool: list[bytes] = []  # joined once: concatenating per section is quadratic
    offset = 0
    try:
        for raw in condor_sections.iter_sections(sc.data):
            offset = raw.offset
            budget.section()  # every frame, decoded or not: a file of a million broken frames is work too
            is_trace = raw.name == C.SPOOL_SECTION
            if raw.name != HISTORY_SECTION and not is_trace:
                if raw.payload is None:  # still worth knowing the framing is broken
                    sc.record(raw.problem or "bad_section", raw.offset, raw.name)
                continue
            src = Source.TRACE_SPOOL.value if is_trace else sc.source
            if raw.payload is None:
                sc.errors.record(src, raw.problem or "bad_section", sc.path, raw.offset, raw.name)
                continue
            limit = min(C.SPOOL_MAX_BYTES, max_section_bytes) if is_trace else max_section_bytes
            allowed = budget.decode_limit(limit)
            try:
                content = condor_sections.decode(raw.payload, allowed)
            except condor_sections.SectionError as e:
                if e.reason == "too_large" and allowed < limit:
                    raise budget.over_decoded(limit) from None
                sc.errors.record(src, e.reason, sc.path, raw.offset, f"{raw.name}: {e}")
                continue
            budget.decoded(len(content))
            if is_trace:
                spool.append(content)
            else:
                found = parse_history(sc, content, raw.offset, budget=budget)
                if jobs is None:
                    jobs = found
                else:
                    jobs.extend(found)
            del content  # before the next section decodes: one section's bytes alive at a time
    except BudgetExceeded as e:
        sc.errors.record(sc.source, BUDGET, sc.path, offset, str(e))
        raise
    err.jobs = jobs
    if spool:
        err.trace_spool = spool[0] if len(spool) == 1 else b"".join(spool)


def _gpus(sc: Scanner, err: GlideinErr) -> None:
    data = sc.data
    for n, (off, line) in enumerate(sc.lines(b"condor_gpu_discovery")):
        if n >= MAX_GPU_LINES:
            break
        # The marker is mid-line: look at the whole line.
        ls = data.rfind(b"\n", max(0, off - 200), off) + 1
        full = data[ls : off + len(line)]
        m = _GPUS.match(full)
        if m:
            err.gpus = sc.num(m.group(1), off)
            return
        if _NO_GPUS in full:
            err.gpus = 0
            return


def _dashes(data: bytes, start: int, stop: int) -> int:
    """Offset of the first line of only dashes in [start, stop), or -1."""
    i = start - 1  # the line at ``start`` counts too
    while True:
        if i < start or data[i : i + 1] == b"\n":
            m = _DASHES.match(data, i + 1, stop)
            if m:
                return i + 1
        i = data.find(b"\n-", i + 1, stop)
        if i < 0:
            return -1


# The keys the accounting reads; the exporter extracts only these (detail=False).
_USED_KEYS = re.compile(rb"^(GLIDEIN_CPUS|MEMORY|GLIDEIN_Site|GLIDEIN_Resource_Slots) ([^\n]*)$", re.M)


def _config(sc: Scanner, err: GlideinErr, detail: bool) -> None:
    data = sc.data
    begin = data.find(CONFIG_BEGIN)
    if begin < 0:
        return
    body = data.find(b"\n", begin)
    if body < 0:
        sc.record("truncated", begin, "glidein_config dump")
        return
    body += 1
    end = _dashes(data, body, body + MAX_CONFIG)
    if end < 0:
        if _dashes(data, body, len(data)) < 0:
            sc.record("truncated", body, "glidein_config dump without its end")
            return
        sc.record("too_large", body, "glidein_config dump")
        end = data.rfind(b"\n", body, body + MAX_CONFIG)
        end = body if end < 0 else end
    # Without the newline that ends the last line: its empty "line" would
    # send every dump down the slow path below.
    stop = end - 1 if end > body and data[end - 1] == 0x0A else end
    if not detail:
        # A repeated key keeps its last value, as gconfig_get does: later matches overwrite.
        config = {k.decode(): v.decode("utf-8", "replace") for k, v in _USED_KEYS.findall(data, body, stop)}
        _config_values(err, config)
        return
    lines = data[body:stop].decode("utf-8", "replace").split("\n")
    # A repeated key keeps its last value, as gconfig_get does.
    try:
        config = dict(map(_SPLIT1, lines))  # C speed: ~500 lines per pilot
    except ValueError:  # some line has no space: take them one by one
        config = {}
        for line in lines:
            key, _, value = line.partition(" ")
            config[key] = value
    config.pop("", None)  # blank or indented lines
    _config_values(err, config)


def _decimal(text: str, max_digits: int) -> int | None:
    """An ASCII digit run as int, else None. str.isdigit() alone is not enough:
    it accepts "²", which int() refuses, and "١", which int() reads as 1."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= max_digits:
        return int(text)
    return None


def _config_values(err: GlideinErr, config: dict[str, str]) -> None:
    err.config = config
    err.cpus = _decimal(config.get("GLIDEIN_CPUS", ""), 9)
    err.memory_mb = _decimal(config.get("MEMORY", ""), 12)
    site = config.get("GLIDEIN_Site")
    if site:
        err.site = site.strip()


def _first_text(el: Element, tag: str) -> str | None:
    """text_of the first ``tag`` descendant that has text (as a one-pass scan would keep)."""
    for sub in el.iter(tag):  # filtered in C: ~4x cheaper than testing every element here
        text = text_of(sub)
        if text is not None:
            return text
    return None


def _script(el: Element) -> ScriptTiming | None:
    name = el.get("id")
    if not name:
        return None
    failure = None
    for sub in el.iter("metric"):
        if sub.get("name") == "failure":
            failure = text_of(sub)
            if failure is not None:
                break
    return ScriptTiming(
        name=name[:500],
        start=iso_epoch(_first_text(el, "tStart")),
        end=iso_epoch(_first_text(el, "tEnd")),
        ok=_first_text(el, "status") == "OK",
        failure=failure,
    )


def _script_rx(name: bytes, body: bytes) -> ScriptTiming:
    def grab(rx: re.Pattern[bytes]) -> str | None:
        m = rx.search(body)
        return m.group(1).decode("utf-8", "replace").strip() if m else None

    return ScriptTiming(
        name=name.decode("utf-8", "replace"),
        start=iso_epoch(grab(_RX_TSTART)),
        end=iso_epoch(grab(_RX_TEND)),
        ok=grab(_RX_STATUS) == "OK",
        failure=grab(_RX_FAILURE),
    )


def parse_long_xml(sc: Scanner, xml: bytes, offset: int) -> list[ScriptTiming]:
    """One :class:`ScriptTiming` per ``subtestlist/OSGTestResults/OSGTestResult``."""
    root = parse_xml(sc, xml, offset)
    scripts: list[ScriptTiming] = []
    if root is not None:
        for el in root.iterfind("./subtestlist/OSGTestResults/OSGTestResult"):
            st = _script(el)
            if st is not None:
                scripts.append(st)
                if len(scripts) >= MAX_SCRIPTS:
                    break
        return scripts
    if hostile_xml(xml):
        return scripts  # refused, not salvaged
    # Not well-formed (values are written unescaped by shell scripts):
    # salvage each script's chunk with regexes.
    sub = xml.find(b"<subtestlist>")
    stop = xml.find(b"</subtestlist>", sub)
    if sub < 0:
        return scripts
    for m in _RX_SUB.finditer(xml, sub, len(xml) if stop < 0 else stop):
        scripts.append(_script_rx(m.group(1), m.group(2)))
        if len(scripts) >= MAX_SCRIPTS:
            break
    return scripts


def _long_xml(sc: Scanner, err: GlideinErr) -> None:
    data = sc.data
    begin = data.rfind(XML_BEGIN)  # printed last, by glidein_startup.sh's print_tail
    if begin < 0:
        return
    body = begin + len(XML_BEGIN)
    end = data.find(XML_END, body)
    if end < 0:
        sc.record("truncated", body, "encoded XML without its end")
        return
    hdr = data.find(b"begin-base64", body, end)
    start = data.find(b"\n", hdr, end) if hdr >= 0 else -1
    stop = data.rfind(b"\n====", start, end) if start >= 0 else -1
    if stop < 0:
        sc.record("no_begin_line" if hdr < 0 else "truncated", body, "encoded XML framing")
        return
    try:
        xml = condor_sections.decode(data[start + 1 : stop], MAX_LONG_XML)
    except condor_sections.SectionError as e:
        sc.record(e.reason, body, f"encoded XML: {e}")
        return
    err.scripts = parse_long_xml(sc, xml, body)


def parse_err(
    data: bytes,
    path: str,
    errors: ParseErrors,
    max_section_bytes: int = 64 << 20,
    *,
    detail: bool = True,
    budget: Budget | None = None,
) -> GlideinErr:
    """Everything the stderr tells; never raises on any input.

    ``detail=False`` is the exporter's fast path: it skips the per-script long
    XML and keeps only the glidein_config keys the accounting reads.

    ``budget`` bounds the work across all the file's sections (a fresh
    :class:`Budget` when None). When it runs out, parsing stops, reason
    ``budget`` is recorded and ``budget.exceeded`` names the limit; the
    GPU line and glidein_config (bounded scans, read first) are kept, the
    sections' jobs and trace spool and the long XML are not (``jobs`` None);
    an overrun after the last section only skips the long XML.
    """
    err = GlideinErr(path=path)
    if not data:
        return err
    budget = Budget() if budget is None else budget
    if native.core is not None and not detail and budget.allows():
        found = native.core.parse_err(data, Job, max_section_bytes, C.SPOOL_MAX_BYTES, *budget.left())
        if found is not None:
            jobs, err.gpus, config, err.trace_spool, sections, ads, decoded = found
            err.jobs = jobs
            if config is not None:
                _config_values(err, dict(config))
            budget.charge_within(sections, ads, decoded)  # as the Python reader would have charged it
            return err
    sc = Scanner(data, path, errors, Source.GLIDEIN_ERR.value)
    if len(data) > MAX_LINE:
        sc.check_long_lines()
    # Bounded single scans first, so that a budget overrun in the sections keeps them.
    _gpus(sc, err)
    _config(sc, err, detail)
    try:
        _sections(sc, err, max_section_bytes, budget)  # records the overrun itself
    except BudgetExceeded:
        return err
    if detail:
        try:
            budget.cpu()
        except BudgetExceeded as e:  # the sections are complete and kept; the long XML is skipped
            sc.errors.record(sc.source, BUDGET, path, None, str(e))
            return err
        _long_xml(sc, err)
    return err


def read_err(
    path: str,
    errors: ParseErrors,
    max_section_bytes: int = 64 << 20,
    max_bytes: int = 256 << 20,
    *,
    detail: bool = True,
    root: str | None = None,
    budget: Budget | None = None,
) -> GlideinErr | None:
    """Read and parse one .err; None (and a recorded error) when unreadable.

    A file over ``max_bytes`` is recorded as too_large and only its first
    ``max_bytes`` are parsed: its sections come in order, each self-contained.
    Only a regular file is read (inside ``root``, when given; see
    :mod:`gwms_obs.sources.files`), up to the size it had when opened.
    ``budget``: see :func:`parse_err`.
    """
    data = files.fast_read(path, root, max_bytes)  # the common case: one compiled call
    if data is not None:
        err = parse_err(data, path, errors, max_section_bytes, detail=detail, budget=budget)
        if err is not None:
            err.size = len(data)  # all of it: fast_read takes only a file within the limit
        return err
    src = Source.GLIDEIN_ERR.value
    f = files.open_or_record(path, errors, src, root=root)
    if f is None:
        return None
    try:
        with f:
            size = f.size
            data = f.read(max_bytes)
    except OSError as e:
        errors.record(src, "unreadable", path, None, files.describe(e))
        return None
    if size > max_bytes:
        errors.record(src, "too_large", path, max_bytes, f"{size} bytes, tail skipped")
    err = parse_err(data, path, errors, max_section_bytes, detail=detail, budget=budget)
    if err is not None:
        err.size = size
    return err
