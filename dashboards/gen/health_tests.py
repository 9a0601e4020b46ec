"""promtool unit tests of the site-health rules (health.py): each problem present where it must be
and absent just beyond each of its thresholds, the status per site, and the two alerts.

Numbers are literals, as in rule_tests.py: the mutation test (tests/test_rules.py) makes each
threshold of each problem 25% more sensitive and expects these tests to fail.
"""

from __future__ import annotations

from typing import Any

import yaml

from gwms_obs import catalogue

from . import names as N
from .rule_tests import EXP, expect, fires, firing, pool, quiet, s

U, P, CPU = catalogue.USER_JOBS.name, catalogue.PILOTS.name, catalogue.CPU_SECONDS.name
D, G = catalogue.ENTRY_DOWNTIME.name, catalogue.ENTRY_GLIDEINS.name


def jobs(entry: str, site: str, category: str, values: str) -> dict[str, str]:
    return s(U, pool(entry, site, extra=f'category="{category}"'), values)


def pilots(entry: str, site: str, outcome: str, values: str) -> dict[str, str]:
    return s(P, pool(entry, site, extra=f'outcome="{outcome}"'), values)


def cpu(entry: str, site: str, category: str, values: str) -> dict[str, str]:
    return s(CPU, pool(entry, site, extra=f'category="{category}",accuracy="exact"'), values)


def overusing(entry: str, site: str, resource: str, values: str) -> dict[str, str]:
    return s(catalogue.USER_JOBS_OVERUSING.name, pool(entry, site, extra=f'resource="{resource}"'), values)


def downtime(entry: str, site: str, samples: int = 120) -> dict[str, str]:
    return s(D, f'entry="{entry}",site="{site}",{EXP}', f"0x{samples}")


def problems(at: str, reason: str, *entries: tuple[str, str, int]) -> dict[str, Any]:
    """gwms:site_problem{reason} at ``at`` is exactly ``entries`` (entry, site, status)."""
    return {
        "expr": f'{N.RR_SITE_PROBLEM}{{reason="{reason}"}}',
        "eval_time": at,
        "exp_samples": [
            {"labels": f'{N.RR_SITE_PROBLEM}{{entry="{e}",site="{site}",reason="{reason}"}}', "value": v}
            for e, site, v in entries
        ],
    }


def status(at: str, **sites: int) -> dict[str, Any]:
    return {
        "expr": N.RR_SITE_STATUS,
        "eval_time": at,
        "exp_samples": [{"labels": f'{N.RR_SITE_STATUS}{{site="{k}"}}', "value": v} for k, v in sites.items()],
    }


def _jobs_and_validation() -> dict[str, Any]:
    """Black holes, validation failing / failures, held pilots; the status and both alerts."""
    entries = [
        ("E_bh", "S_bh"), ("E_bh_ratio", "S_bh_ratio"), ("E_bh_few", "S_bh_few"),
        ("E_vf", "S_vf"), ("E_vf45", "S_vf45"), ("E_vf22", "S_vf22"), ("E_vf_few", "S_vf_few"),
        ("E_held", "S_held"), ("E_held16", "S_held16"), ("E_ok", "S_ok"),
    ]  # fmt: skip
    mis, good = "misconfiguration_badput", "goodput"
    series = [downtime(e, site) for e, site in entries] + [
        # 60 of 90 jobs an hour fail: a black hole.
        jobs("E_bh", "S_bh", mis, "0+1x120"),
        jobs("E_bh", "S_bh", good, "0+0.5x120"),
        # 40% fail: not one (threshold one half).
        jobs("E_bh_ratio", "S_bh_ratio", mis, "0+1x120"),
        jobs("E_bh_ratio", "S_bh_ratio", good, "0+1.5x120"),
        # All fail, but 18 an hour: not one (at least 20).
        jobs("E_bh_few", "S_bh_few", mis, "0+0.3x120"),
        jobs("E_ok", "S_ok", good, "0+2x120"),
        # Validation: two thirds fail (failing and failures), 45% (failures), 22% (neither), 9 in all.
        pilots("E_vf", "S_vf", "validation_failed", "0+1x120"),
        pilots("E_vf", "S_vf", "ran_jobs", "0+0.5x120"),
        pilots("E_vf45", "S_vf45", "validation_failed", "0+0.9x120"),
        pilots("E_vf45", "S_vf45", "ran_jobs", "0+1.1x120"),
        pilots("E_vf22", "S_vf22", "validation_failed", "0+0.22x120"),
        pilots("E_vf22", "S_vf22", "ran_jobs", "0+0.78x120"),
        pilots("E_vf_few", "S_vf_few", "validation_failed", "0+0.15x120"),
        pilots("E_ok", "S_ok", "ran_jobs", "0+1x120"),
        # Held: 20 (degraded), 16 (not: at least 20).
        s(G, pool("E_held", "S_held", extra='state="held"'), "20x120"),
        s(G, pool("E_held16", "S_held16", extra='state="held"'), "16x120"),
    ]
    ok = {site: 0 for _, site in entries}
    return {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            problems("90m", "black_hole", ("E_bh", "S_bh", 2)),
            problems("90m", "validation_failing", ("E_vf", "S_vf", 2)),
            problems("90m", "validation_failures", ("E_vf", "S_vf", 1), ("E_vf45", "S_vf45", 1)),
            problems("90m", "pilots_held", ("E_held", "S_held", 1)),
            status("90m", **{**ok, "S_bh": 2, "S_vf": 2, "S_vf45": 1, "S_held": 1}),
        ],
        "alert_rule_test": [
            quiet("5m", "GwmsSiteFailing"),  # fewer than 20 failed jobs yet
            firing(
                "90m",
                "GwmsSiteFailing",
                *(
                    expect(
                        "critical",
                        "site",
                        f"Site {site} is failing",
                        f"Site {site} is failing: {reason} at {e}; see the Site health dashboard.",
                        site=site,
                    )
                    for e, site, reason in (("E_bh", "S_bh", "black_hole"), ("E_vf", "S_vf", "validation_failing"))
                ),
            ),
        ],
    }


