"""promtool unit tests of the factory operator's alerts and red-light reasons (issue 33): glideins
mostly held, the CE unreachable, time in queue far above the entry's own last week, submissions
failing.

Each alert fires where it must, stays quiet on a healthy entry, just below each threshold and
during the entry's downtime; its red-light problem (health.py) is checked in the same group, so
the mutation tests (tests/test_rules.py) find each threshold tested on both. Numbers are literals,
as in rule_tests.py.
"""

from __future__ import annotations

from typing import Any

from gwms_obs import catalogue

from .health_tests import problems
from .rule_tests import EXP, group, pool, quiet, s, site_fires

G, HG, D = catalogue.ENTRY_GLIDEINS.name, catalogue.HELD_GLIDEINS.name, catalogue.ENTRY_DOWNTIME.name
SINCE, DOWN = catalogue.ENTRY_CE_DOWN_SINCE.name, catalogue.ENTRY_CE_DOWN.name
Q = catalogue.PILOT_QUEUE_TIME
F = catalogue.SUBMIT_FAILURES.name


def _entry(name: str, entry: str, site: str, values: str) -> dict[str, str]:
    return s(name, f'entry="{entry}",site="{site}",{EXP}', values)


def _held() -> dict[str, Any]:
    name = "GwmsEntryMostlyHeld"

    def glideins(entry: str, site: str, held: int, running: int) -> list[dict[str, str]]:
        return [
            s(G, pool(entry, site, extra='state="held"'), f"{held}x40"),
            s(G, pool(entry, site, extra='state="running"'), f"{running}x40"),
        ]

    def by_class(entry: str, site: str, cls: str, n: int) -> dict[str, str]:
        return s(HG, pool(entry, site, extra=f'class="{cls}"'), f"{n}x40")

    series = [
        # 30 of 40 held, most for auth_failed: fires, naming it.
        *glideins("E_bad", "S_bad", 30, 10),
        by_class("E_bad", "S_bad", "auth_failed", 25),
        by_class("E_bad", "S_bad", "other", 5),
        # 10 of 21 held (48%): quiet (threshold 50%).
        *glideins("E_ratio", "S_ratio", 10, 11),
        by_class("E_ratio", "S_ratio", "ce_refused", 10),
        # All held, but only 4: quiet (at least 5).
        *glideins("E_few", "S_few", 4, 0),
        by_class("E_few", "S_few", "other", 4),
        # All 30 held, but the entry is in downtime: quiet.
        *glideins("E_dt", "S_dt", 30, 0),
        by_class("E_dt", "S_dt", "auth_failed", 30),
        _entry(D, "E_dt", "S_dt", "1x40"),
        # Healthy.
        *glideins("E_ok", "S_ok", 0, 50),
        _entry(D, "E_ok", "S_ok", "0x40"),
    ]
    return group(
        series,
        quiet("10m", name),  # for: 15m
        site_fires(
            "20m",
            name,
            "E_bad",
            "S_bad",
            "Glideins of E_bad at S_bad are mostly held (auth_failed)",
            "75% of the glideins of entry E_bad in the factory queue are held; most of those held now were"
            " held for auth_failed. The reason as the CE wrote it is in the exporter's log (redacted):"
            " 'hold at entry E_bad'.",
            **{"class": "auth_failed"},
        ),
        promql_expr_test=[problems("5m", "held", ("E_bad", "S_bad", 2))],
    )


def _ce_unreachable() -> dict[str, Any]:
    name = "GwmsEntryCeUnreachable"
    series = [
        # Down since the start (time 0): 30 minutes at 30m, then for: 5m.
        _entry(SINCE, "E_down", "S_down", "0x60"),
        _entry(DOWN, "E_down", "S_down", "1x60"),
        # Down as long, in downtime: quiet.
        _entry(SINCE, "E_dt", "S_dt", "0x60"),
        _entry(DOWN, "E_dt", "S_dt", "1x60"),
        _entry(D, "E_dt", "S_dt", "1x60"),
        # Down since 20m: 25 minutes at 45m, quiet.
        _entry(SINCE, "E_late", "S_late", "_x20 1200x40"),
        _entry(DOWN, "E_late", "S_late", "0x19 1x40"),
        # Up.
        _entry(DOWN, "E_ok", "S_ok", "0x60"),
        _entry(D, "E_ok", "S_ok", "0x60"),
    ]
    return group(
        series,
        quiet("33m", name),  # pending since 31m
        site_fires(
            "45m",
            name,
            "E_down",
            "S_down",
            "The CE of E_down at S_down is unreachable",
            "HTCondor-G has found the CE of entry E_down down for 45m 0s (Detected Down Grid Resource, not back"
            " up since); its glideins wait in the factory queue.",
        ),
        promql_expr_test=[
            problems("29m", "ce_unreachable"),
            problems("45m", "ce_unreachable", ("E_down", "S_down", 2)),
        ],
    )


