"""Entry descriptions (``<monitor>/entry_*/descript.xml``): site, cores, memory, GPUs, walltime.

First in precedence: every other stage reads what an entry's pilots may be
(the plausibility bounds, the site label, GLIDEIN_CPUS for pilots that do not
say) from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..accounting.pilot import EntryDefaults
from ..catalogue import Source
from ..model import EntryDescript
from ..sources import descript, layout
from .books import Books
from .outlets import Outlets
from .stage import Scan, Stage


class DescriptStage(Stage):
    sources = (Source.DESCRIPT,)
    precedence = 0

    def __init__(self, books: Books, outlets: Outlets) -> None:
        super().__init__(books, outlets)
        self.mtimes: dict[str, float] = {}  # re-read a descript.xml only when it changed

    def discover(self, scan: Scan) -> Sequence[tuple[str, str]]:
        b = self.books
        return list(layout.monitor_entries(b.cfg.monitor, b.once, source=Source.DESCRIPT))

    def read(self, scan: Scan, found: Sequence[tuple[str, str]]) -> None:
        b = self.books
        for entry, path, mtime in layout.monitor_files(found, "descript.xml"):
            if self.mtimes.get(path) == mtime and entry in b.defaults:
                continue  # unchanged: neither re-read nor a bad one counted again
            self.mtimes[path] = mtime
            for ed in descript.read_descript(path, b.errors, root=b.cfg.monitor):
                b.defaults[ed.entry or entry] = entry_defaults(ed)
        b.health.files[Source.DESCRIPT] = len(b.defaults)


def entry_defaults(ed: EntryDescript) -> EntryDefaults:
    def num(*names: str) -> int | None:
        for n in names:
            for src in (ed.attributes, ed.params, ed.descript):
                v = src.get(n)
                v = v.strip() if v is not None else None
                # isascii: str.isdigit() accepts "²", which int() refuses
                if v and v.isascii() and v.isdigit() and len(v) <= 18 and int(v) > 0:
                    return int(v)
        return None

    return EntryDefaults(
        site=ed.site,
        cpus=num("GLIDEIN_CPUS", "GLIDEIN_ESTIMATED_CPUS"),
        cpus_fixed=num("GLIDEIN_CPUS") is not None,
        memory_mb=num("GLIDEIN_MaxMemMBs"),
        max_idle=num("GLIDEIN_Max_Idle"),
        max_walltime=num("GLIDEIN_Max_Walltime"),
        gpus=resource_slots_gpus(
            ed.attributes.get("GLIDEIN_Resource_Slots") or ed.params.get("GLIDEIN_Resource_Slots")
        ),
    )


def resource_slots_gpus(value: str | None) -> int | None:
    """GPUs of a GLIDEIN_Resource_Slots value (``name,number[,type=..];...``), None if none.

    The factory requests that many GPUs for each of the entry's pilots.
    """
    if not value:
        return None
    for slot in value.split(";"):
        parts = [x.strip() for x in slot.split(",")]
        if parts[0].lower() in ("gpus", "gpu") and len(parts) > 1 and parts[1].isascii() and parts[1].isdigit():
            return int(parts[1]) or None
    return None
