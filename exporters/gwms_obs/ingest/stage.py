"""The contract every factory source implements to be read by a scan.

A stage owns one kind of factory file end to end: it finds its files,
reads what is new since its cursors (the format itself is parsed by its
reader in ``gwms_obs.sources``), hands records to the accounting through
:class:`~gwms_obs.ingest.books.Books`, and saves its own part of the
checkpoint. :class:`~gwms_obs.pipeline.Ingest` knows none of them by name: it
runs every stage of :data:`gwms_obs.ingest.STAGES` in precedence order.

A scan lists the client directories once; if a listed user has no frontend
name yet, every stage's ``name_clients`` looks for it first. Then, for each
stage in precedence order, ``read``; then, once every
stage has read, ``settle`` in the same order (the fallbacks: what only a
lower-precedence source can count, now that the better ones had their
chance); then ``prune``. A stage that waits for another source's read
(``settle_after``) settles right after that read instead. A stage's failure in any step is counted as
``scan_failed`` under its first source and the other stages go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..catalogue import Source
from .books import Books, Listing, ScanResult


@dataclass(slots=True)
class Scan:
    """One scan, as the stages see it."""

    t0: float  # when it started (the backlog of what it finds dates from here)
    listing: Listing | None  # the client directories' walk; None when it failed
    result: ScanResult


class Stage:
    """One factory source. Subclasses set the class attributes and override what they do."""

    # The catalogue's sources this stage reads; the first labels its health and failures.
    sources: ClassVar[tuple[Source, ...]]
    # Scan order, and which source's count of a pilot wins (lower first; docs/accounting.md).
    precedence: ClassVar[int]
    # Top-level keys this stage owns in the checkpoint file.
    checkpoint_keys: ClassVar[tuple[str, ...]] = ()
    # Reads the walk of the client directories (``Scan.listing``), made once per scan
    # before the first stage that sets this.
    reads_client_dirs: ClassVar[bool] = False
    # Settle right after this source's read, when that read is what it waits for;
    # None: once every stage has read (the fallbacks).
    settle_after: ClassVar[Source | None] = None
    # Save the checkpoint right after its read (it counts pilots or holds lines);
    # the others are saved with the scan's end.
    save_after_read: ClassVar[bool] = False

    def __init__(self, books: Books) -> None:
        self.books = books

    @property
    def source(self) -> Source:
        return self.sources[0]

    def discover(self, scan: Scan) -> Sequence[Any] | None:
        """The files this scan reads (None: nothing can be read this scan)."""
        raise NotImplementedError

    def read(self, scan: Scan, found: Sequence[Any]) -> None:
        """Read what is new in ``found`` since the cursors and account or hold it."""
        raise NotImplementedError

    def name_clients(self, scan: Scan) -> None:
        """Right after the listing, when some listed user has no frontend name: find the names
        in what this source will read, so that no stage reads a pilot before its name is known."""

    def settle(self, scan: Scan) -> None:
        """After every stage has read: count what only this source can (its fallbacks)."""

    def prune(self, listing: Listing) -> None:
        """Forget what it holds for pilots whose files are gone."""

    def state(self) -> dict[str, Any]:
        """Its part of the checkpoint: exactly ``checkpoint_keys``."""
        return {}

    def restore(self, data: dict[str, Any]) -> None:
        """Take back its part of a loaded checkpoint."""
