"""The VO frontend's own view (issue 35): demand and glideins per group and per factory entry,
and where the frontend's request and the factory's record of it disagree.

Its series come from the exporter on the frontend host (catalogue.FRONTEND_METRICS). The one panel
joining the factory's series (what the factory says it was asked) matches on (entry, client) alone:
the frontend's series carry its own Prometheus's factory label, not the factory's of the entry.
"""

from __future__ import annotations

from gwms_obs import catalogue

from ..board import FACTORY_SEL, TOPN, Board, Drill, Target, pilot_links, ranked
from .common import BY_ENTRY, CLIENTS, FACTORY, PROVISIONING, TO_PROVISIONING, add_by_state, legend, over_range

FRONTEND = "gwms-frontend"
FE_SEL = f'{FACTORY_SEL},group=~"$group"'  # the frontend's series
TO_ENTRY_ROW = Drill(PROVISIONING, "Provisioning of ${__data.fields.entry}", "entry")
# The join: the frontend's request and the factory's record of it, per entry and client.
JOIN = "entry, client"


def _idle(m: catalogue.MetricDef, sel: str) -> str:
    return f'sum by ({JOIN}) ({m.name}{{{sel},kind="idle"}})'


def disagreement() -> str:
    """What the frontend requested minus what the factory says it was asked (idle glideins)."""
    fe, fa = catalogue.FRONTEND_ENTRY_REQUESTED, catalogue.ENTRY_REQUESTED
    return f"{_idle(fe, FACTORY_SEL)} - on ({JOIN}) {_idle(fa, FACTORY_SEL)}"


