"""Reader for the factory's own entry logs: submissions, condor_submit failures, removals.

Where and how GlideinWMS writes them (glideinWMS/glideinwms @ efdc530a5, 2026-02-27):

* **Files.** Each entry process logs through ``logSupport.get_logger_with_handlers(name,
  logDir, ...)`` (factory/glideFactoryEntry.py L54, L60): ``logDir`` is
  ``<LogDir>/entry_<entry>`` (the RPM's ``/var/log/gwms-factory/server/entry_<entry>``)
  and each ``<process_log>`` of glideinWMS.xml is one file
  ``<entry>.<extension>.log`` keeping the levels of its ``msg_types``
  (lib/logSupport.py L325-388). The RPM's config has ``info`` (INFO) and ``err``
  (DEBUG,ERR,WARN) (build/packaging/rpm/glideinWMS.xml L12-13); the creation
  defaults one ``all`` (INFO, WARN, ERR) (creation/lib/factory_defaults.xml L13).
  ``GlideinHandler.doRollover`` renames a full or old file to
  ``<file>.YYYY-MM-DD_HH-MM`` (then gzip or zip it if ``compression`` is set) and
  opens a new one (lib/logSupport.py L249-311).
* **Line prefix.** ``[%(asctime)s] %(levelname)s: %(message)s``; a handler that keeps
  DEBUG writes ``%(module)s:%(lineno)d: `` before the message (lib/logSupport.py
  L49-50, L383-386). ``asctime`` is ``logging``'s ``YYYY-MM-DD HH:MM:SS,mmm`` in the
  factory's local time. A message with newlines (condor_submit's stderr) continues on
  lines without the prefix.
* **Client.** Each frontend request an entry serves begins with INFO ``Checking downtime
  for frontend <security name> security class: <security class> (entry <entry>).``
  (factory/glideFactoryEntry.py L1115-1118); the factory's name of that client is
  ``<security name>_<security class>`` (``secClass2Name``, factory/glideFactoryLib.py
  L201-211), the ``client`` of completed_jobs. The lines below carry no client: a
  submission is the client of the newest such line of its file.
* **Submitted.** ``submitGlideins`` writes INFO ``Submitted %i glideins to %s: %s``
  (count, schedd, the (cluster, proc) list) once per request, in a ``finally``: also
  after a failure, with what went out before it (factory/glideFactoryLib.py L2010-2011).
  glideFactoryEntry.py L1747 then writes ``Submitted %s glideins`` (no `` to ``) for
  the same glideins: not counted.
* **condor_submit failed.** ``executeSubmit`` writes ERROR ``condor_submit failed: %s``
  (or ``condor_submit failed: Unknown error: %s``) once per failed condor_submit
  (factory/glideFactoryLib.py L1890-1897); the text of lib/condorExe.py L182 follows
  (``Failed condor command '...'. Exit code: N. Stdout: ... Stderr: ...``).
  ``keepIdleGlideins`` writes the same text again as a WARNING (glideFactoryLib.py
  L989-991): only the ERROR is counted.
* **Removals.** ``clean_glidein_queue`` (the frontend asked for fewer) writes INFO
  ``Removing %i unsubmitted idle glideins`` / ``idle`` / ``running`` /
  ``unrecoverable held`` / ``held glideins`` (factory/glideFactoryLib.py L1055, L1073,
  L1091, L1101, L1107, L1120, L1125); ``sanitizeGlideins`` writes WARNING ``Found %i
  stale glideins`` (idle too long, L1158), ``Found %i stale (>%ih) running glideins``
  (L1166), ``Found %i unrecoverable held glideins that have been held for over 20
  iterations`` (removed with forcex, L1175) and, for the other unrecoverable held,
  ``But removing only %i (unrecoverable held - unrecoverable held forcex)`` (L1189).
  These say what the factory set out to remove and why; ``removeGlideins`` then stops
  at ``max_removes`` a call and its ``Removed %i glideins on %s`` carries no reason
  (L2060), so the count is the one decided.

Each kind is read at the level its writer uses (``Record.level``), so a deployment with two
files that both keep a level writes its records twice: the stage counts each level of an
entry from one file only. Structured
(``structured="True"``, structlog JSON) logs are not read: their lines have no prefix.

The logs are the factory's own, but condor_submit's output and the names in them come
from elsewhere: lines are bounded (``MAX_LINE``), a failure's text is kept to
``MAX_TEXT`` characters and redacted, and a line that begins like one of the messages
above but does not read as it is counted (``malformed_line``) with its file and byte.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace
from datetime import datetime

from ..catalogue import RemovalReason, Source
from ..parse_errors import ParseErrors
from ..tracing.redact import mask_text

MAX_LINE = 1 << 20  # a longer line is skipped ("line_too_long"), never buffered forever
MAX_TEXT = 512  # characters of a condor_submit failure kept (redacted) for the log line
MAX_NAME = 256  # characters of a client's security name or class

_SRC = Source.FACTORY_LOG.value

# logging's asctime and levelname, then the optional "module:lineno: " of a DEBUG handler.
_PREFIX = re.compile(
    rb"\[([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2}),([0-9]{3})\] "
    rb"(DEBUG|INFO|WARNING|ERROR|CRITICAL): (?:[A-Za-z_][A-Za-z0-9_]{0,63}:[0-9]{1,6}: )?"
)
_N = r"(0|[1-9][0-9]{0,8})"  # a count as %i prints it


class Kind(enum.StrEnum):
    CLIENT = "client"  # a request's client begins (its submissions follow)
    SUBMITTED = "submitted"
    SUBMIT_FAILED = "submit_failed"
    REMOVED = "removed"


@dataclass(frozen=True, slots=True)
class Record:
    """One line of the factory log that counts, and the level it was written at."""

    t: float
    kind: Kind
    n: int = 0  # glideins submitted or removed
    client: str = ""  # Kind.CLIENT: <security name>_<security class>
    reason: RemovalReason | None = None  # Kind.REMOVED
    text: str = ""  # Kind.SUBMIT_FAILED: the failure, redacted and bounded
    level: str = ""  # INFO, WARNING or ERROR


# INFO messages: (what a message of this kind begins with, the whole message); one that
# begins like one but is not it is a malformed line.
_CLIENT = (
    re.compile(r"Checking downtime for frontend "),
    re.compile(
        rf"Checking downtime for frontend (.{{1,{MAX_NAME}}}?) security class: (.{{1,{MAX_NAME}}}?) \(entry .+\)\."
    ),
)
_SUBMITTED = (re.compile(r"Submitted \S+ glideins to "), re.compile(rf"Submitted {_N} glideins to \S+: .*"))
_REMOVING = (
    re.compile(r"Removing [0-9]+ .* glideins"),
    re.compile(rf"Removing {_N} (unsubmitted idle|idle|running|unrecoverable held|held) glideins"),
)
_REMOVING_REASON = {
    "unsubmitted idle": RemovalReason.EXCESS_IDLE,
    "idle": RemovalReason.EXCESS_IDLE,
    "running": RemovalReason.EXCESS_RUNNING,
    "unrecoverable held": RemovalReason.UNRECOVERABLE_HELD,
    "held": RemovalReason.HELD,
}
# WARNING messages of sanitizeGlideins.
_SANITIZE_STEM = re.compile(r"Found [^ ]+ (?:stale|unrecoverable held) |But removing only ")
_SANITIZE: tuple[tuple[re.Pattern[str], RemovalReason | None], ...] = (
    (re.compile(rf"Found {_N} stale glideins"), RemovalReason.STALE_IDLE),
    (re.compile(rf"Found {_N} stale \(>[0-9]{{1,9}}h\) running glideins"), RemovalReason.STALE_RUNNING),
    (
        re.compile(rf"Found {_N} unrecoverable held glideins that have been held for over 20 iterations"),
        RemovalReason.UNRECOVERABLE_HELD,
    ),
    # all the unrecoverable held, forcex ones included: the next line says how many of them go now
    (re.compile(rf"Found {_N} unrecoverable held glideins"), None),
    (
        re.compile(rf"But removing only {_N} \(unrecoverable held - unrecoverable held forcex\)"),
        RemovalReason.UNRECOVERABLE_HELD,
    ),
)
_FAILED = "condor_submit failed: "


# A factory writes many lines a second: the epoch of each second is computed once (bounded).
_SECONDS: dict[bytes, float | None] = {}
_MAX_SECONDS = 4096


def _epoch(m: re.Match[bytes]) -> float | None:
    """The prefix's time (the factory's local time, as this host's), or None if not a date."""
    key = m.string[m.start(1) : m.end(6)]
    t = _SECONDS.get(key, -1.0)
    if t == -1.0:
        try:
            y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
            t = datetime(y, mo, d, h, mi, sec).timestamp()
        except (ValueError, OverflowError, OSError):
            t = None
        if len(_SECONDS) >= _MAX_SECONDS:
            _SECONDS.clear()
        _SECONDS[key] = t
    return None if t is None else t + int(m[7]) / 1000