def _hogs() -> dict[str, Any]:
    """Resource hogs: the share of the entry's jobs over their slot, per resource."""
    entries = [("E_hog", "S_hog"), ("E_hog_cpu", "S_hog_cpu"), ("E_hog9", "S_hog9"), ("E_hog_few", "S_hog_few")]
    good = "goodput"
    series = [downtime(e, site) for e, site in entries] + [
        # 12 of 60 jobs an hour over their memory (20%), 3 over their cores (5%): a memory hog.
        jobs("E_hog", "S_hog", good, "0+1x120"),
        overusing("E_hog", "S_hog", "memory", "0+0.2x120"),
        overusing("E_hog", "S_hog", "cpu", "0+0.05x120"),
        # 18 of 60 over their cores, none over memory: a CPU hog.
        jobs("E_hog_cpu", "S_hog_cpu", good, "0+1x120"),
        overusing("E_hog_cpu", "S_hog_cpu", "memory", "0x120"),
        overusing("E_hog_cpu", "S_hog_cpu", "cpu", "0+0.3x120"),
        # 10.8 of 120 (9%): not one (more than 10%).
        jobs("E_hog9", "S_hog9", good, "0+2x120"),
        overusing("E_hog9", "S_hog9", "memory", "0+0.18x120"),
        # 9 of 60 (15%), but 9 an hour over both resources: not one (at least 10).
        jobs("E_hog_few", "S_hog_few", good, "0+1x120"),
        overusing("E_hog_few", "S_hog_few", "memory", "0+0.15x120"),
    ]
    return {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            problems("90m", "resource_hog", ("E_hog", "S_hog", 1), ("E_hog_cpu", "S_hog_cpu", 1)),
            {
                "expr": f'round({N.RR_JOB_OVERUSE_RATIO}{{entry="E_hog"}}, 0.01)',  # increase() is float
                "eval_time": "90m",
                "exp_samples": [
                    {"labels": f'{{entry="E_hog",site="S_hog",resource="{r}"}}', "value": v}
                    for r, v in (("memory", 0.2), ("cpu", 0.05))
                ],
            },
            status("90m", S_hog=1, S_hog_cpu=1, S_hog9=0, S_hog_few=0),
        ],
    }


def _not_green() -> dict[str, Any]:
    """The shifters' summary: one degraded site, nothing failing."""
    series = [downtime("E_held", "S_held"), downtime("E_ok", "S_ok")]
    series.append(s(G, pool("E_held", "S_held", extra='state="held"'), "0x9 20x110"))
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            quiet("5m", "GwmsSitesNotGreen"),
            fires(
                "20m",
                "GwmsSitesNotGreen",
                "info",
                "shifters",
                "1 sites are not green",
                "1 sites degraded (1) or failing (2): S_held=1 - the shifters' daily summary.",
            ),
        ],
    }


