"""Whole-file reads for the tests, through the product's one read loop (follow.Follower).

The package reads appended logs only with ``Follower.open``; these helpers
read a file from its start with a fresh Follower, then treat what is left
after the last complete record as a finished file's tail (the tests' files are
final): a complete last line missing its newline is still a record, a cut one
is counted (``truncated_line`` / ``truncated_event``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import tzinfo
from typing import TypeVar

from gwms_obs.catalogue import Source
from gwms_obs.follow import Follower
from gwms_obs.model import CompletedJob
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources import completed_jobs as cj
from gwms_obs.sources import condor_event_log as el
from gwms_obs.sources import files

T = TypeVar("T")

# parse(buf, path, base_offset) -> (records, bytes consumed)
Parser = Callable[[bytes, str, int], tuple[list[T], int]]


def read_new(
    follower: Follower, path: str, parse: Parser[T], sink: Callable[[list[T]], None], *, root: str | None = None
) -> int:
    """What a stage's read does, for any parser: each buffer's records to ``sink``, then the
    cursor past them (Follower.open, Reading.advance); the bytes taken."""
    with follower.open(path, root=root) as log:
        for buf in log:
            records, used = parse(buf, path, log.offset)
            if records:
                sink(records)
            log.advance(used)
    return log.bytes_read


def read_all(
    path: str, parse: Parser[T], errors: ParseErrors, source: str, *, root: str | None = None
) -> tuple[list[T], bytes, int]:
    """(records, the bytes after the last complete one, their offset); an unreadable file is counted."""
    out: list[T] = []
    try:
        used = read_new(Follower(), path, parse, out.extend, root=root)
        with files.open_regular(path, root=root) as f:
            f.seek(used)
            rest = f.read()
    except OSError as e:
        errors.record(source, files.reason_of(e), path, None, files.describe(e))
        return [], b"", 0
    return out, rest, used


def parse_completed(
    buf: bytes, path: str, base_offset: int, errors: ParseErrors, entry: str | None = None
) -> tuple[list[CompletedJob], int]:
    """A buffer's completed_jobs lines as records, as the stage converts them (scan, then to_record)."""
    if entry is None:
        entry = cj.entry_from_path(path)
    raw, end = cj.scan_buffer(buf, path, base_offset, errors, entry)
    out: list[CompletedJob] = []
    for r in raw:
        rec = cj.to_record(r, entry)
        if isinstance(rec, str):
            errors.record(Source.COMPLETED_JOBS.value, rec, path, base_offset, "unparseable terminated time")
        else:
            out.append(rec)
    return out, end


def completed_jobs_file(path: str, errors: ParseErrors, *, root: str | None = None) -> list[CompletedJob]:
    """Every record of one completed_jobs log."""
    recs, rest, at = read_all(
        path, lambda b, p, o: parse_completed(b, p, o, errors), errors, Source.COMPLETED_JOBS.value, root=root
    )
    if rest:
        tail, _ = parse_completed(rest + b"\n", path, at, ParseErrors())
        if not tail:
            errors.record(
                Source.COMPLETED_JOBS.value, "truncated_line", path, at, rest[:200].decode("utf-8", "replace")
            )
        recs.extend(tail)
    return recs


def event_log_file(
    path: str, errors: ParseErrors, tz: tzinfo | None = None, *, root: str | None = None
) -> list[el.CondorEvent]:
    """Every event of one HTCondor-G event log; a cut last event is counted."""
    evs, rest, at = read_all(
        path, lambda b, p, o: el.parse_buffer(b, p, o, errors, tz=tz), errors, Source.CONDOR_EVENT_LOG.value, root=root
    )
    if rest.strip():
        errors.record(Source.CONDOR_EVENT_LOG.value, "truncated_event", path, at, rest[:80].decode("utf-8", "replace"))
    return evs
