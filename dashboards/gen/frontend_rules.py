"""The frontend operators' alerts (issue 35), from the exporter on the VO frontend's host, and their
promtool unit tests.

``audience="frontend"``: Alertmanager mails the frontend operators (alertmanager_frontend_ops_emails,
the contacts file's ``frontend_ops``), never factory-ops or a site's admins. The tests' numbers are
literals, as in rule_tests.py: a threshold changed here without its test fails `promtool test rules`,
and tests/test_rules.py's mutants find each one tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gwms_obs import catalogue

from .config import CONFIG, Config
from .rule_tests import EXP, expect, fires, firing, group, quiet, s
from .rules import Alert

AUDIENCE = "frontend"


@dataclass(frozen=True)
class FrontendThresholds:
    stale_seconds: int = 1800  # age of a group's frontend_status.xml (the frontend writes it every cycle)
    not_requesting_for: str = "30m"  # idle jobs and no glidein requested this long
    # Idle jobs > 0 and no idle glidein requested (> 0): no number to choose.


FRONTEND = FrontendThresholds()
GU = catalogue.FRONTEND_GROUP_UPDATED.name
J, R = catalogue.FRONTEND_JOBS.name, catalogue.FRONTEND_ENTRY_REQUESTED.name


def alerts(c: Config = CONFIG, th: FrontendThresholds = FRONTEND) -> list[Alert]:
    idle = f'sum by (group, client) ({J}{{state="idle"}})'
    asked = f'sum by (group, client) ({R}{{kind="idle"}})'
    return [
        Alert(
            name="GwmsFrontendInfoStale",
            expr=f"time() - max by (group, client) ({GU}) > {th.stale_seconds}",
            for_=c.timing.for_stack,  # an input of the stack gone stale, as the exporter's own alerts
            severity="warning",
            audience=AUDIENCE,
            summary="Frontend group {{ $labels.group }}: its status is stale",
            description="The frontend last wrote the status of group {{ $labels.group }} (client"
            " {{ $labels.client }}) {{ $value | humanizeDuration }} ago: its matchmaking cycle is not"
            " running, and the factories get no new requests from it.",
        ),
        Alert(
            name="GwmsFrontendGroupNotRequesting",
            # Not "asked == 0": a group with no entry at all has no request series, and requests nothing too.
            expr=f"{idle} > 0 unless on (group, client) {asked} > 0",
            for_=th.not_requesting_for,
            severity="warning",
            audience=AUDIENCE,
            summary="Frontend group {{ $labels.group }} has idle jobs but requests no glideins",
            description='{{ $value | printf "%.0f" }} jobs of group {{ $labels.group }} (client'
            f" {{{{ $labels.client }}}}) are idle, and the group has requested no idle glidein for"
            f" {th.not_requesting_for}: no entry matches them, every matching entry is in downtime, or a"
            " limit stops the requests.",
        ),
    ]


def _g(group_: str, client: str = "vofe.main") -> str:
    return f'group="{group_}",client="{client}",{EXP}'


def _stale() -> dict[str, Any]:
    name = "GwmsFrontendInfoStale"
    return group(
        [
            s(GU, _g("g_stale", "vofe.g_stale"), "0x60"),  # written once, at 0
            s(GU, _g("g_fresh", "vofe.g_fresh"), "0+60x60"),  # every minute
        ],
        quiet("29m", name),  # 29 min old: under 30 min
        quiet("35m", name),  # 35 min old, for 5m: pending
        fires(
            "41m",
            name,
            "warning",
            AUDIENCE,
            "Frontend group g_stale: its status is stale",
            "The frontend last wrote the status of group g_stale (client vofe.g_stale) 41m 0s ago: its"
            " matchmaking cycle is not running, and the factories get no new requests from it.",
            group="g_stale",
            client="vofe.g_stale",
        ),
    )


def _not_requesting() -> dict[str, Any]:
    name = "GwmsFrontendGroupNotRequesting"

    def req(group_: str, entry: str, values: str) -> dict[str, str]:
        lab = f'{_g(group_, "vofe." + group_)},entry="{entry}",factory_instance="gf@OSG@node",kind="idle"'
        return s(R, lab, values)

    def jobs(group_: str, values: str) -> dict[str, str]:
        return s(J, f'{_g(group_, "vofe." + group_)},state="idle"', values)

    return group(
        [
            # One idle job, nothing requested of its two entries: fires after 30 minutes.
            jobs("g_starved", "1x60"),
            req("g_starved", "E1", "0x60"),
            req("g_starved", "E2", "0x60"),
            # Idle jobs and no entry at all (nothing to request of): fires too.
            jobs("g_noentry", "7x60"),
            # Idle jobs, one glidein requested: quiet.
            jobs("g_asking", "50x60"),
            req("g_asking", "E1", "1x60"),
            req("g_asking", "E2", "0x60"),
            # Nothing requested, but no idle job: quiet.
            jobs("g_idle", "0x60"),
            req("g_idle", "E1", "0x60"),
        ],
        quiet("25m", name),  # pending: for 30m
        firing(
            "35m",
            name,
            *(
                expect(
                    "warning",
                    AUDIENCE,
                    f"Frontend group {g} has idle jobs but requests no glideins",
                    f"{n} jobs of group {g} (client vofe.{g}) are idle, and the group has requested no idle"
                    " glidein for 30m: no entry matches them, every matching entry is in downtime, or a limit"
                    " stops the requests.",
                    group=g,
                    client=f"vofe.{g}",
                )
                for g, n in (("g_noentry", 7), ("g_starved", 1))
            ),
        ),
    )


def tests() -> list[dict[str, Any]]:
    return [_stale(), _not_requesting()]
