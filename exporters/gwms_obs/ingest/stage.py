"""The contract every factory source implements to be read by a scan.

A stage owns one kind of factory file end to end: it finds its files
(``discover``), reads what is new since its cursors (``read``: the format
itself is parsed by its reader in ``gwms_obs.sources``), holds what waits for
a better source (:class:`~gwms_obs.ingest.resolve.Holds`), counts what only it
can once the better sources had their chance (``settle``), and saves its own
part of the checkpoint. It counts a pilot with :meth:`Stage.count`: into the
books (``Books.account``, the ledger), then to the outlets (a report, its
trace). When each of these runs is written once, in
:meth:`gwms_obs.pipeline.Ingest.scan` (its module's docstring says the order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..accounting.pilot import PilotAccount
from ..catalogue import Source
from .books import Books, Listing, PilotFacts, ScanResult
from .checkpoint import Op
from .outlets import Outlets


@dataclass(slots=True)
class Scan:
    """One scan, as the stages see it."""

    t0: float  # when it started (the backlog of what it finds dates from here)
    listing: Listing | None  # the client directories' walk; None when it failed
    result: ScanResult
    # Writes the checkpoint now (a long read saves every minute): Ingest.save_checkpoint; a stage
    # driven by hand (a test, a benchmark) has none to write.
    checkpoint: Callable[[], None] = lambda: None


class Stage:
    """One factory source. Subclasses set the class attributes and override what they do."""

    # The catalogue's sources this stage reads; the first labels its health and failures.
    sources: ClassVar[tuple[Source, ...]]
    # Which source's count of a pilot wins (lower first; docs/accounting.md), the order of ingest.STAGES.
    precedence: ClassVar[int]
    # Top-level keys this stage owns in the checkpoint file.
    checkpoint_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, books: Books, outlets: Outlets) -> None:
        self.books = books
        self.outlets = outlets

    def count(self, acc: PilotAccount, scan: Scan, source: Source, facts: PilotFacts | None = None) -> None:
        """Count a pilot this stage read: into the books (the ledger), then to the outlets."""
        times = self.books.account(acc, scan.result, source, facts.times if facts is not None else None)
        self.outlets.counted(acc, source, facts, times)

    @property
    def source(self) -> Source:
        return self.sources[0]

    def discover(self, scan: Scan) -> Sequence[Any] | None:
        """The files this scan reads (None: nothing can be read this scan)."""
        raise NotImplementedError

    def read(self, scan: Scan, found: Sequence[Any]) -> None:
        """Read what is new in ``found`` since the cursors and account or hold it."""
        raise NotImplementedError

    def settle(self, scan: Scan) -> None:
        """Once the better sources have read: count what only this source can (its fallbacks)."""

    def prune(self, listing: Listing) -> None:
        """Forget what it holds for pilots whose files are gone."""

    def state(self) -> dict[str, Any]:
        """Its part of the checkpoint: exactly ``checkpoint_keys``."""
        return {}

    def changes(self) -> list[Op] | None:
        """Its part of a checkpoint journal record (ingest/checkpoint.py): what changed since the
        last checkpoint. Here its state whole; a stage whose state is large says what changed.
        None: it cannot say, the next checkpoint must be a base."""
        return [("whole", [k], v) for k, v in self.state().items()]

    def saved(self) -> None:
        """The checkpoint on disk (a base or a journal record) holds its state as it is now."""

    def restore(self, data: dict[str, Any]) -> None:
        """Take back its part of a loaded checkpoint."""
