"""Entry status (``<monitor>/entry_*/schedd_status.xml``): the factory's own per-entry counts.

Last in precedence: it counts no pilot, only sets the entry gauges.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..accounting.pilot import EntryDefaults
from ..catalogue import Source
from ..sources import layout, schedd_status
from .books import Books
from .outlets import Outlets
from .stage import Scan, Stage


class EntryStatusStage(Stage):
    sources = (Source.SCHEDD_STATUS,)
    precedence = 40

    def __init__(self, books: Books, outlets: Outlets) -> None:
        super().__init__(books, outlets)
        self.mtimes: dict[str, float] = {}  # re-read a status file only when it changed

    def discover(self, scan: Scan) -> Sequence[tuple[str, str]]:
        b = self.books
        return list(layout.monitor_entries(b.cfg.monitor, b.once))

    def read(self, scan: Scan, found: Sequence[tuple[str, str]]) -> None:
        b = self.books
        present = list(layout.monitor_files(found, "schedd_status.xml"))
        for entry, path, mtime in present:
            if self.mtimes.get(path) == mtime:
                continue
            st = schedd_status.read_schedd_status(path, b.errors, root=b.cfg.monitor)
            self.mtimes[path] = mtime
            if st is None:
                continue
            b.health.records[Source.SCHEDD_STATUS] += 1
            site = (b.defaults.get(st.entry or entry) or EntryDefaults()).site or "unknown"
            with b.lock:
                b.ledger.update_entry(st, site)
        b.health.files[Source.SCHEDD_STATUS] = len(present)
