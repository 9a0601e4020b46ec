"""From factory files to the accounting: one stage per source, run in precedence order.

Each module here implements :class:`~gwms_obs.ingest.stage.Stage` for one
kind of factory file, reading it with its parser from ``gwms_obs.sources``
and counting pilots into :class:`~gwms_obs.ingest.books.Books`.
:class:`gwms_obs.pipeline.Ingest` runs every stage in :data:`STAGES`;
docs/architecture.md says how to add one.
"""

from __future__ import annotations

from .completed_jobs import CompletedJobsStage
from .condor_event_log import CondorEventLogStage
from .descript import DescriptStage
from .entry_status import EntryStatusStage
from .factory_log import FactoryLogStage
from .frontend_status import FrontendStatusStage
from .glidein_files import GlideinFilesStage
from .stage import Stage

# In precedence order: entry descriptions first (every other stage reads them),
# then the pilot sources from the best (the pilot's own .out) to the last resort, then
# the VO frontend's status (a frontend host's).
STAGES: tuple[type[Stage], ...] = tuple(
    sorted(
        (
            DescriptStage,
            GlideinFilesStage,
            CompletedJobsStage,
            CondorEventLogStage,
            EntryStatusStage,
            FrontendStatusStage,
            FactoryLogStage,
        ),
        key=lambda s: s.precedence,
    )
)

__all__ = ["STAGES", "Stage"]
