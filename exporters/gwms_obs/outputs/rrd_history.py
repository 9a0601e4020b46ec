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
* ``total/`` directories are sums of the frontends' and are skipped: Prometheus
  sums the per-client series, and importing both would count twice. Other files
  (Log_Counts, Log_Completed, ...) are not imported yet.

The cutover: no sample at or after it. Start the live exporter's Prometheus at
the cutover and the two never overlap.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from .. import catalogue
from ..catalogue import MetricDef
from ..parse_errors import ParseErrors
from ..sources import rrd
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


@dataclass
class RrdHistory:
    """Samples per metric and label set, gathered file by file."""

    cutover: float
    sites: dict[str, str] = field(default_factory=dict)  # entry -> site label
    errors: ParseErrors = field(default_factory=ParseErrors)
    samples: dict[MetricDef, dict[Labels, list[tuple[int, float]]]] = field(default_factory=dict)
    files: int = 0

    def add_tree(self, monitor: Path) -> None:
        """Every entry's per-client RRDs under a factory's monitor dir."""
        for entry_dir in sorted(monitor.glob("entry_*")):
            entry = entry_dir.name.removeprefix("entry_")
            for client_dir in sorted(entry_dir.glob("frontend_*")):
                client = client_dir.name.removeprefix("frontend_")
                for f in sorted(client_dir.glob("*.rrd")):
                    self.add_file(f, entry, client)

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
        pool = (entry, client, self.sites.get(entry, ""))
        for ds, points in rrd.series(parsed, until=self.cutover).items():
            target = self._target(kind, ds)
            if target is None or not points:
                continue
            metric, extra = target
            self.samples.setdefault(metric, {}).setdefault((*pool, *extra), []).extend(points)

    @staticmethod
    def _target(kind: str, ds: str) -> tuple[MetricDef, Labels] | None:
        if kind == "Status_Attributes":
            hit = STATUS_ATTRIBUTES.get(ds)
            return (hit[0], (hit[1],)) if hit else None
        if kind == "Log_Completed_WasteTime":
            w, sep, r = ds.partition("_")
            return (catalogue.LEGACY_WASTE_TIME, (w, r)) if sep else None
        return catalogue.LEGACY_COMPLETED_STATS, (ds,)

    def families(self) -> Iterator[Metric]:
        for metric in sorted(self.samples, key=lambda m: m.name):
            fam = GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))
            for labels, points in sorted(self.samples[metric].items()):
                for t, v in sorted(points):
                    fam.add_metric(list(labels), v, timestamp=t)
            yield fam

    def to_openmetrics(self) -> str:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(self))
        body: bytes = generate_latest(registry)  # type: ignore[no-untyped-call]  # untyped in prometheus_client
        return body.decode()


class _Families(Collector):
    def __init__(self, history: RrdHistory) -> None:
        self.history = history

    def collect(self) -> Iterator[Metric]:
        yield from self.history.families()