def _accelerating(first: float, step: float, n: int = 48) -> str:
    """A counter whose increase per sample grows by ``step``: first, first + step, ..."""
    c, out = 0.0, []
    for k in range(n):
        out.append(f"{c:g}")
        c += first + step * k
    return " ".join(out)


def _worsening() -> dict[str, Any]:
    """The validation-failure share heading over one half within a day (samples every 10 minutes)."""
    entries = [("E_w", "S_w"), ("E_w44", "S_w44"), ("E_w_noise", "S_w_noise"), ("E_w_few", "S_w_few")]
    series = [downtime(e, site, 48) for e, site in entries] + [
        # 100 pilots ran per 10 minutes; failures grow by 0.5 per 10 minutes: headed for 73%, z 6.6.
        pilots("E_w", "S_w", "validation_failed", _accelerating(6, 0.5)),
        pilots("E_w", "S_w", "ran_jobs", "0+100x48"),
        # Growing slower: headed for 44% in a day, not one half (z 3.6).
        pilots("E_w44", "S_w44", "validation_failed", _accelerating(10, 0.25)),
        pilots("E_w44", "S_w44", "ran_jobs", "0+100x48"),
        # Headed for 72%, but the rise is within the noise of its counts: z 2.5 (more than 3).
        pilots("E_w_noise", "S_w_noise", "validation_failed", _accelerating(80, 0.55)),
        pilots("E_w_noise", "S_w_noise", "ran_jobs", "0+100x48"),
        # Headed for 74%, but 8.4 failures in the last hour: z 1.9.
        pilots("E_w_few", "S_w_few", "validation_failed", _accelerating(0.1, 0.03)),
        pilots("E_w_few", "S_w_few", "ran_jobs", "0+6x48"),
    ]
    return {
        "interval": "10m",
        "input_series": series,
        "promql_expr_test": [problems("470m", "validation_worsening", ("E_w", "S_w", 1))],
    }


def _waste_outliers() -> list[dict[str, Any]]:
    """Robust z of the waste share: a tight fleet (MAD floor) and a wide one."""

    def entry(name: str, waste: float) -> list[dict[str, str]]:
        return [
            cpu(name, f"S_{name}", "overhead", f"0+{waste * 100:g}x120"),
            cpu(name, f"S_{name}", "goodput", f"0+{(1 - waste) * 100:g}x120"),
        ]

    tight = [("T1", 0.1), ("T2", 0.1), ("T3", 0.1), ("T4", 0.1), ("T5", 0.1), ("T6", 0.1), ("T_out", 0.6)]
    tight.append(("T_small", 0.18))  # z 5.4, but under 20% waste
    wide = [("W1", 0.2), ("W2", 0.25), ("W3", 0.3), ("W4", 0.35), ("W5", 0.4), ("W_mild", 0.66)]  # z 3.0
    return [
        {
            "interval": "1m",
            "input_series": [x for n, w in fleet for x in entry(n, w)],
            "promql_expr_test": [problems("90m", "waste_outlier", *want)],
        }
        for fleet, want in ((tight, [("T_out", "S_T_out", 1)]), (wide, []))
    ]


def _goodput_falling() -> dict[str, Any]:
    """The goodput share a day long, against the same a week before (samples every hour)."""

    def entry(name: str, before: float, after: float) -> list[dict[str, str]]:
        # 100 canonical core-seconds an hour; the goodput share changes after 7 days.
        g0, g1 = before * 100, after * 100
        return [
            cpu(name, f"S_{name}", "goodput", f"0+{g0:g}x168 {168 * g0:g}+{g1:g}x36"),
            cpu(name, f"S_{name}", "overhead", f"0+{100 - g0:g}x168 {168 * (100 - g0):g}+{100 - g1:g}x36"),
        ]

    series = entry("E_gf", 0.8, 0.5) + entry("E_gf_mild", 0.8, 0.64) + entry("E_gf_low", 0.25, 0.1)
    return {
        "interval": "1h",
        "input_series": series,
        # 80% -> 50% falls; 80% -> 64% is within a quarter; 25% -> 10% started too low to judge.
        "promql_expr_test": [problems("204h", "goodput_falling", ("E_gf", "S_E_gf", 1))],
    }


