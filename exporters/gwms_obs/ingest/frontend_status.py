"""The VO frontend's monitor dir (``frontend_monitor_dir``): its groups' frontend_status.xml.

On the frontend host, the same ``gwms-obs export`` reads what the frontend
writes each cycle (sources/frontend_status.py) and serves it as the
``gwms_frontend_*`` gauges. Like the entry status it counts no pilot; it runs
last. A file is re-read only when its mtime moved; one that cannot be read
keeps its group's last good values (its time then ages, and the stale alert
says so).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..catalogue import Source
from ..sources import files, frontend_status, layout
from .stage import Scan, Stage

MAX_GROUPS = 200  # a frontend has a handful; more group_* dirs are counted, not read


class FrontendStatusStage(Stage):
    sources = (Source.FRONTEND_STATUS,)
    precedence = 50

    def __init__(self, *args: Any) -> None:  # the Stage's own arguments
        super().__init__(*args)
        self.mtimes: dict[str, float] = {}  # re-read a file only when it changed
        self.frontend_name: str | None = None  # monitor/descript.xml's FrontendName

    def discover(self, scan: Scan) -> Sequence[tuple[str, str]] | None:
        d = self.books.cfg.frontend_monitor_dir
        if not d:
            return []  # not a frontend host
        try:
            with os.scandir(d):
                pass
        except OSError as e:  # nothing read this scan: the groups keep their last values, which age
            self.books.once.record(self.source.value, layout.UNREADABLE_DIR, d, None, files.describe(e))
            return None
        groups = sorted(layout.frontend_groups(d, self.books.once))
        if len(groups) > MAX_GROUPS:
            self.books.once.record(self.source.value, "too_many_groups", d, None, f"{len(groups)} > {MAX_GROUPS}")
            groups = groups[:MAX_GROUPS]
        return groups

    def client(self, group: str) -> str:
        """The name the factory labels this group's requests with (docs/frontend.md)."""
        mapped = self.books.cfg.frontend_clients.get(group)
        if mapped:
            return mapped
        return f"{self.frontend_name}.{group}" if self.frontend_name else group

    def _changed(self, path: str) -> bool:
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            return False  # not written yet, or gone: nothing to read
        if self.mtimes.get(path) == mtime:
            return False
        self.mtimes[path] = mtime
        return True

    def read(self, scan: Scan, found: Sequence[tuple[str, str]]) -> None:
        b = self.books
        root = b.cfg.frontend_monitor_dir
        if not root:
            return
        descript = os.path.join(root, "descript.xml")
        if self._changed(descript):
            self.frontend_name = frontend_status.read_frontend_name(descript, b.errors, root=root)
        wide = os.path.join(root, "frontend_status.xml")
        if self._changed(wide) and (fw := frontend_status.read_frontend_status(wide, b.errors, root=root)):
            b.health.records[self.source] += 1
            with b.lock:
                b.ledger.update_frontend(fw.updated)
        present = list(layout.monitor_files(found, "frontend_status.xml"))
        for group, path, _ in present:
            if not self._changed(path):
                continue
            st = frontend_status.read_group_status(path, b.errors, group, root=root)
            if st is None:
                continue  # counted; the group's last good values stay
            b.health.records[self.source] += 1
            with b.lock:
                b.ledger.update_frontend_group(st, self.client(group))
        b.health.files[self.source] = len(present)
        # A group whose dir is gone (removed from the frontend's config): its series end, rather
        # than age into a stale alert that never clears. One whose file is only unreadable stays.
        with b.lock:
            b.ledger.drop_frontend_groups(set(b.ledger.frontend_groups) - {g for g, _ in found})