def frontend() -> Board:
    b = Board(
        FRONTEND,
        "GlideinWMS frontend / Frontend: demand and glideins per group and factory",
        "The VO frontend's own view (its frontend_status.xml): user jobs and glideins per group, what it"
        " requests of each factory entry, and where the factory's record of the request differs.",
        "frontend operators",
        variables=("group", TOPN),
    )
    J, GL, UN = catalogue.FRONTEND_JOBS, catalogue.FRONTEND_GLIDEINS, catalogue.FRONTEND_UNMATCHED_JOBS
    R, EJ, EG = catalogue.FRONTEND_ENTRY_REQUESTED, catalogue.FRONTEND_ENTRY_JOBS, catalogue.FRONTEND_ENTRY_GLIDEINS
    EC, ED = catalogue.FRONTEND_ENTRY_CORES, catalogue.FRONTEND_ENTRY_DOWN
    GU, FU = catalogue.FRONTEND_GROUP_UPDATED, catalogue.FRONTEND_UPDATED
    b.add(
        "timeseries",
        "Idle jobs against glideins requested, per group",
        "The group's idle user jobs, the idle glideins it asks of all its entries together, and its"
        " glideins running in the VO pool.",
        J.grafana_unit,
        [
            Target(f'sum by (group) ({J.name}{{{FE_SEL},state="idle"}})', "{{group}} idle jobs"),
            Target(f'sum by (group) ({R.name}{{{FE_SEL},kind="idle"}})', "{{group}} requested idle glideins"),
            Target(f'sum by (group) ({GL.name}{{{FE_SEL},state="running"}})', "{{group}} running glideins"),
        ],
        budget=3 * CLIENTS,
        question="Does each group ask for glideins while its jobs wait?",
        w=24,
    )
    add_by_state(
        b,
        "User jobs per group",
        "The group's user jobs in its schedds: idle, idle over 10 minutes (old_idle), running.",
        J,
        "group",
        FE_SEL,
        ("idle", "old_idle", "running"),
        "How many of a group's jobs wait, and for how long?",
    )
    add_by_state(
        b,
        "Glideins in the VO pool per group",
        "The group's glideins as the frontend sees them in the VO pool: idle (unclaimed) and running.",
        GL,
        "group",
        FE_SEL,
        ("idle", "running"),
        "Are a group's glideins claimed by its jobs?",
    )
    add_by_state(
        b,
        "Jobs no entry matches, per group",
        "The group's user jobs that match no factory entry (the frontend's Unmatched): it requests nothing for them.",
        UN,
        "group",
        FE_SEL,
        ("idle", "running"),
        "How many jobs can no entry run?",
    )
    b.add(
        "timeseries",
        "Entries in downtime as the frontend sees them, per group",
        "How many of the group's entries the frontend sees in downtime (it then asks nothing of them).",
        ED.grafana_unit,
        [Target(f"sum by (group) ({ED.name}{{{FE_SEL}}})", "{{group}}")],
        budget=CLIENTS,
        question="Which groups lose entries to downtime?",
    )
    b.add(
        "timeseries",
        "Idle glideins requested, top $topn entries",
        "Idle glideins the frontend asks of the entry (all groups), the $topn entries asked most over the range.",
        R.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f'sum by ({BY_ENTRY}) ({R.name}{{{FE_SEL},kind="idle"}})',
                    over_range(R, f'{FE_SEL},kind="idle"', BY_ENTRY, "avg_over_time"),
                ),
                legend("entry", FACTORY),
            )
        ],
        budget=10,
        question="Which entries does the frontend ask most of?",
        drill=(TO_PROVISIONING,),
    )
    rank = f'sum by ({BY_ENTRY}) ({R.name}{{{FE_SEL},kind="idle"}})'
    b.add(
        "table",
        "Per entry and group now: requested, matched jobs, glideins and cores; top $topn by requested",
        "Now, per entry and group: the request (idle, max running), the jobs matching it (idle, effective"
        " idle, running, running on its glideins), its glideins and cores in the VO pool, and whether the"
        " frontend sees it in downtime.",
        R.grafana_unit,
        [
            Target(ranked(BY_ENTRY, f"sum by ({BY_ENTRY}, group, {kind}) ({m.name}{{{FE_SEL}}})", rank), instant=True)
            for m, kind in ((R, "kind"), (EJ, "state"), (EG, "state"), (EC, "state"))
        ]
        + [Target(ranked(BY_ENTRY, f"max by ({BY_ENTRY}, group) ({ED.name}{{{FE_SEL}}})", rank), instant=True)],
        budget=10 * 5 * 17,
        question="For one entry, what does each group ask, and what does it have?",
        w=24,
        drill=(TO_ENTRY_ROW, *pilot_links("entry")),
    )
    fe, fa = _idle(R, FACTORY_SEL), _idle(catalogue.ENTRY_REQUESTED, FACTORY_SEL)
    worst = f"abs({disagreement()})"
    b.add(
        "table",
        "Frontend requested against factory asked, per entry and client; top $topn by difference",
        "Idle glideins the frontend requested of the entry (its frontend_status.xml) next to what the factory"
        " says the client asked (its schedd_status.xml), and the difference: the two are written a cycle"
        " apart, so a difference that lasts is a request lost or misread on the way (a client name not"
        " mapped in [frontend_clients] shows here as a frontend row with no factory row).",
        R.grafana_unit,
        [
            Target(ranked(JOIN, fe, worst), "frontend requested", instant=True),
            Target(ranked(JOIN, fa, worst), "factory asked", instant=True),
            Target(f"topk(${TOPN}, {disagreement()})", "frontend minus factory", instant=True),
        ],
        budget=3 * 10,
        question="Does the factory get what the frontend requests?",
        w=24,
        drill=(TO_ENTRY_ROW, *pilot_links("entry", "client")),
    )
    b.add(
        "timeseries",
        "Frontend requested minus factory asked, per client",
        "Idle glideins requested by the frontend minus what the factories say each client asked, summed over"
        " the client's entries: 0 when they agree.",
        R.grafana_unit,
        [
            Target(
                f'sum by (client) ({R.name}{{{FACTORY_SEL},kind="idle"}}) - on (client)'
                f' sum by (client) ({catalogue.ENTRY_REQUESTED.name}{{{FACTORY_SEL},kind="idle"}})',
                "{{client}}",
            )
        ],
        budget=CLIENTS,
        question="Since when do frontend and factory disagree?",
    )
    b.add(
        "stat",
        "Frontend information age, per group",
        "Seconds since the frontend last wrote each group's frontend_status.xml, and its frontend-wide one;"
        " the frontend writes them every cycle (minutes).",
        "s",
        [
            Target(f"time() - max by (group) ({GU.name}{{{FE_SEL}}})", "{{group}}"),
            Target(f"time() - max({FU.name}{{{FACTORY_SEL}}})", "frontend-wide"),
        ],
        budget=CLIENTS + 1,  # the groups and the frontend-wide one
        question="Is the frontend's information current?",
        w=24,
        h=4,
    )
    return b
