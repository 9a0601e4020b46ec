"""GlideinWMS's RRD history as OpenMetrics, for ``promtool tsdb create-blocks-from openmetrics``.

``gwms-obs import-rrd MONITOR_DIR --cutover T`` walks a factory's monitor tree
(``entry_<entry>/frontend_<client>/*.rrd``) or a VO frontend's
(``group_<group>/{total,factory_<entry>,state_Unmatched}/Status_Attributes.rrd``),
reads each file with sources/rrd.py and writes the same kind of file as
``report --format openmetrics`` (outputs/history.py): blocks the sidecar ships to
Thanos. docs/migration.md has the table of every data source and where it goes.

The factory's (catalogue.py names and labels, the live exporter's state words):

* Status_Attributes ``Status<state>`` -> gwms_entry_glideins{state}, ``Req<kind>``
  -> gwms_entry_requested_glideins{kind}, ``ClientJobs*`` -> gwms_entry_user_jobs,
  ``ClientGlide{Idle,Running}`` -> gwms_entry_vo_glideins, ``ClientCores{Idle,Running}``
  -> gwms_entry_vo_cores, ``ClientInfoAge`` -> gwms_entry_frontend_info_age_seconds:
  the same schedd_status numbers the exporter serves, so a panel's line runs on
  across the cutover. The rest of the file keeps GlideinWMS's names:
  ``StatusIdle`` and ``ClientGlideTotal`` in gwms_legacy_status_glideins{attribute},
  the cores the factory estimates (``StatusRunningCores``, ``ReqIdleCores``,
  ``ReqMaxCores``: glideins times GLIDEIN_CPUS) and ``ClientCoresTotal`` in
  gwms_legacy_status_cores{attribute}.
* Log_Completed_WasteTime -> gwms_legacy_completed_wastetime_rate{kind, range};
  Log_Completed_Stats -> gwms_legacy_completed_stats_rate{stat}; Log_Completed ->
  gwms_legacy_completed_rate{stat}; Log_Counts -> gwms_legacy_log_counts_glideins{state}
  and gwms_legacy_log_counts_rate{transition, state}: per-mille waste, duration and
  job-count buckets, per-cycle sums and state transitions from the glidein logs
  have no counterpart in our accounting (docs/migration.md), so they keep their
  meaning under their own names.
* ``site``: ``--site ENTRY=SITE``, else the GLIDEIN_Site of the monitor dir's
  descript.xml files (where the exporter reads it), else ``unknown`` as the
  exporter says it, so imported and live series are one series.
* ``total/`` directories are skipped: each of their data sources is, cycle by
  cycle, the sum of the clients' (ClientInfoAge: their mean), which are imported;
  docs/migration.md says why the one case it is not (no frontend asked the entry)
  is left out too.

The frontend's (the live source's labels, ingest/frontend_status.py; ``client``
by ``--frontend-client GROUP=CLIENT``, else ``<FrontendName>.<group>`` as the live
source names it):

* ``group_<g>/total``: ``Jobs<state>`` -> gwms_frontend_jobs, ``Glidein<state>`` ->
  gwms_frontend_glideins (its Match*/Req* are the sums of the group's entries: skipped).
* ``group_<g>/factory_<glideid>``: ``MatchJob*``, ``MatchGlidein*``, ``MatchCore*``,
  ``Req*`` -> gwms_frontend_entry_{jobs,glideins,cores,requested_glideins}. The
  directory has the entry's ``<entry>@<glidein>@<factory>@<node>`` with every
  character but letters, digits, ``.`` and ``-`` made ``_``, which cannot be split
  back: the names come from the group's frontend_status.xml (and the frontend-wide
  one), an entry no longer there by a known ``factory_instance`` its name ends
  with; one that neither names is counted (``unknown_factory``) and skipped.
* ``group_<g>/state_Unmatched``: ``MatchJob*`` -> gwms_frontend_unmatched_jobs (its
  other data sources GlideinWMS writes 0). ``state_MatchedUp``/``MatchedDown`` (the
  sums of the entries up and down) and the frontend-wide ``total/`` (the groups'
  sums) are skipped: Prometheus sums the series they add up.

A series a panel draws (catalogue.RRD_IMPORTED) gets a coarse row at every 5
minutes of its period; the legacy families, no panel's, each row once at its own
time (most of a factory's data sources are these buckets: filled, a year of one
entry was 3.6 M samples, benchmarks/results/import-rrd.md).

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

import functools
import io
import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .. import catalogue
from ..catalogue import MetricDef
from ..parse_errors import ParseErrors
from ..sources import descript, frontend_status, rrd
from .prometheus import (
    FRONTEND_CORE_STATES,
    FRONTEND_GLIDEIN_STATES,
    FRONTEND_JOB_STATES,
    FRONTEND_MATCHED_GLIDEIN_STATES,
    FRONTEND_MATCHED_JOB_STATES,
    FRONTEND_REQUESTED_KINDS,
    REQUESTED_KINDS,
    STATUS_STATES,
    USER_JOB_STATES,
    VO_CORE_STATES,
    VO_GLIDEIN_STATES,
)

log = logging.getLogger(__name__)
Labels = tuple[str, ...]
Mapping = dict[str, tuple[MetricDef, Labels]]  # data source -> (metric, the values of its labels after the pool's)


def _words(prefix: str, metric: MetricDef, words: dict[str, str]) -> Mapping:
    return {f"{prefix}{a}": (metric, (w,)) for a, w in words.items()}


# The factory's Status_Attributes: a data source with a series of ours -> it, with its word.
STATUS_ATTRIBUTES: Mapping = {
    **_words("Status", catalogue.ENTRY_GLIDEINS, STATUS_STATES),
    **_words("Req", catalogue.ENTRY_REQUESTED, REQUESTED_KINDS),
    **_words("Client", catalogue.ENTRY_USER_JOBS, USER_JOB_STATES),
    **_words("Client", catalogue.ENTRY_VO_GLIDEINS, VO_GLIDEIN_STATES),
    **_words("Client", catalogue.ENTRY_VO_CORES, VO_CORE_STATES),
    "ClientInfoAge": (catalogue.ENTRY_INFO_AGE, ()),
}
# ... and those with none, under GlideinWMS's own names.
STATUS_LEGACY: Mapping = {
    **{a: (catalogue.LEGACY_STATUS_GLIDEINS, (a,)) for a in ("StatusIdle", "ClientGlideTotal")},
    **{
        a: (catalogue.LEGACY_STATUS_CORES, (a,))
        for a in ("StatusRunningCores", "ReqIdleCores", "ReqMaxCores", "ClientCoresTotal")
    },
}
# The frontend's Status_Attributes, by directory kind: a group's total (its jobs and its VO pool's
# glideins), a factory entry of the group, the group's jobs no entry matches.
FRONTEND_TOTAL: Mapping = {
    **_words("Jobs", catalogue.FRONTEND_JOBS, FRONTEND_JOB_STATES),
    **_words("Glidein", catalogue.FRONTEND_GLIDEINS, FRONTEND_GLIDEIN_STATES),
}
FRONTEND_FACTORY: Mapping = {
    **_words("MatchJob", catalogue.FRONTEND_ENTRY_JOBS, FRONTEND_MATCHED_JOB_STATES),
    **_words("MatchGlidein", catalogue.FRONTEND_ENTRY_GLIDEINS, FRONTEND_MATCHED_GLIDEIN_STATES),
    **_words("MatchCore", catalogue.FRONTEND_ENTRY_CORES, FRONTEND_CORE_STATES),
    **_words("Req", catalogue.FRONTEND_ENTRY_REQUESTED, FRONTEND_REQUESTED_KINDS),
}
FRONTEND_UNMATCHED: Mapping = _words("MatchJob", catalogue.FRONTEND_UNMATCHED_JOBS, FRONTEND_MATCHED_JOB_STATES)
MAX_GROUPS = 200  # as the live source (ingest/frontend_status.py): a frontend has a handful
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")


def sanitized(name: str) -> str:
    """A frontend's directory name for a factory entry: every character but a letter, a digit,
    ``.`` or ``-`` made ``_`` (glideinFrontendMonitoring.sanitize's rule)."""
    return _UNSAFE.sub("_", name)


# The factory's RRDs per client (condorQStats', condorLogSummary's); any other file is not dumped.
FACTORY_FILES = frozenset(
    {"Status_Attributes", "Log_Completed_WasteTime", "Log_Completed_Stats", "Log_Completed", "Log_Counts"}
)


def _factory_target(kind: str, ds: str) -> tuple[MetricDef, Labels] | None:
    if kind == "Status_Attributes":
        return STATUS_ATTRIBUTES.get(ds) or STATUS_LEGACY.get(ds)
    if kind == "Log_Completed_WasteTime":
        w, sep, r = ds.partition("_")
        return (catalogue.LEGACY_WASTE_TIME, (w, r)) if sep else None
    if kind == "Log_Completed_Stats":
        return catalogue.LEGACY_COMPLETED_STATS, (ds,)
    if kind == "Log_Completed":
        return catalogue.LEGACY_COMPLETED, (ds,)
    if kind == "Log_Counts":
        for transition in ("Entered", "Exited"):
            if ds.startswith(transition) and len(ds) > len(transition):
                return catalogue.LEGACY_LOG_TRANSITIONS, (transition, ds.removeprefix(transition))
        if ds.startswith("Status") and len(ds) > len("Status"):
            return catalogue.LEGACY_LOG_GLIDEINS, (ds.removeprefix("Status"),)
    return None


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
    frontend_clients: dict[str, str] = field(default_factory=dict)  # group -> client label (--frontend-client)
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
                pool = (entry, client, self.sites.get(entry) or UNKNOWN_SITE)
                for f in sorted(client_dir.glob("*.rrd")):
                    if f.stem in FACTORY_FILES:
                        self.add_file(f, functools.partial(_factory_target, f.stem), pool)

    def add_frontend_tree(self, monitor: Path) -> None:
        """Every group's RRDs under a VO frontend's monitor dir (the group totals, its factory
        entries, its unmatched jobs); the sums of these (the frontend-wide ``total/``, the
        ``state_Matched*`` dirs, the entries' sums in a group's total) are not imported."""
        name = None
        if (monitor / "descript.xml").is_file():
            name = frontend_status.read_frontend_name(str(monitor / "descript.xml"), self.errors, root=str(monitor))
        groups = sorted(d for d in monitor.glob("group_*") if d.is_dir() and len(d.name) > len("group_"))
        if len(groups) > MAX_GROUPS:
            self.errors.record(rrd.SOURCE, "too_many_groups", str(monitor), detail=f"{len(groups)} > {MAX_GROUPS}")
            groups = groups[:MAX_GROUPS]
        names = {g: self._factory_names(g, monitor) for g in groups}
        instances = {inst for by in names.values() for _, inst in by.values()}
        for gdir in groups:
            group = gdir.name.removeprefix("group_")
            # The name the factory labels this group's requests with, as the live source gives it
            # (ingest/frontend_status.py, docs/frontend.md): the frontend's and factory's series join on it.
            client = self.frontend_clients.get(group) or (f"{name}.{group}" if name else group)
            g = (group, client)
            self.add_file(gdir / "total" / "Status_Attributes.rrd", FRONTEND_TOTAL.get, g)
            self.add_file(gdir / "state_Unmatched" / "Status_Attributes.rrd", FRONTEND_UNMATCHED.get, g)
            for fdir in sorted(gdir.glob("factory_*")):
                path = fdir / "Status_Attributes.rrd"
                if not path.is_file():
                    continue
                key = self._resolve(fdir.name.removeprefix("factory_"), names[gdir], instances)
                if key is None:
                    self.errors.record(
                        rrd.SOURCE,
                        "unknown_factory",
                        str(path),
                        detail="no frontend_status.xml names this entry, and it ends with no known factory",
                    )
                    continue
                entry, instance = key
                # FRONTEND_ENTRY's order: entry, client, group, factory_instance.
                self.add_file(path, FRONTEND_FACTORY.get, (entry, client, group, instance))

    def _factory_names(self, gdir: Path, monitor: Path) -> dict[str, tuple[str, str]]:
        """Sanitized directory name -> (entry, factory_instance), from the group's frontend_status.xml."""
        path = gdir / "frontend_status.xml"
        if not path.is_file():
            return {}
        st = frontend_status.read_group_status(str(path), self.errors, root=str(monitor))
        if st is None:
            return {}
        return {sanitized(f"{e}@{i}"): (e, i) for e, i in st.factories}

    @staticmethod
    def _resolve(d: str, names: dict[str, tuple[str, str]], instances: set[str]) -> tuple[str, str] | None:
        """A ``factory_`` directory's (entry, factory_instance): by the group's own names, else an
        entry gone from the group's file by the longest factory_instance it ends with."""
        if d in names:
            return names[d]
        for inst in sorted(instances, key=len, reverse=True):
            tail = "_" + sanitized(inst)
            if d.endswith(tail) and len(d) > len(tail):
                return d.removesuffix(tail), inst
        return None

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

    def add_file(self, path: Path, target: Callable[[str], tuple[MetricDef, Labels] | None], pool: Labels) -> None:
        """One RRD: each data source ``target`` maps, as its metric with ``pool`` then its own labels'
        values; the others are left out. A file that is not there is nothing to import."""
        if not path.is_file():
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
        scrape = {k: v for k, v in self.scrape.items() if v}
        for i, (ds, _) in enumerate(parsed.ds):
            hit = target(ds)
            if hit is None:
                continue
            metric, extra = hit
            # The panels' series (instant selectors, 5-minute lookback) need a sample every step;
            # the legacy families are read in Explore at a step of one's choosing: a row once.
            pts = rrd.points(parsed, i, until=self.cutover, fill=metric in catalogue.RRD_IMPORTED)
            if not pts:
                continue
            spool = self._spools.get(metric)
            if spool is None:
                # Closed by write(); unlinked from the start, so nothing is left if it never runs.
                spool = self._spools[metric] = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
            head = metric.name + _labels((*metric.labels, *scrape), (*pool, *extra, *scrape.values()))
            spool.writelines(f"{head} {v!r} {t}\n" for t, v in pts)  # repr: the shortest exact float
            self.samples += len(pts)

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