# Cumulative bucket counts per minute of gwms_pilot_queue_seconds, 10 pilots a minute: where their
# waits fall. Bounds 60, 300, 900, 1800, 3600, 7200, 14400, ... (catalogue._QUEUE_BUCKETS).
_FAST = {300.0: 10}  # all in (60, 300]: median 180 s
_NORMAL = {900.0: 10}  # all in (300, 900]: median 600 s
_HOUR = {3600.0: 10}  # all in (1800, 3600]: median 2,700 s
_SLOW = {14400.0: 10}  # all in (7200, 14400]: median 10,800 s
_BELOW_HOUR = {3600.0: 6, 7200.0: 4}  # median 1800 + 1800 x 5/6 = 3,300 s
NORMAL_MINUTES, SLOW_MINUTES = 240, 120


def _queue(entry: str, site: str, before: dict[float, int], after: dict[float, int], per: float = 1.0) -> list[Any]:
    """The entry's histogram: ``before`` a minute for NORMAL_MINUTES, then ``after`` (x ``per``)."""
    out = []
    bounds = (*Q.buckets, float("inf"))
    for le in bounds:
        a = per * sum(n for b, n in before.items() if b <= le)
        b = per * sum(n for x, n in after.items() if x <= le)
        head = f"0+{a:g}x{NORMAL_MINUTES}"
        tail = f"{a * NORMAL_MINUTES + b:g}+{b:g}x{SLOW_MINUTES - 1}"
        label = "+Inf" if le == float("inf") else repr(le)
        out.append(s(f"{Q.name}_bucket", pool(entry, site, extra=f'le="{label}"'), f"{head} {tail}"))
        if le == float("inf"):
            out.append(s(f"{Q.name}_count", pool(entry, site), f"{head} {tail}"))
    return out


def _queue_slow() -> dict[str, Any]:
    name = "GwmsEntryQueueSlow"
    series = [
        # 600 s for four hours, then 10,800 s: 18 times its week's median, fires.
        *_queue("E_slow", "S_slow", _NORMAL, _SLOW),
        # 2,700 s, then 10,800 s: exactly 4 times, quiet.
        *_queue("E_ratio", "S_ratio", _HOUR, _SLOW),
        # 180 s, then 3,300 s: 18 times, but under an hour, quiet.
        *_queue("E_short", "S_short", _FAST, _BELOW_HOUR),
        # As E_slow, but 9 pilots an hour: quiet (at least 10).
        *_queue("E_fewq", "S_fewq", _NORMAL, _SLOW, per=0.015),
        # As E_slow, in downtime: quiet.
        *_queue("E_qdt", "S_qdt", _NORMAL, _SLOW),
        _entry(D, "E_qdt", "S_qdt", "1x360"),
        # Healthy: 600 s all along.
        *_queue("E_qok", "S_qok", _NORMAL, _NORMAL),
    ]
    return group(
        series,
        quiet("230m", name),
        quiet("250m", name),  # a sixth of the window slow: its median is still 600 s
        site_fires(
            "330m",
            name,
            "E_slow",
            "S_slow",
            "Glideins wait long in the queue of E_slow at S_slow",
            "The glideins of entry E_slow that started in the last 1h waited 3h 0m 0s (median) from"
            " submission, over 4 times the entry's own median of the last 7d.",
        ),
        promql_expr_test=[problems("330m", "queue_slow", ("E_slow", "S_slow", 1))],
    )


def _submit_failing() -> dict[str, Any]:
    name = "GwmsEntrySubmitFailing"
    series = [
        # condor_submit refused every minute: 60 in the hour.
        _entry(F, "E_sub", "S_sub", "0+1x120"),
        _entry(D, "E_sub", "S_sub", "0x120"),
        # 2.5 an hour: quiet (at least 3).
        _entry(F, "E_two", "S_two", "0+0.041666x120"),
        # Refused as often, in downtime: quiet.
        _entry(F, "E_sdt", "S_sdt", "0+1x120"),
        _entry(D, "E_sdt", "S_sdt", "1x120"),
        # Healthy: none.
        _entry(F, "E_sok", "S_sok", "0x120"),
    ]
    return group(
        series,
        quiet("12m", name),  # for: 15m
        site_fires(
            "90m",
            name,
            "E_sub",
            "S_sub",
            "Submissions to E_sub at S_sub are failing",
            "condor_submit failed 60 times in the last 1h at entry E_sub: the factory's requests for it are"
            " not submitted. The failure as the factory logged it is in the exporter's log (redacted):"
            " 'condor_submit failed at entry E_sub'.",
        ),
        promql_expr_test=[problems("90m", "submit_failing", ("E_sub", "S_sub", 2))],
    )


def tests() -> list[dict[str, Any]]:
    """Groups for gwms-alerts.test.yml (rules evaluated every minute)."""
    return [_held(), _ce_unreachable(), _queue_slow(), _submit_failing()]
