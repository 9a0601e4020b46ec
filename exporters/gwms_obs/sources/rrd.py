"""GlideinWMS's monitoring RRDs: ``rrdtool dump`` XML in, one time series per data source out.

Why ``rrdtool dump`` and not rrdtool's Python binding: the binding is a C
extension that PyPI ships only as a source package (building it needs
librrd-dev and a compiler on every host), while Debian's ``rrdtool`` package
gives the same library's own XML of the whole file, every archive with its
consolidation function, step and rows, which is exactly what an import needs.
One subprocess per file is nothing next to a year of rows. RRD files are in the
writing host's byte order and word size, so dump on a host like the factory.

The import takes, for each period, the finest archive that still covers it: an
archive of ``pdp_per_row`` steps and ``rows`` rows ends at the row holding the
last update and reaches back ``rows`` of its rows. Only AVERAGE archives are
read (what GlideinWMS creates and its pages plot). A row's time is the end of
the period it consolidates, as rrdtool stamps it. For a series a panel draws, a
coarser row is written at every base step of its period (its average stands
for all of it, as on GlideinWMS's graphs), so Prometheus's 5-minute lookback
shows no holes between hourly rows; other series get each row once, at its own
time (``fill``; benchmarks/results/import-rrd.md has the cost of each).
Unknown rows (NaN) are gaps, not zeros. Bad input (a dump that is
not an RRD, a row with the wrong number of values) is counted in ParseErrors
under source ``rrd`` with the file's path and the file or row skipped; the
other files go on.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from ..catalogue import Source
from ..parse_errors import ParseErrors

SOURCE = Source.RRD
DUMP_TIMEOUT = 60.0  # seconds; a year of 5-minute rows dumps in well under one
MAX_DS = 256  # GlideinWMS's widest file has ~60; bounds what a hostile file can make us hold


@dataclass(frozen=True, slots=True)
class Archive:
    cf: str
    pdp_per_row: int
    rows: tuple[tuple[float, ...], ...]  # oldest first, one value per data source


@dataclass(frozen=True, slots=True)
class Rrd:
    step: int
    last_update: int
    ds: tuple[tuple[str, str], ...]  # (name, type)
    archives: tuple[Archive, ...]


def dump(path: str) -> bytes:
    """The file's XML from Debian's rrdtool (no DTD line: there is nothing to fetch)."""
    return subprocess.run(
        ["rrdtool", "dump", "--header", "none", path], capture_output=True, check=True, timeout=DUMP_TIMEOUT
    ).stdout


def _int(el: Element | None) -> int:
    if el is None or el.text is None:
        raise ValueError("missing")
    return int(el.text.strip())


def _float(text: str | None) -> float:
    v = float((text or "").strip())  # "NaN" parses to nan
    if math.isinf(v):
        raise ValueError(f"infinite value {text!r}")
    return v


def parse(xml: bytes, path: str, errors: ParseErrors) -> Rrd | None:
    """An RRD's dump, or None (counted, logged) when it is not one."""
    try:
        root = fromstring(xml)
        if root.tag != "rrd":
            raise ValueError(f"root element <{root.tag[:40]}>, not <rrd>")
        step, last = _int(root.find("step")), _int(root.find("lastupdate"))
        ds = tuple(((d.findtext("name") or "").strip(), (d.findtext("type") or "").strip()) for d in root.findall("ds"))
        if not ds or len(ds) > MAX_DS or step <= 0:
            raise ValueError(f"{len(ds)} data sources, step {step}")
    except (ParseError, DefusedXmlException, ValueError) as e:
        errors.record(SOURCE, "not_an_rrd", path, detail=str(e))
        return None
    archives = []
    for rra in root.findall("rra"):
        try:
            cf, ppr = (rra.findtext("cf") or "").strip(), _int(rra.find("pdp_per_row"))
            if ppr <= 0:
                raise ValueError(f"pdp_per_row {ppr}")
        except ValueError as e:
            errors.record(SOURCE, "bad_archive", path, detail=str(e))
            continue
        if cf != "AVERAGE":
            continue
        rows: list[tuple[float, ...]] = []
        db = rra.find("database")
        for row in db.findall("row") if db is not None else ():
            try:
                vals = tuple(_float(v.text) for v in row.findall("v"))
                if len(vals) != len(ds):
                    raise ValueError(f"{len(vals)} values for {len(ds)} data sources")
            except ValueError as e:
                # The row keeps its place (its time comes from its position) as a gap.
                errors.record(SOURCE, "bad_row", path, detail=str(e))
                vals = (math.nan,) * len(ds)
            rows.append(vals)
        archives.append(Archive(cf, ppr, tuple(rows)))
    return Rrd(step, last, ds, tuple(archives))


def _rows(rrd: Rrd, ds: int, until: float | None) -> Iterator[tuple[int, int, float, float]]:
    """``(end, width, value, cut)`` of one data source's known rows, from the finest archive
    covering each period: ``cut`` is where a finer archive (or ``until``) takes over, and only
    rows whose period begins before it are given."""
    covered_from: float = math.inf  # the oldest row time a finer archive already gave
    for arc in sorted(rrd.archives, key=lambda a: a.pdp_per_row):
        width = rrd.step * arc.pdp_per_row
        newest = (rrd.last_update // width) * width
        n = len(arc.rows)
        oldest = newest - (n - 1) * width
        cut = min(covered_from, math.inf if until is None else until)
        for i, vals in enumerate(arc.rows):
            t = oldest + i * width
            if t - width + rrd.step >= cut:
                break
            if not math.isnan(v := vals[ds]):
                yield t, width, v, cut
        if n:
            covered_from = min(covered_from, oldest)


def points(rrd: Rrd, ds: int, until: float | None = None, *, fill: bool = True) -> list[tuple[int, float]]:
    """One data source's known values, time-ordered, from the finest archive covering each period.

    ``until``: the cutover; no sample at or after it. ``fill``: a coarse row at every base
    step of its period (for series panels draw with an instant selector), else once, at its
    own time. One data source at a time: a year of 12-hour rows written every 5 minutes is
    ~105,000 samples, and a file has dozens.
    """
    out: list[tuple[int, float]] = []
    for t, width, v, cut in _rows(rrd, ds, until):
        if fill:
            # A coarse row stands for its whole period, as on GlideinWMS's graphs: one sample
            # per base step, so Prometheus's 5-minute lookback draws it without holes; the
            # row a finer archive (or the cutover) begins inside gives the steps before that.
            out.extend((s, v) for s in range(t - width + rrd.step, t + 1, rrd.step) if s < cut)
        elif t < cut:
            out.append((t, v))
    out.sort()
    return out


def total(rrd: Rrd, ds: int, since: float | None = None, until: float | None = None) -> float:
    """An ABSOLUTE data source's sum over the rows wholly inside ``[since, until]``, each row's
    per-second rate times its width: what GlideinWMS's cycles fed it, as rrdtool consolidated it
    (a row a finer archive begins inside is left to the finer one)."""
    lo = -math.inf if since is None else since
    hi = math.inf if until is None else until
    return sum(v * w for t, w, v, cut in _rows(rrd, ds, None) if t <= cut and lo <= t - w and t <= hi)


def series(rrd: Rrd, until: float | None = None) -> dict[str, list[tuple[int, float]]]:
    """:func:`points` of every data source, by name."""
    return {name: points(rrd, i, until) for i, (name, _) in enumerate(rrd.ds)}
