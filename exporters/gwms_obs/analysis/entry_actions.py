"""What the factory operator does about entries whose glideins do not run (issue 33 item 6).

From the window's holds by class, time in queue and the factory's own entry logs
(outputs/entry_health.py, filled by the same scan as the rest of the analysis):

* **held**: the entry's holds are at least ``HELD_SHARE`` of its glideins and at least
  ``HELD_MIN``; glideins = those the factory's entry log says it submitted in the window,
  else (no entry log) the holds plus the pilots counted. The action names the class most
  held and what to check for it (``ADVICE``).
* **submit_failing**: condor_submit failed ``SUBMIT_FAILURES`` times or more at the entry.
* **queue_slow**: as GwmsEntryQueueSlow, the entry against its own past (:func:`own_queue`):
  at each hour's end in the window, the median time in queue of the pilots that ended in
  the hour (back to the ``QUEUE_MIN_PILOTS`` latest when the hour holds fewer) is
  ``QUEUE_RATIO`` times the median of the entry's pilots of the ``QUEUE_BASELINE_DAYS``
  before them and at least ``QUEUE_MIN_SECONDS``. The action is the latest hour it held.
  Where the window holds fewer than ``QUEUE_MIN_PILOTS`` of those earlier pilots, it has no
  past of the entry to compare with: the entry's median over the window against the fleet's
  (the median of the entries' medians, from ``MIN_ENTRIES`` entries with ``QUEUE_MIN_PILOTS``
  pilots each), and the action says so.

The thresholds are the alerts' (catalogue.py's, which dashboards/gen/config.py ``Thresholds``
takes as defaults), so analyze and the red light flag the same entries. Failing actions (held,
submit_failing) come first, most glideins lost first; then queue_slow, slowest first.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, replace
from typing import Final

from .. import catalogue as K
from ..catalogue import HoldClass
from ..outputs.entry_health import EntryHealth, EntryRow, QueueTimes, quantile
from .actions import MIN_ENTRIES

# The alerts' thresholds, from where dashboards/gen/config.py takes them too.
HELD_SHARE: Final = K.ENTRY_HELD_SHARE
HELD_MIN: Final = K.ENTRY_HELD_MIN
SUBMIT_FAILURES: Final = K.ENTRY_SUBMIT_FAILURES
QUEUE_RATIO: Final = K.QUEUE_SLOW_RATIO
QUEUE_MIN_SECONDS: Final = K.QUEUE_SLOW_SECONDS
QUEUE_MIN_PILOTS: Final = K.QUEUE_SLOW_PILOTS
QUEUE_WINDOW: Final = K.ALERT_WINDOW_HOURS * 3600.0  # the alert's window, seconds
QUEUE_BASELINE: Final = K.QUEUE_BASELINE_DAYS * 86400.0

HELD: Final = "held"
SUBMIT_FAILING: Final = "submit_failing"
QUEUE_SLOW: Final = "queue_slow"

# What to check first for each hold class (catalogue.HoldClass; sources/hold_reasons.py says
# which HTCondor codes and texts make each).
ADVICE: Final[dict[str, str]] = {
    HoldClass.AUTH_FAILED: "check the factory's credential for the CE (the token or proxy the entry sends, "
    "and how the CE maps it)",
    HoldClass.TOKEN_EXPIRED: "renew the token the entry sends (its lifetime, the factory's token refresh)",
    HoldClass.PROXY_EXPIRED: "renew the X.509 proxy the entry sends (its lifetime, the factory's proxy renewal)",
    HoldClass.CE_REFUSED: "ask the site about the CE's submit requirements and job limits; check the entry's "
    "attributes",
    HoldClass.CE_UNREACHABLE: "check that the factory reaches the CE's host and port (network, firewall, "
    "the CE's service)",
    HoldClass.PERIODIC_HOLD: "read the entry's and the CE's periodic hold expressions (the glidein's limits)",
    HoldClass.TRANSFER_FAILED: "check the glidein's sandbox transfer (the factory's disk, the CE's staging)",
    HoldClass.USER: "someone held them by hand (condor_hold): ask the factory's operators",
    HoldClass.OTHER: "read the hold reason the exporter logs for the entry; if it is transient, list its code "
    "in the entry's RecoverableExitcodes",
}


@dataclass(frozen=True, slots=True)
class EntryAction:
    rank: int
    entry: str
    site: str
    reason: str  # HELD, SUBMIT_FAILING or QUEUE_SLOW: the red light's reasons
    glideins: int  # held, or condor_submit failures; pilots measured for queue_slow
    share: float  # held share of the glideins; queue_slow: the ratio to the fleet median
    hold_class: str  # held: the class most held
    text: str


def _held(e: str, site: str, holds: dict[str, int], submitted: int, pilots: int) -> EntryAction | None:
    n = sum(holds.values())
    glideins = submitted if submitted > 0 else n + pilots
    share = min(1.0, n / glideins) if glideins else 0.0
    if n < HELD_MIN or share < HELD_SHARE:
        return None
    top = next(iter(holds))
    text = (
        f"entry {e}: {100 * share:.0f} % of glideins held ({n:,} holds of {glideins:,}), "
        f"{top} ({100 * holds[top] / n:.0f} % of holds): {ADVICE.get(top, ADVICE[HoldClass.OTHER])}"
    )
    return EntryAction(0, e, site, HELD, n, share, top, text)


@dataclass(frozen=True, slots=True)
class OwnQueue:
    """An entry's latest pilots' time in queue against its own earlier pilots' (:func:`own_queue`)."""

    since: float  # when the first of ``recent`` ended
    at: float  # the end of the hour judged
    recent: QueueTimes  # the hour's pilots (at least QUEUE_MIN_PILOTS)
    baseline: float  # the median of the entry's pilots of the QUEUE_BASELINE before them
    earlier: int  # how many those are
    slow: bool

    @property
    def ratio(self) -> float:
        return self.recent.p50 / self.baseline if self.baseline > 0 else float("inf")