# The lines that may count, found in a whole buffer at once (most of a factory's log does not):
# the prefix, then the start of one of the messages above.
_CANDIDATE = re.compile(
    rb"(?m)^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{3}\] (?:INFO|WARNING|ERROR): "
    rb"(?:[A-Za-z_][A-Za-z0-9_]{0,63}:[0-9]{1,6}: )?"
    rb"(?:Checking downtime for frontend |Submitted |Removing |Found |But removing only |condor_submit failed: )"
)


def _may_have_long_line(buf: bytes, end: int) -> bool:
    """Whether a line of ``buf[:end]`` may be over MAX_LINE: one that is holds a whole aligned half of
    MAX_LINE without a newline, so if every such half has one, none is (a few C finds a buffer)."""
    half = MAX_LINE // 2
    return any(buf.find(b"\n", k, min(k + half, end)) < 0 for k in range(0, end, half))


def scan_buffer(buf: bytes, path: str, base_offset: int, errors: ParseErrors) -> tuple[list[Record], int]:
    """The records of the complete lines of ``buf`` (which starts at file byte ``base_offset``)
    and the bytes they take; an unterminated last line waits for its end, unless it is
    already longer than ``MAX_LINE`` (counted ``line_too_long`` and passed)."""
    out: list[Record] = []
    end = buf.rfind(b"\n") + 1
    if not _may_have_long_line(buf, end):  # the usual buffer: only the candidate lines are looked at
        for c in _CANDIDATE.finditer(buf, 0, end):
            line = buf[c.start() : buf.index(b"\n", c.start())]
            m = _PREFIX.match(line)
            got = _record(m, line) if m is not None else None
            if isinstance(got, Record):
                out.append(got)
            elif got is not None:
                errors.record(_SRC, got, path, base_offset + c.start(), line[:200].decode("utf-8", "replace"))
        pos = end
    else:
        pos = 0
    while pos < end:
        eol = buf.index(b"\n", pos)
        line = buf[pos:eol]
        where = base_offset + pos
        pos = eol + 1
        if len(line) > MAX_LINE:
            errors.record(_SRC, "line_too_long", path, where, f"{len(line)} bytes")
            continue
        m = _PREFIX.match(line)
        if m is None:
            continue  # a message's continuation line (condor_submit's output), or another writer's
        got = _record(m, line)
        if isinstance(got, Record):
            out.append(got)
        elif got is not None:
            errors.record(_SRC, got, path, where, line[:200].decode("utf-8", "replace"))
    if len(buf) - end > MAX_LINE:
        errors.record(_SRC, "line_too_long", path, base_offset + end, f"> {MAX_LINE} bytes, unterminated")
        end = len(buf)
    return out, end


