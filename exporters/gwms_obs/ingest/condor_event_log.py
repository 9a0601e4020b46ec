"""HTCondor's job event logs of the factory's schedd (``condor_activity_*_<client>.log``).

Last of the pilot sources in precedence: a pilot that ended and is not
counted waits in the books' holds (:class:`~gwms_obs.ingest.resolve.Holds`;
checkpointed as ``waiting``, with the open timelines). It is
counted from here, as ``lost``/``unknown``, only when neither its .out nor a
completed_jobs line could count it ``lost_after_seconds`` after its end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..accounting.pilot import from_event_log
from ..catalogue import Source
from ..model import PilotTimes
from ..sources import condor_event_log, files, layout
from .books import Books, PilotFacts, key_str
from .stage import Scan, Stage

# Parse-error reason of a pilot forgotten by the timeline before its end.
EXPIRED = "pilot_expired"


def _dropped(b: Books, t: PilotTimes, path: str, why: str) -> None:
    """A pilot the timeline gave up on before its end: never silent (counted, logged)."""
    b.errors.record(Source.CONDOR_EVENT_LOG, EXPIRED, path, None, f"job {t.cluster}.{t.proc}: {why}; not counted")


class CondorEventLogStage(Stage):
    sources = (Source.CONDOR_EVENT_LOG,)
    precedence = 30
    checkpoint_keys = ("waiting", "timeline")

    def __init__(self, books: Books) -> None:
        super().__init__(books)
        self.timeline = condor_event_log.PilotTimeline()
        self.holds = books.holds  # its pilots ended, not counted (yet) are books.holds.ends

    def discover(self, scan: Scan) -> Sequence[layout.EventLogFile]:
        return scan.listing.logs if scan.listing is not None else []

    def read(self, scan: Scan, found: Sequence[layout.EventLogFile]) -> None:
        b = self.books
        b.health.files[Source.CONDOR_EVENT_LOG] = len(found)
        b.health.backlog.setdefault(Source.CONDOR_EVENT_LOG, scan.t0)
        for f in found:
            try:
                b.health.bytes_read[Source.CONDOR_EVENT_LOG] += self._follow(f)
            except OSError as e:  # listed every scan: counted once
                b.once.record(Source.CONDOR_EVENT_LOG, files.reason_of(e), f.path, None, files.describe(e))
        # Pilots silent for weeks of their log's own time (held forever, or their end deleted
        # with an old file) are dropped, not guessed; counted and logged.
        paths = {condor_event_log.log_of(f.path): f.path for f in found}
        days = self.timeline.max_age / 86400
        for t, (entry, client, day) in self.timeline.expire():
            path = paths.get((entry, client, day)) or f"entry_{entry}/condor_activity_{day}_{client}.log (gone)"
            _dropped(b, t, path, f"no event for {days:g} days of its log")
        b.health.backlog.pop(Source.CONDOR_EVENT_LOG, None)

    def _follow(self, f: layout.EventLogFile) -> int:
        """Read what is new in one log since its cursor; the bytes taken."""
        b = self.books
        with b.follower.open(f.path, root=b.cfg.factory_dir) as log:
            for buf in log:
                events, used = condor_event_log.parse_buffer(buf, f.path, log.offset, b.errors)
                if events:
                    self._hold(events, f)
                log.advance(used)  # past the events held: a crash before reads them again
        return log.bytes_read

    def _hold(self, events: list[condor_event_log.CondorEvent], f: layout.EventLogFile) -> None:
        """Feed the timelines; keep the pilots that ended and are not counted yet."""
        b = self.books
        b.health.records[Source.CONDOR_EVENT_LOG] += len(events)
        for t in self.timeline.feed(events, f.path):
            k = key_str((f.entry, t.cluster, t.proc))
            if t.ended is None:  # beyond the timeline's bound, unfinished
                _dropped(b, t, f.path, f"more than {self.timeline.max_pilots} pilots open")
            elif k not in b.counted.seen:
                t.client = f.username  # the factory-side user; named at accounting time
                self.holds.ends[k] = t

    def settle(self, scan: Scan) -> None:
        """Count, as lost, the pilots that ended long ago and that no better source can count."""
        listing = scan.listing
        if listing is None:
            return  # nothing shows which .out files exist: no fallback may count a pilot
        b = self.books
        now = b.clock()
        holds = self.holds
        for k, t in list(holds.ends.items()):
            if k in b.counted.seen:
                with b.lock:
                    del holds.ends[k]
                continue
            if holds.winner(k, b.out_waits(k, listing, recheck=False)) is not Source.CONDOR_EVENT_LOG:
                continue  # its .out, or its line (waiting for the .out), counts it
            if t.ended is not None and now - t.ended >= b.cfg.lost_after_seconds:
                with b.lock:
                    del holds.ends[k]
                user = t.client or ""
                t.client = b.names.of(user) or f"user_{user}"
                acc = from_event_log(t, b.defaults.get(t.entry or ""))
                if acc is not None:
                    b.account(acc, scan.result, Source.CONDOR_EVENT_LOG, PilotFacts(Source.CONDOR_EVENT_LOG, times=t))

    def state(self) -> dict[str, Any]:
        return {
            "waiting": {k: dataclasses.asdict(t) for k, t in self.holds.ends.items()},
            "timeline": self.timeline.to_json(),
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.holds.ends = {str(k): PilotTimes(**v) for k, v in data.get("waiting", {}).items()}
        self.timeline = condor_event_log.PilotTimeline.from_json(data.get("timeline", {}))
