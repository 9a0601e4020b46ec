"""server/entry_<e>/completed_jobs_<YYYYMMDD>.log: the factory's logCompleted line per pilot."""

from __future__ import annotations

from ...catalogue import Source
from ..factory_stats import CompletedStats
from ..formats import completed_line, day_stamp
from ..plan import SimPilot
from ..scenario import EntrySpec

SOURCE = Source.COMPLETED_JOBS


def file_name(logged_at: int) -> str:
    """The day file the factory appends a line to (rotated daily, factory local time = UTC)."""
    return f"completed_jobs_{day_stamp(logged_at)}.log"


def line(p: SimPilot, spec: EntrySpec, logged_at: int, stats: CompletedStats) -> str:
    """The pilot's line; entries of a Python 2 factory print the job id without the bytes repr."""
    job_id = f"{p.cluster}.{p.proc:03d}" if spec.py2_ids else f"b'{p.cluster}.{p.proc:03d}'"
    return completed_line(logged_at, p.client, p.username, job_id, stats)