# What a message that may count begins with, per level: any other line is passed without decoding it.
_STARTS = {
    b"INFO": (b"Checking downtime for frontend ", b"Submitted ", b"Removing "),
    b"WARNING": (b"Found ", b"But removing only "),
    b"ERROR": (_FAILED.encode(),),
}


def _record(m: re.Match[bytes], line: bytes) -> Record | str | None:
    """The line's record; None for a line that does not count; the reason of a bad one."""
    level = m[8]
    starts = _STARTS.get(level)
    if starts is None or not line.startswith(starts, m.end()):
        return None
    msg = line[m.end() :].rstrip(b"\r").decode("utf-8", "replace")
    rec: Record | None = None
    t = 0.0
    if level == b"INFO":
        for stem, full in (_CLIENT, _SUBMITTED, _REMOVING):
            if stem.match(msg):
                g = full.fullmatch(msg)
                if g is None:
                    return "malformed_line"
                if full is _CLIENT[1]:
                    rec = Record(t, Kind.CLIENT, client=f"{g[1]}_{g[2]}")
                elif full is _SUBMITTED[1]:
                    rec = Record(t, Kind.SUBMITTED, int(g[1]))
                else:
                    rec = Record(t, Kind.REMOVED, int(g[1]), reason=_REMOVING_REASON[g[2]])
                break
    elif level == b"WARNING":
        if _SANITIZE_STEM.match(msg):
            for full, reason in _SANITIZE:
                if g := full.fullmatch(msg):
                    if reason is None:
                        return None
                    rec = Record(t, Kind.REMOVED, int(g[1]), reason=reason)
                    break
            else:
                return "malformed_line"
    elif msg.startswith(_FAILED):  # ERROR: executeSubmit's (keepIdleGlideins' WARNING repeats it)
        text = msg[len(_FAILED) : len(_FAILED) + MAX_TEXT]
        rec = Record(t, Kind.SUBMIT_FAILED, 1, text=mask_text("".join(c if c.isprintable() else "?" for c in text)))
    if rec is None:
        return None
    when = _epoch(m)
    if when is None:
        return "bad_timestamp"
    return replace(rec, t=when, level=level.decode())
