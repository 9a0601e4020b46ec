"""Which source counts a pilot: the precedence rule, in one place.

The fallback sources hold what they read of a pilot not counted yet here (a
completed_jobs line, an event-log end), and :meth:`Holds.winner` is the one
decision of which source counts it now; the stages ask it and never look at
each other's holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalogue import Source
from ..model import CompletedJob, PilotTimes


@dataclass(slots=True)
class Holds:
    """What the fallback sources hold for pilots not counted yet, by pilot key.

    Both are checkpointed (``pending`` and ``waiting``, by the stages that fill them).
    """

    lines: dict[str, CompletedJob] = field(default_factory=dict)  # completed_jobs lines waiting for their .out
    ends: dict[str, PilotTimes] = field(default_factory=dict)  # event-log ends of pilots no better source counted

    def winner(self, ks: str, out_waits: bool) -> Source | None:
        """The source that counts the pilot ``ks`` (docs/accounting.md, "Which source wins").

        1. its .out, whenever it is there to be read (``out_waits``: in the listing,
           not proved unusable): the others wait for it;
        2. else its completed_jobs line, when one is held (it takes the event log's
           end, :meth:`end_of`, a better end than its own);
        3. else the event log, when it holds the pilot's end.

        None: no source holds it. When the winner may count it (a settled .out, a
        line whose duration says something, an end older than ``lost_after_seconds``)
        is its stage's to say.
        """
        if out_waits:
            return Source.GLIDEIN_OUT
        if ks in self.lines:
            return Source.COMPLETED_JOBS
        if ks in self.ends:
            return Source.CONDOR_EVENT_LOG
        return None

    def end_of(self, ks: str) -> PilotTimes | None:
        """The event log's times of the pilot, when it holds them (its queue time, its end)."""
        return self.ends.get(ks)

    def counted(self, ks: str) -> None:
        """The pilot is counted: no source holds it any longer."""
        self.lines.pop(ks, None)
        self.ends.pop(ks, None)

    def of(self, source: Source) -> dict[str, CompletedJob] | dict[str, PilotTimes]:
        """What ``source`` holds (empty for a source that holds nothing)."""
        if source is Source.COMPLETED_JOBS:
            return self.lines
        if source is Source.CONDOR_EVENT_LOG:
            return self.ends
        return {}
