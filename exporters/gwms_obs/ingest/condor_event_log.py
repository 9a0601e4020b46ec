"""HTCondor's job event logs of the factory's schedd (``condor_activity_*_<client>.log``).

Last of the pilot sources in precedence: a pilot that ended and is not
counted waits in the books' holds (:class:`~gwms_obs.ingest.resolve.Holds`;
checkpointed as ``waiting``, with the open timelines). It is
counted from here, as ``lost``/``unknown``, only when neither its .out nor a
completed_jobs line could count it ``lost_after_seconds`` after its end.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from typing import Any

from ..accounting.pilot import UNKNOWN_LABEL, from_event_log
from ..catalogue import HoldClass, Source
from ..model import PilotTimes
from ..sources import condor_event_log, files, layout
from ..sources.hold_reasons import classify
from ..tracing.redact import mask_text
from . import checkpoint
from .books import Books, Listing, PilotFacts, key_str
from .checkpoint import Op
from .outlets import HoldCount, Outlets
from .stage import Scan, Stage

log = logging.getLogger("gwms_obs.holds")

# Parse-error reason of a pilot forgotten by the timeline before its end.
EXPIRED = "pilot_expired"
# A hold's reason in a log line: secrets masked (tracing/redact.py), control characters out, this long at most.
REASON_CHARS = 200
# An entry's newest hold is logged when its class changes, else at most this often.
LOG_EVERY = 600.0
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def example(reason: str | None) -> str:
    """A hold's reason as a log line may carry it: redacted, one line, bounded."""
    text = _CONTROL.sub(" ", mask_text((reason or "")[: 4 * REASON_CHARS]))
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def _dropped(b: Books, t: PilotTimes, path: str, why: str) -> None:
    """A pilot the timeline gave up on before its end: never silent (counted, logged)."""
    b.errors.record(Source.CONDOR_EVENT_LOG, EXPIRED, path, None, f"job {t.cluster}.{t.proc}: {why}; not counted")