def own_queue(at: list[float], seconds: list[float]) -> OwnQueue | None:
    """GwmsEntryQueueSlow's judgement of an entry over the window, from its pilots' times in queue
    (``seconds``) and when each was observed (``at``: its end, when the exporter counts it).

    At each hour's end, from the latest observation back, the pilots of the hour before (back to
    the QUEUE_MIN_PILOTS latest when it holds fewer: an entry with fewer pilots is judged on a
    longer stretch than the alert's window, where the alert would never fire) against the median
    of the entry's pilots of the QUEUE_BASELINE before them. The alert's baseline is the median of
    the hourly medians; an hour of a sparse entry holds a pilot or none, so the pilots' median
    stands for it. Returns the latest hour judged slow, else the latest hour judged; None when no
    hour has QUEUE_MIN_PILOTS earlier pilots (the window does not hold the entry's past).
    """
    order = sorted(range(len(at)), key=at.__getitem__)
    ts, vs = [at[i] for i in order], [seconds[i] for i in order]
    if len(ts) < 2 * QUEUE_MIN_PILOTS:
        return None
    steps = int((ts[-1] - ts[0]) // QUEUE_WINDOW)
    base: list[float] = []  # the sorted times of ts[lo:hi], the baseline's pilots
    lo = hi = 0
    slow: OwnQueue | None = None
    latest: OwnQueue | None = None
    for k in range(steps, -1, -1):  # oldest hour first: the baseline slides forward
        end = ts[-1] - k * QUEUE_WINDOW
        i_end = bisect_right(ts, end)
        i_start = min(bisect_right(ts, end - QUEUE_WINDOW), i_end - QUEUE_MIN_PILOTS)
        if i_start < QUEUE_MIN_PILOTS:
            continue
        while hi < i_start:
            insort(base, vs[hi])
            hi += 1
        while lo < hi and ts[lo] < ts[i_start] - QUEUE_BASELINE:
            del base[bisect_left(base, vs[lo])]
            lo += 1
        if len(base) < QUEUE_MIN_PILOTS:
            continue
        recent = QueueTimes.of(vs[i_start:i_end])
        ref = quantile(base, 0.5)
        is_slow = recent.p50 >= QUEUE_MIN_SECONDS and recent.p50 >= QUEUE_RATIO * ref
        latest = OwnQueue(ts[i_start], end, recent, ref, len(base), is_slow)
        if is_slow:
            slow = latest
    return slow or latest


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


QUEUE_ADVICE: Final = "ask the site about the CE's queue (its share, its limits) or lower the entry's idle glideins"


def entry_actions(health: EntryHealth, pilots: dict[str, int]) -> list[EntryAction]:
    """The actions for the window in ``health``; ``pilots``: entry -> pilots counted in the window."""
    found: list[EntryAction] = []
    logged = {r["entry"]: r for r in health.factory_log_rows()}
    rows = health.rows()
    for r in rows:
        a = _held(r.entry, r.site, r.holds, logged.get(r.entry, {}).get("submitted", 0), pilots.get(r.entry, 0))
        if a is not None:
            found.append(a)
    for e, lr in logged.items():
        n = lr["submit_failures"]
        if n >= SUBMIT_FAILURES:
            sub = lr["submitted"]
            text = (
                f"entry {e}: condor_submit failed {n:,} times ({sub:,} glideins submitted): read the entry's "
                "log for condor_submit's error (the schedd, the credential, the entry's submit attributes)"
            )
            found.append(EntryAction(0, e, lr["site"], SUBMIT_FAILING, n, 0.0, "", text))
    found += _queue_slow(health, rows)
    order = {HELD: 0, SUBMIT_FAILING: 0, QUEUE_SLOW: 1}
    found.sort(key=lambda a: (order[a.reason], -a.glideins if a.reason != QUEUE_SLOW else -a.share, a.entry))
    return [replace(a, rank=i + 1) for i, a in enumerate(found)]


def _queue_slow(health: EntryHealth, rows: list[EntryRow]) -> list[EntryAction]:
    """queue_slow: each entry against its own past where the window holds it, else against the fleet."""
    found: list[EntryAction] = []
    without: list[tuple[EntryRow, int]] = []  # no past of its own in the window: (row, its earlier pilots)
    for r in rows:
        if r.queue.count < QUEUE_MIN_PILOTS:
            continue
        own = own_queue(health.queue_at.get(r.entry, []), health.queue.get(r.entry, []))
        if own is None:
            without.append((r, max(0, r.queue.count - QUEUE_MIN_PILOTS)))
        elif own.slow:
            q = own.recent
            text = (
                f"entry {r.entry}: glideins wait {q.p50 / 3600:,.1f} h in queue (median of the {q.count:,} that "
                f"ended from {_utc(own.since)} to {_utc(own.at)}, p90 {q.p90 / 3600:,.1f} h), {own.ratio:,.1f}× its "
                f"own median of the {own.earlier:,} before them: {QUEUE_ADVICE}"
            )
            found.append(EntryAction(0, r.entry, r.site, QUEUE_SLOW, q.count, own.ratio, "", text))
    measured = [r for r in rows if r.queue.count >= QUEUE_MIN_PILOTS]
    if without and len(measured) >= MIN_ENTRIES:
        fleet = quantile(sorted(r.queue.p50 for r in measured), 0.5)
        for r, earlier in without:
            ratio = r.queue.p50 / fleet if fleet > 0 else float("inf")
            if ratio >= QUEUE_RATIO and r.queue.p50 >= QUEUE_MIN_SECONDS:
                text = (
                    f"entry {r.entry}: glideins wait {r.queue.p50 / 3600:,.1f} h in queue (median, p90 "
                    f"{r.queue.p90 / 3600:,.1f} h), {ratio:,.1f}× the fleet median (the window holds {earlier:,} "
                    f"of its pilots before its latest {QUEUE_MIN_PILOTS}, too few to compare it with its own "
                    f"past): {QUEUE_ADVICE}"
                )
                found.append(EntryAction(0, r.entry, r.site, QUEUE_SLOW, r.queue.count, ratio, "", text))
    return found
