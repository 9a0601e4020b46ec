"""Byte-exact text shapes of the GlideinWMS factory files, shared by the simulator.

Every function here renders one piece of a real file (see
shared/reference/glideinwms-formats.md for the upstream writer of each).
All times are rendered in UTC: the simulated factory and worker nodes run in
UTC, so ``date`` prints ``UTC`` and ISO 8601 offsets are ``+00:00``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import lru_cache

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@lru_cache(maxsize=1 << 16)  # a pilot prints the same second many times
def date_cmd(t: int) -> str:
    """``date`` in the C locale: ``%a %b %e %H:%M:%S %Z %Y`` (day space-padded)."""
    g = time.gmtime(t)
    return (
        f"{_DAYS[g.tm_wday]} {_MONTHS[g.tm_mon - 1]} {g.tm_mday:2d} "
        f"{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d} UTC {g.tm_year}"
    )


@lru_cache(maxsize=1 << 16)
def iso_local(t: int) -> str:
    """``date +%Y-%m-%dT%H:%M:%S%:z`` and ``getISO8601_Local`` in UTC."""
    g = time.gmtime(t)
    return f"{g.tm_year:04d}-{g.tm_mon:02d}-{g.tm_mday:02d}T{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d}+00:00"


def day_stamp(t: float) -> str:
    """``YYYYMMDD`` (GLIDEIN_LOGNR, completed_jobs file date), factory local = UTC."""
    g = time.gmtime(t)
    return f"{g.tm_year:04d}{g.tm_mon:02d}{g.tm_mday:02d}"


def eventlog_time(t: int, legacy: bool) -> str:
    """HTCondor user-log timestamp: ``YYYY-MM-DD HH:MM:SS`` (>= 8.9.3) or legacy ``MM/DD HH:MM:SS``."""
    g = time.gmtime(t)
    hms = f"{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d}"
    if legacy:
        return f"{g.tm_mon:02d}/{g.tm_mday:02d} {hms}"
    return f"{g.tm_year:04d}-{g.tm_mon:02d}-{g.tm_mday:02d} {hms}"


@lru_cache(maxsize=1 << 16)
def starterlog_time(t: int) -> str:
    """StarterLog timestamp (``MM/DD/YY HH:MM:SS``) as echoed by parse_starterlog.awk."""
    g = time.gmtime(t)
    return f"{g.tm_mon:02d}/{g.tm_mday:02d}/{g.tm_year % 100:02d} {g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d}"


def awk_num(x: float) -> str:
    """awk's print of a number: integers as such, others with OFMT ``%.6g``."""
    if x == int(x):
        return str(int(x))
    return f"{x:.6g}"


def updated_block(t: int, indent: str = "   ") -> str:
    """``xmlFormat.time2xml(t, "updated")``: the <updated> block of every monitor XML."""
    g = time.gmtime(t)
    human = time.strftime("%a %b %d %H:%M:%S %Y", g)
    rfc = time.strftime("%a, %d %b %Y %H:%M:%S", g)
    iso_z = time.strftime("%Y-%m-%dT%H:%M:%SZ", g)
    inner = indent * 2
    return (
        f"{indent}<updated>\n"
        f'{inner}<timezone name="Local" ISO8601="{iso_local(t)}" RFC2822="{rfc} +0000" human="{human}"/>\n'
        f'{inner}<timezone name="UTC" ISO8601="{iso_z}" RFC2822="{rfc} +0000" unixtime="{t}"/>\n'
        f"{indent}</updated>"
    )


def time_ordered(records: list[tuple[int, int, str]]) -> bytes:
    """A log appended as things happen: (time, pilot sequence, text) records, sorted, as bytes."""
    records.sort()
    return "".join(text for _, _, text in records).encode()


def xml_attrs(attrs: Iterable[tuple[str, object]]) -> str:
    """Attributes sorted by name, as ``xmlFormat.dict2string`` writes them."""
    return " ".join(f'{k}="{_xml_escape(str(v))}"' for k, v in sorted(attrs))


def _xml_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


# logCompleted's format string, glideFactoryMonitoring.py (widths right-justify each token).
COMPLETED_FMT = (
    "<job %37s %34s %22s %17s %17s %22s %24s><user %14s %17s %16s %19s/><wastemill %17s %11s %16s %13s/></job>\n"
)


def completed_line(terminated: int, client: str, username: str, job_id: str, vals: tuple[float, ...]) -> str:
    """One completed_jobs line from get_completed_stats() values.

    ``vals`` = (duration, condor_started, condor_duration, jobsnr, user duration,
    goodput, user terminated, wastemill validation, idle, nosuccess, badput);
    ``int()`` truncates floats exactly like the factory's ``%i``.
    """
    n = [int(v) for v in vals]
    return COMPLETED_FMT % (
        f'terminated="{iso_local(terminated)}"',
        f'client="{client}"',
        f'username="{username}"',
        f'id="{job_id}"',
        f'duration="{n[0]}"',
        f'condor_started="{bool(n[1])}"',
        *(
            f'{k}="{v}"'
            for k, v in zip(
                (
                    "condor_duration",
                    "jobsnr",
                    "duration",
                    "goodput",
                    "terminated",
                    "validation",
                    "idle",
                    "nosuccess",
                    "badput",
                ),
                n[2:],
                strict=True,
            )
        ),
    )
