"""What one ingest of a factory's files is told: where the files are, how long to wait, what to keep.

The exporter's config (:mod:`gwms_obs.config`) makes one from its file and flags;
``report`` and ``analyze`` use :meth:`IngestConfig.one_shot`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..accounting import plausible
from ..accounting.partition import DEFAULT_RULES, Rules


@dataclass(slots=True)
class IngestConfig:
    factory_dir: str
    monitor_dir: str | None = None  # default: <factory_dir>/monitor
    checkpoint: str | None = None  # None: keep state in memory only (one-shot reports)
    settle_seconds: float = 30.0  # a .out (or .err) written more recently may still be arriving
    lost_after_seconds: float = 3600.0  # as the factory: wait this long for a .out
    seen_retention_seconds: float = 2 * 86400.0  # remember counted pilots this long after their files go
    max_file_bytes: int = 64 << 20
    rules: Rules = DEFAULT_RULES
    reset_checkpoint: bool = False  # ignore (and overwrite) an existing checkpoint
    # completed_jobs user/@duration: "auto" (learned per entry, docs/accounting.md),
    # "raw" (every line is v3.10.12+) or "normalized" (every line is older).
    completed_total: str = "auto"
    # factory-side username (client/user_<name>) -> frontend client_log_name, for
    # factories whose completed_jobs logs do not (yet) show the pair.
    client_map: dict[str, str] = field(default_factory=dict)
    # On a VO frontend's host: its monitor dir (<work dir>/monitor, group_<group>/frontend_status.xml),
    # read by ingest/frontend_status.py; None: not a frontend host. ``factory_dir`` may then be
    # empty: a host with no factory (pipeline.py runs only the frontend's stage).
    frontend_monitor_dir: str | None = None
    # group -> the name the factory labels the group's requests with (its client_log_name); a
    # group not listed is labelled <FrontendName>.<group>, the name the frontend publishes.
    frontend_clients: dict[str, str] = field(default_factory=dict)
    # One-shot (report): the tree is final; nothing waits for a later scan.
    final: bool = False
    limits: plausible.Limits = plausible.DEFAULT_LIMITS  # bounds on what pilots say of themselves
    # Processes that read the pilots' files of a backfill (a scan with thousands of pilots
    # to read, ingest/glidein_files.POOL_MIN_PILOTS); 1: all in this process. The numbers
    # are the same with any value.
    workers: int = 1
    # How the daemon finds what changed (ingest/watch.py): "inotify" (events; a full scan at
    # start and every full_scan_seconds) or "scan" (a full scan every interval, as on NFS).
    discovery: str = "inotify"
    full_scan_seconds: float = 3600.0
    tick_seconds: float = 1.0  # how often a watching daemon reads what changed

    @property
    def monitor(self) -> str:
        return self.monitor_dir or os.path.join(self.factory_dir, "monitor")

    @classmethod
    def one_shot(
        cls, factory_dir: str, monitor_dir: str | None, lost_after_seconds: float, workers: int | None = None
    ) -> IngestConfig:
        """How ``report`` and ``analyze`` read a tree: as it is, nothing waits for a next scan.

        ``workers`` None: :func:`default_workers` (someone waits for the answer).
        """
        return cls(
            factory_dir=factory_dir,
            monitor_dir=monitor_dir,
            settle_seconds=0.0,
            final=True,
            lost_after_seconds=lost_after_seconds,
            workers=default_workers() if workers is None else workers,
        )


# report's and analyze's default: the cores this process may use, at most this many
# (the factory runs on the same host; past a few workers the merge here is the limit).
MAX_DEFAULT_WORKERS = 4


def default_workers() -> int:
    """The cores this process may run on (its affinity, a container's cpuset), at most MAX_DEFAULT_WORKERS."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_DEFAULT_WORKERS))
