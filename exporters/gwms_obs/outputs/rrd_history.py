"""A factory's RRD history as OpenMetrics, for ``promtool tsdb create-blocks-from openmetrics``.

``gwms-obs import-rrd MONITOR_DIR --cutover T`` walks the factory's monitor
tree (``entry_<entry>/frontend_<client>/*.rrd``), reads each file with
sources/rrd.py and writes the same kind of file as ``report --format
openmetrics`` (outputs/history.py): blocks the sidecar ships to Thanos.

What maps where (catalogue.py names and labels, the live exporter's state words):

* Status_Attributes ``Status<state>`` -> gwms_entry_glideins{state}, ``Req<kind>``
  -> gwms_entry_requested_glideins{kind}, ``ClientJobs*`` -> gwms_entry_user_jobs,
  ``ClientGlide{Idle,Running}`` -> gwms_entry_vo_glideins: the same schedd_status
  numbers the exporter serves, so a panel's line runs on across the cutover.
  Data sources with no exporter series (StatusIdle, StatusRunningCores, ReqIdleCores,
  ReqMaxCores, ClientInfoAge, ClientGlideTotal, ClientCores*) are not imported.
* Log_Completed_WasteTime -> gwms_legacy_completed_wastetime_rate{kind, range};
  Log_Completed_Stats -> gwms_legacy_completed_stats_rate{stat}: GlideinWMS's
  per-mille waste, Lasted and JobsNr buckets have no counterpart in our
  accounting (docs/migration.md), so they keep their meaning under their own names.
  No panel draws them, so each RRD row is one sample at its own time (most of a
  factory's data sources are these buckets: filled, a year of one entry was
  3.6 M samples, benchmarks/results/import-rrd.md).
* ``site``: ``--site ENTRY=SITE``, else the GLIDEIN_Site of the monitor dir's
  descript.xml files (where the exporter reads it), else ``unknown`` as the
  exporter says it, so imported and live series are one series.
* ``total/`` directories are sums of the frontends' and are skipped: Prometheus
  sums the per-client series, and importing both would count twice. Other files
  (Log_Counts, Log_Completed, ...) are not imported yet.

The cutover: no sample at or after it. Start the live exporter's Prometheus at
the cutover and the two never overlap. ``job`` and ``instance``: the live series
have them from the scrape, so the imported ones get the same (the prometheus
role's job and target by default). Without them the two are separate series,
and for the 5 minutes Prometheus looks back past the last imported sample a
panel's sum would count both. promtool reads its whole input once per
block it cuts (2 hours by default): give it ``--max-block-duration=4374h`` and a
year is three passes, not 4,380.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .. import catalogue
from ..catalogue import MetricDef
from ..parse_errors import ParseErrors
from ..sources import descript, rrd
from .prometheus import REQUESTED_KINDS, STATUS_STATES, USER_JOB_STATES, VO_GLIDEIN_STATES

log = logging.getLogger(__name__)

# Status_Attributes data source -> (metric, the label its word goes in, the word).
STATUS_ATTRIBUTES: dict[str, tuple[MetricDef, str]] = {
    **{f"Status{a}": (catalogue.ENTRY_GLIDEINS, w) for a, w in STATUS_STATES.items()},
    **{f"Req{a}": (catalogue.ENTRY_REQUESTED, w) for a, w in REQUESTED_KINDS.items()},
    **{f"Client{a}": (catalogue.ENTRY_USER_JOBS, w) for a, w in USER_JOB_STATES.items()},
    **{f"Client{a}": (catalogue.ENTRY_VO_GLIDEINS, w) for a, w in VO_GLIDEIN_STATES.items()},
}
Labels = tuple[str, ...]
UNKNOWN_SITE = "unknown"  # the live exporter's site for an entry its descript does not name (ingest/entry_status.py)


@dataclass
class RrdHistory:
    """Samples per metric, spooled file by file to a temporary file per family.

    OpenMetrics wants a family's series together; each series comes from one RRD, so a
    family is the concatenation of what each file gave it, and only one data source's
    samples are ever in memory (a factory's year of RRDs is gigabytes of text).
    """

    cutover: float
    sites: dict[str, str] = field(default_factory=dict)  # entry -> site label
    # job and instance as the live exporter's series get them from Prometheus's scrape (empty
    # values are left out): the same labels make imported and live samples one series
    scrape: dict[str, str] = field(default_factory=dict)
    errors: ParseErrors = field(default_factory=ParseErrors)
    files: int = 0
    samples: int = 0
    _spools: dict[MetricDef, IO[str]] = field(default_factory=dict)

    def add_tree(self, monitor: Path) -> None:
        """Every entry's per-client RRDs under a factory's monitor dir."""
        self.sites = {**self.descript_sites(monitor), **self.sites}  # --site wins over descript
        for entry_dir in sorted(monitor.glob("entry_*")):
            entry = entry_dir.name.removeprefix("entry_")
            for client_dir in sorted(entry_dir.glob("frontend_*")):
                client = client_dir.name.removeprefix("frontend_")
                for f in sorted(client_dir.glob("*.rrd")):
                    self.add_file(f, entry, client)

    def descript_sites(self, monitor: Path) -> dict[str, str]:
        """Each entry's GLIDEIN_Site from the descript.xml files beside the RRDs, where the live
        exporter reads it (ingest/descript.py): the factory's, then each entry's own, which wins."""
        out: dict[str, str] = {}
        paths = [monitor / "descript.xml", *sorted(monitor.glob("entry_*/descript.xml"))]
        for path in paths:
            if path.is_file():
                for ed in descript.read_descript(str(path), self.errors, root=str(monitor)):
                    if ed.site:
                        out[ed.entry] = ed.site
        return out

    def add_file(self, path: Path, entry: str, client: str) -> None:
        kind = path.stem
        if kind not in ("Status_Attributes", "Log_Completed_WasteTime", "Log_Completed_Stats"):
            return
        try:
            xml = rrd.dump(str(path))
        except (OSError, subprocess.SubprocessError) as e:
            err = getattr(e, "stderr", b"") or b""
            self.errors.record(rrd.SOURCE, "unreadable", str(path), detail=f"{e} {err[:200]!r}")
            return
        parsed = rrd.parse(xml, str(path), self.errors)
        if parsed is None:
            return
        self.files += 1
        pool = (entry, client, self.sites.get(entry) or UNKNOWN_SITE)
        for i, (ds, _) in enumerate(parsed.ds):
            target = self._target(kind, ds)
            if target is None:
                continue
            metric, extra = target
            # The panels' series (instant selectors, 5-minute lookback) need a sample every step;
            # the legacy families are read in Explore at a step of one's choosing: a row once.
            pts = rrd.points(parsed, i, until=self.cutover, fill=metric in catalogue.RRD_IMPORTED)
            if not pts:
                continue
            spool = self._spools.get(metric)
            if spool is None:
                # Closed by write(); unlinked from the start, so nothing is left if it never runs.
                spool = self._spools[metric] = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
            scrape = {k: v for k, v in self.scrape.items() if v}
            head = metric.name + _labels((*metric.labels, *scrape), (*pool, *extra, *scrape.values()))
            spool.writelines(f"{head} {v!r} {t}\n" for t, v in pts)  # repr: the shortest exact float
            self.samples += len(pts)

    @staticmethod
    def _target(kind: str, ds: str) -> tuple[MetricDef, Labels] | None:
        if kind == "Status_Attributes":
            hit = STATUS_ATTRIBUTES.get(ds)
            return (hit[0], (hit[1],)) if hit else None
        if kind == "Log_Completed_WasteTime":
            w, sep, r = ds.partition("_")
            return (catalogue.LEGACY_WASTE_TIME, (w, r)) if sep else None
        return catalogue.LEGACY_COMPLETED_STATS, (ds,)

    def write(self, out: IO[str]) -> None:
        """The OpenMetrics file, ``# EOF`` ended, for promtool's backfill; the spools are closed."""
        for metric in sorted(self._spools, key=lambda m: m.name):
            spool = self._spools.pop(metric)
            out.write(f"# HELP {metric.name} {_escape(metric.help)}\n# TYPE {metric.name} gauge\n")
            spool.seek(0)
            shutil.copyfileobj(spool, out)
            spool.close()
        out.write("# EOF\n")

    def to_openmetrics(self) -> str:
        buf = io.StringIO()
        self.write(buf)
        return buf.getvalue()


def _escape(s: str) -> str:
    """OpenMetrics escaping of HELP text and label values (a directory name may hold anything)."""
    return s.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(names: tuple[str, ...], values: Labels) -> str:
    """``{a="x",...}`` sorted by name, as prometheus_client writes them."""
    return "{" + ",".join(f'{n}="{_escape(v)}"' for n, v in sorted(zip(names, values, strict=True))) + "}"