def _phase_outliers() -> dict[str, Any]:
    """Robust z of a phase's p95 across entries (span metrics; MAD floor 1 s)."""
    bounds = ("1", "2", "4", "5", "8", "32", "64", "+Inf")

    def entry(name: str, upper: str, span: str = "validation", phase: str | None = "validation") -> list[Any]:
        # Every span of the entry in the bucket ending at ``upper``; ``phase``: its gwms.phase (None: no phase).
        i = bounds.index(upper)
        lab = f'service_name="glidein",{N.SPAN_ENTRY}="{name}",{N.SPAN_SITE}="S_{name}",span_name="{span}"'
        lab += f',{N.SPAN_PHASE}="{phase}"' if phase else ""
        return [
            s(f"{N.SPAN_DURATION}_bucket", f'{lab},le="{le}"', "0+10x120" if j >= i else "0x120")
            for j, le in enumerate(bounds)
        ]

    normal = ("P1", "P2", "P3", "P4", "P5", "P6")
    series = [x for n in normal for x in entry(n, "2")]  # p95 1.95 s
    series += entry("P_slow", "64")  # p95 62.4 s
    series += entry("P_mild", "5")  # p95 4.95 s: z 3.0
    # Not overhead: a long payload (condor, main), user jobs and the root are as long as the entry's
    # walltime makes them, so P_long, 30 times the others in each, is no slow entry.
    for span, phase in (("condor", "condor"), ("main", "main"), ("job", None), ("glidein", None)):
        series += [x for n in (*normal, "P_slow", "P_mild") for x in entry(n, "2", span, phase)]
        series += entry("P_long", "64", span, phase)
    series += entry("P_long", "2")
    return {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [problems("90m", "phase_slow", ("P_slow", "S_P_slow", 1))],
    }


def _phase_outliers_by_factory() -> dict[str, Any]:
    """Two factories' collectors writing to one Prometheus, each span series with its factory
    (gwms_factory, the pilots' gwms.factory), with entries of the same names: a phase's fleet is its
    factory's entries. fa's P_slow is slow against fa's entries; fb's entries, P_slow too, are all
    ~16 times fa's but alike. Per entry name across factories, P_slow would be an outlier with no
    factory; against one fleet of both, fa's P_slow (62.4 s against a median of 30.8 s) would not."""
    bounds = ("1", "2", "8", "32", "64", "+Inf")

    def entry(factory: str, name: str, upper: str) -> list[dict[str, str]]:
        i = bounds.index(upper)
        lab = f'service_name="glidein",{N.SPAN_FACTORY}="{factory}",{N.SPAN_ENTRY}="{name}",{N.SPAN_SITE}="S_{name}"'
        lab += f',span_name="validation",{N.SPAN_PHASE}="validation"'
        return [
            s(f"{N.SPAN_DURATION}_bucket", f'{lab},le="{le}"', "0+10x120" if j >= i else "0x120")
            for j, le in enumerate(bounds)
        ]

    names = ("P1", "P2", "P3", "P4", "P5", "P6")
    series = [x for n in names for x in entry("fa", n, "2")]  # p95 1.95 s
    series += entry("fa", "P_slow", "64")  # p95 62.4 s
    series += [x for n in (*names, "P_slow") for x in entry("fb", n, "32")]  # p95 30.8 s, every entry
    row = f'{catalogue.FACTORY_LABEL}="fa",entry="P_slow",site="S_P_slow",reason="phase_slow"'
    return {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {
                "expr": f'{N.RR_SITE_PROBLEM}{{reason="phase_slow"}}',
                "eval_time": "90m",
                "exp_samples": [{"labels": f"{N.RR_SITE_PROBLEM}{{{row}}}", "value": 1}],
            }
        ],
    }


def tests() -> list[dict[str, Any]]:
    """Groups for gwms-alerts.test.yml (rules evaluated every minute)."""
    return [
        _jobs_and_validation(),
        _hogs(),
        _not_green(),
        *_waste_outliers(),
        _phase_outliers(),
        _phase_outliers_by_factory(),
    ]


# Trends need hours to days of history: their own file, rules evaluated every 10 minutes
# (every minute over 8 days would take promtool minutes).
SLOW_EVALUATION = "10m"


def slow_tests_yaml(rule_files: list[str]) -> str:
    doc = {
        "rule_files": rule_files,
        "evaluation_interval": SLOW_EVALUATION,
        "tests": [_worsening(), _goodput_falling()],
    }
    head = "# Generated by `make generate` (dashboards/gen/health_tests.py); do not edit by hand.\n"
    return head + yaml.safe_dump(doc, sort_keys=False, width=1000)