class CondorEventLogStage(Stage):
    sources = (Source.CONDOR_EVENT_LOG,)
    precedence = 30
    checkpoint_keys = ("waiting", "timeline")

    def __init__(self, books: Books, outlets: Outlets) -> None:
        super().__init__(books, outlets)
        self.timeline = condor_event_log.PilotTimeline()
        self.holds = books.holds  # its pilots ended, not counted (yet) are books.holds.ends
        self._users: dict[condor_event_log.LogKey, str] = {}  # each log's factory-side user (its client)
        self._logged: dict[str, tuple[str, float]] = {}  # entry -> (class, when) of its hold last logged
        # The timeline's open pilots and ended logs as the last checkpoint saved them (None: not saved yet).
        self._marks: tuple[checkpoint.Marks, checkpoint.Marks] | None = None

    def discover(self, scan: Scan) -> Sequence[layout.EventLogFile]:
        return scan.listing.logs if scan.listing is not None else []

    def read(self, scan: Scan, found: Sequence[layout.EventLogFile]) -> None:
        b = self.books
        b.health.files[Source.CONDOR_EVENT_LOG] = len(found)
        b.health.backlog.setdefault(Source.CONDOR_EVENT_LOG, scan.t0)
        self._users = {condor_event_log.log_of(f.path): f.username for f in found}  # the logs listed now
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
        self._held_now()
        b.health.backlog.pop(Source.CONDOR_EVENT_LOG, None)

    def _pool(self, log_key: condor_event_log.LogKey) -> tuple[str, str, str]:
        """(entry, client, site) of a log: the client is its user's frontend name, as accounting names it."""
        entry, client, _ = log_key
        user = self._users.get(log_key)
        name = (self.books.names.of(user) or f"user_{user}") if user is not None else client
        e = entry or UNKNOWN_LABEL
        d = self.books.defaults.get(e)
        return e, name or UNKNOWN_LABEL, (d.site if d is not None and d.site else UNKNOWN_LABEL)

    def _held_now(self) -> None:
        """The glideins held now, by their newest hold's class, from the open timelines."""
        now: dict[tuple[str, str, str, str], int] = {}
        for log_key, h, p in self.timeline.held_now():
            cls = classify(h.code, h.subcode, h.reason) if h is not None else classify(None, None, p.held_reason)
            k = (*self._pool(log_key), cls.value)
            now[k] = now.get(k, 0) + 1
        with self.books.lock:
            self.books.ledger.set_held_now(now)

    def _count(self, f: layout.EventLogFile) -> None:
        """Count what the last feed saw besides ends: holds begun and ended, the CE down or up."""
        b = self.books
        if submits := self.timeline.drain_submits():  # glideins the schedd accepted (000), per pool
            pools: dict[tuple[str, str, str], int] = {}
            for log_key in submits:
                pool = self._pool(log_key)
                pools[pool] = pools.get(pool, 0) + 1
            with b.lock:
                for pool, n in pools.items():
                    b.ledger.add_submit_events(*pool, n)
        begun, ended, grid = self.timeline.drain()
        if not (begun or ended or grid):
            return
        counted: list[HoldCount] = []
        with b.lock:
            for log_key, e in begun:
                cls = classify(e.reason_code, e.reason_subcode, e.reason)
                entry, client, site = self._pool(log_key)
                b.ledger.add_hold(entry, client, site, cls.value)
                self._note(entry, client, cls, e, f.path)
                counted.append(HoldCount(entry, site, cls.value, e.time))
            for log_key, seconds in ended:
                b.ledger.add_held_seconds(*self._pool(log_key), seconds)
            for log_key, code, t in grid:
                entry, _, site = self._pool(log_key)
                b.ledger.grid_resource(entry, site, code == condor_event_log.GRID_RESOURCE_DOWN, t)
        if self.outlets.holds is not None:  # outside the lock, which /metrics waits for
            for h in counted:
                self.outlets.holds(h)

    def _note(self, entry: str, client: str, cls: HoldClass, e: condor_event_log.CondorEvent, path: str) -> None:
        """Log an entry's newest hold (its reason never becomes a label): when its class changes, else
        every LOG_EVERY seconds of the log's time at most, so a CE refusing every glidein logs a line, not
        a line a glidein."""
        last = self._logged.get(entry)
        if last is not None and last[0] == cls.value and e.time - last[1] < LOG_EVERY:
            return
        self._logged[entry] = (cls.value, e.time)
        codes = f"{e.reason_code}/{e.reason_subcode}" if e.reason_code is not None else "none"
        # INFO: the factory's trouble, not the exporter's (the alert is its warning); a one-shot
        # command at --log-level WARNING prints only its own problems.
        log.info(
            "hold at entry %s (client %s, class %s, code/subcode %s, job %d.%d, %s): %s",
            entry,
            client,
            cls.value,
            codes,
            e.cluster,
            e.proc,
            path,
            example(e.reason),
        )

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
        done = self.timeline.feed(events, f.path)
        self._count(f)
        for t in done:
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
                    self.count(acc, scan, Source.CONDOR_EVENT_LOG, PilotFacts(Source.CONDOR_EVENT_LOG, times=t))

    def prune(self, listing: Listing) -> None:
        """Forget the ended pilots of the event logs gone from the listing (deleted or rotated away)."""
        n = self.timeline.forget_ended(condor_event_log.log_of(f.path) for f in listing.logs)
        if n:
            log.debug("forgot %d ended pilots of event logs no longer on disk", n)

    def state(self) -> dict[str, Any]:
        return {"waiting": self._waiting(), "timeline": self.timeline.to_json()}

    def _waiting(self) -> dict[str, Any]:
        return {k: dataclasses.asdict(t) for k, t in self.holds.ends.items()}

    def changes(self) -> list[Op] | None:
        """The waiting ends whole (those of pilots lost, an hour's at most), and of the timeline the rows
        that changed: at 300,000 pilots its whole was ~17 MB and ~1 s of CPU, each event of an open
        pilot changing one row."""
        if self._marks is None:
            return None
        tl, (opened, ended) = self.timeline, self._marks
        return [
            ("whole", ["waiting"], self._waiting()),
            ("rows", ["timeline", "open"], checkpoint.rows_changed(opened, tl.open_map, id, tl.open_row, 4)),
            (
                "rows",
                ["timeline", "ended_by_log"],
                checkpoint.rows_changed(ended, tl.ended_map, tl.ended_mark, tl.ended_row, 3),
            ),
            ("whole", ["timeline", "newest"], tl.newest_rows()),
        ]

    def saved(self) -> None:
        tl = self.timeline
        self._marks = (
            checkpoint.mark_rows(tl.open_map.items(), id),
            checkpoint.mark_rows(tl.ended_map.items(), tl.ended_mark),
        )

    def restore(self, data: dict[str, Any]) -> None:
        self.holds.ends = {str(k): PilotTimes(**v) for k, v in data.get("waiting", {}).items()}
        self.timeline = condor_event_log.PilotTimeline.from_json(data.get("timeline", {}))
        self._marks = None
