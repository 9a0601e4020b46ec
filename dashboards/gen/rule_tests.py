"""promtool unit tests for every alert: each fires where it must and stays quiet just below.

The numbers here are literals, deliberately not taken from rules.py: a
threshold or ``for:`` changed there without changing these tests fails
`promtool test rules`. Metric names still come from the catalogue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from gwms_obs import catalogue

from . import names as N
from .rules import RUNBOOK_BASE_LABEL, RUNBOOK_BASE_URL

EXP = f'job="{N.JOB_EXPORTER}",instance="factory:9822"'
# A runbook base an operator sets as Prometheus's external label, instead of the default.
OPERATOR_RUNBOOKS = "https://runbooks.factory.example/gwms.html"


def s(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{name}{{{labels}}}", "values": values}


def pool(entry: str, site: str, client: str = "fe", extra: str = "") -> str:
    lab = f'entry="{entry}",client="{client}",site="{site}",{EXP}'
    return f"{lab},{extra}" if extra else lab


def cpu(entry: str, site: str, category: str, values: str) -> dict[str, str]:
    """A CPU-seconds counter of one pool and category, measured exactly."""
    return s(catalogue.CPU_SECONDS.name, pool(entry, site, extra=f'category="{category}",accuracy="exact"'), values)


def group(series: list[dict[str, str]], *cases: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """One promtool test group: input series sampled every minute, then its alert cases."""
    return {"interval": "1m", **extra, "input_series": series, "alert_rule_test": list(cases)}


def quiet(at: str, name: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": []}


def expect(severity: str, audience: str, summary: str, description: str, **labels: str) -> dict[str, Any]:
    """One alert expected to fire: its labels and annotations (the runbook link is added by firing())."""
    return {
        "exp_labels": {"severity": severity, "audience": audience, **labels},
        "exp_annotations": {"summary": summary, "description": description},
    }


def firing(at: str, name: str, *alerts: dict[str, Any], runbook_base: str = RUNBOOK_BASE_URL) -> dict[str, Any]:
    """``name`` fires at ``at`` with exactly ``alerts``, each linking to the runbook section of ``name``."""
    link = {"runbook_url": f"{runbook_base}#{name.lower()}"}
    exp = [{**a, "exp_annotations": {**a["exp_annotations"], **link}} for a in alerts]
    return {"eval_time": at, "alertname": name, "exp_alerts": exp}


def fires(
    at: str, name: str, severity: str, audience: str, summary: str, description: str, **labels: str
) -> dict[str, Any]:
    """``name`` fires at ``at`` with exactly one alert (expect's), linking to the default runbook."""
    return firing(at, name, expect(severity, audience, summary, description, **labels))


def site_fires(
    at: str, name: str, entry: str, site: str, summary: str, description: str, **labels: str
) -> dict[str, Any]:
    """``name`` fires at ``at`` with one warning for the admins of ``site``, about ``entry``."""
    return fires(at, name, "warning", "site", summary, description, entry=entry, site=site, **labels)


def _validation() -> dict[str, Any]:
    P, name = catalogue.PILOTS.name, "GwmsSiteValidationFailuresRising"
    vf, ran = 'outcome="validation_failed"', 'outcome="ran_jobs"'
    return group(
        [
            # 60 failures/h, half of the pilots: fires.
            s(P, pool("E_bad", "S_bad", extra=vf), "0+1x120"),
            s(P, pool("E_bad", "S_bad", extra=ran), "0+1x120"),
            # 60 failures/h but only 20% of the pilots: quiet (threshold 25%).
            s(P, pool("E_ratio", "S_ratio", extra=vf), "0+1x120"),
            s(P, pool("E_ratio", "S_ratio", extra=ran), "0+4x120"),
            # All pilots fail, but only 9 in the hour: quiet (threshold 10).
            s(P, pool("E_few", "S_few", extra=vf), "0+0.15x120"),
        ],
        quiet("12m", name),  # pending
        site_fires(
            "90m",
            name,
            "E_bad",
            "S_bad",
            "Pilots fail validation at S_bad (E_bad)",
            "60 pilots of entry E_bad at site S_bad failed worker-node validation in the last 1h,"
            " more than 25% of its pilots.",
        ),
    )


def _held() -> dict[str, Any]:
    G, name = catalogue.ENTRY_GLIDEINS.name, "GwmsPilotsHeld"
    h = 'state="held"'

    def held(entry: str, site: str, n: int) -> dict[str, Any]:
        return expect(
            "warning",
            "site",
            f"Pilots held at {site} ({entry})",
            f"{n} glideins of entry {entry} are held in the factory queue.",
            entry=entry,
            site=site,
        )

    return group(
        [
            s(G, pool("E_bad", "S_bad", extra=h), "25x60"),
            s(G, pool("E_ok", "S_ok", extra=h), "19x60"),  # below 20: quiet
            # Two clients with 10 each: the entry has 20 held, fires.
            s(G, pool("E_two", "S_two", "fe1", h), "10x60"),
            s(G, pool("E_two", "S_two", "fe2", h), "10x60"),
            s(G, pool("E_run", "S_run", extra='state="running"'), "500x60"),  # not held
        ],
        quiet("25m", name),  # for: 30m
        firing("45m", name, held("E_bad", "S_bad", 25), held("E_two", "S_two", 20)),
    )


def _no_match() -> dict[str, Any]:
    P, name = catalogue.PILOTS.name, "GwmsPilotsNeverMatched"
    nm, ran = 'outcome="no_match"', 'outcome="ran_jobs"'
    return group(
        [
            s(P, pool("E_bad", "S_bad", extra=nm), "0+1x150"),
            s(P, pool("E_bad", "S_bad", extra=ran), "0+0.5x150"),  # 67% never matched: fires
            s(P, pool("E_ratio", "S_ratio", extra=nm), "0+1x150"),
            s(P, pool("E_ratio", "S_ratio", extra=ran), "0+1.1x150"),  # 48%: quiet (threshold 50%)
            s(P, pool("E_few", "S_few", extra=nm), "0+0.15x150"),  # 9 in the hour: quiet
        ],
        quiet("30m", name),
        fires(
            "120m",
            name,
            "warning",
            "factory",
            "Pilots of E_bad never get a job",
            "60 pilots of entry E_bad ended without running a job in the last 1h, more than half of its pilots.",
            entry="E_bad",
            site="S_bad",
        ),
    )


def _badput() -> dict[str, Any]:
    name = "GwmsEntryBadputHigh"
    return group(
        [
            # 40% of 60,000 job core-seconds/h is badput: fires.
            cpu("E_bad", "S_bad", "goodput", "0+600x150"),
            cpu("E_bad", "S_bad", "preemption_badput", "0+400x150"),
            cpu("E_bad", "S_bad", "validation_failed", "0+5000x150"),  # not job time: ignored
            # 28.6% badput: quiet (threshold 30%).
            cpu("E_ratio", "S_ratio", "goodput", "0+750x150"),
            cpu("E_ratio", "S_ratio", "misconfiguration_badput", "0+300x150"),
            # 80% badput of only 30,000 core-seconds/h: quiet (minimum 36,000).
            cpu("E_small", "S_small", "goodput", "0+100x150"),
            cpu("E_small", "S_small", "preemption_badput", "0+400x150"),
        ],
        quiet("60m", name),  # pending
        site_fires(
            "120m",
            name,
            "E_bad",
            "S_bad",
            "High badput at S_bad (E_bad)",
            "40% of the user-job CPU time of entry E_bad was badput in the last 1h.",
        ),
        # The site-health problem of the same condition (health.py), without the alert's wait.
        promql_expr_test=[
            {
                "expr": f'{N.RR_SITE_PROBLEM}{{reason="badput_high"}}',
                "eval_time": "120m",
                "exp_samples": [
                    {"labels": f'{N.RR_SITE_PROBLEM}{{entry="E_bad",site="S_bad",reason="badput_high"}}', "value": 1}
                ],
            }
        ],
    )


def _stale_and_downtime() -> dict[str, Any]:
    U, D = catalogue.ENTRY_UPDATED.name, catalogue.ENTRY_DOWNTIME.name
    stale, downtime = "GwmsEntryInfoStale", "GwmsEntryInDowntime"
    return group(
        [
            s(U, f'entry="E_stale",site="S_stale",{EXP}', "0x120"),  # never rewritten
            s(U, f'entry="E_fresh",site="S_fresh",{EXP}', "0+60x120"),  # rewritten every minute
            s(D, f'entry="E_stale",site="S_stale",{EXP}', "0x120"),
            s(D, f'entry="E_fresh",site="S_fresh",{EXP}', "0 0 0 1x117"),
        ],
        quiet("70m", stale),  # 70m old, for 15m
        fires(
            "100m",
            stale,
            "warning",
            "factory",
            "Entry E_stale status is stale",
            "The factory last wrote the status of entry E_stale 1h 40m 0s ago.",
            entry="E_stale",
            site="S_stale",
        ),
        quiet("2m", downtime),
        fires(
            "3m",
            downtime,
            "info",
            "factory",
            "Entry E_fresh is in downtime",
            "Entry E_fresh at site S_fresh is in downtime; its other alerts are inhibited.",
            entry="E_fresh",
            site="S_fresh",
        ),
    )


def _down(job: str, name: str, summary: str, what: str, severity: str = "critical") -> list[dict[str, Any]]:
    inst = f'job="{job}",instance="h:1"'
    return [
        group(
            [s("up", inst, "1 1 0x20")],
            quiet("6m", name),  # down 4m, for: 5m
            fires("8m", name, severity, "factory", summary, what.format(" at h:1"), job=job, instance="h:1"),
        ),
        # The target is gone from Prometheus entirely (no `up` series): absent() fires.
        group(
            [s("up", 'job="other",instance="h:2"', "1x20")],
            quiet("4m", name),
            fires("10m", name, severity, "factory", summary, what.format(""), job=job),
        ),
        group([s("up", inst, "1x20")], quiet("15m", name)),
    ]


def _runbook_base() -> dict[str, Any]:
    """The operator's runbook base, an external label of their Prometheus, replaces the default in the link."""
    name = "GwmsExporterDown"
    return group(
        [s("up", f'job="{N.JOB_EXPORTER}",instance="h:1"', "0x10")],
        firing(
            "6m",
            name,
            expect(
                "critical",
                "factory",
                "The gwms-obs exporter is down",
                "Prometheus cannot scrape the gwms-obs exporter at h:1; factory metrics are not collected.",
                job=N.JOB_EXPORTER,
                instance="h:1",
            ),
            runbook_base=OPERATOR_RUNBOOKS,
        ),
        external_labels={RUNBOOK_BASE_LABEL: OPERATOR_RUNBOOKS},
    )


def _exporter_health() -> dict[str, Any]:
    L, E, LAG = catalogue.LAST_SCAN.name, catalogue.PARSE_ERRORS.name, catalogue.LAG.name
    behind, stalled, errors = "GwmsExporterFallingBehind", "GwmsExporterStalled", "GwmsExporterParseErrors"
    return group(
        [
            s(L, 'job="gwms-obs",instance="stuck:9822"', "0x150"),
            s(L, 'job="gwms-obs",instance="ok:9822"', "0+60x150"),
            s(E, f'{EXP},source="glidein_out",reason="truncated"', "0+1x150"),  # 60/h: fires
            s(E, f'{EXP},source="glidein_err",reason="truncated"', "0+0.8x150"),  # 48/h: quiet (50)
            # A scan that stopped catching up: the oldest unaccounted .out ages a minute a minute.
            s(LAG, 'job="gwms-obs",instance="behind:9822",source="glidein_out"', "0+60x150"),
            # An idle factory: nothing waits, however long nothing arrives.
            s(LAG, 'job="gwms-obs",instance="ok:9822",source="glidein_out"', "0x150"),
            # A young .out waiting to settle: under a minute, again and again.
            s(LAG, 'job="gwms-obs",instance="ok:9822",source="completed_jobs"', "0 45 0 50 0 40x24"),
        ],
        quiet("33m", behind),  # > 1800 since 31m
        fires(
            "40m",
            behind,
            "warning",
            "factory",
            "gwms-obs is falling behind on glidein_out",
            "The oldest glidein_out input not yet accounted by behind:9822 is 40m 0s old;"
            " the accounting is that far behind.",
            instance="behind:9822",
            source="glidein_out",
        ),
        quiet("18m", stalled),  # 18m old, for 5m
        fires(
            "30m",
            stalled,
            "critical",
            "factory",
            "The gwms-obs exporter stopped scanning",
            "The last scan of gwms-obs stuck:9822 ended 30m 0s ago.",
            instance="stuck:9822",
        ),
        quiet("60m", errors),  # pending since ~50m
        fires(
            "120m",
            errors,
            "warning",
            "factory",
            "gwms-obs skips unreadable glidein_out input",
            "60 glidein_out inputs were skipped as unreadable in the last 1h;"
            " their pilots are missing from the accounting.",
            instance="factory:9822",
            source="glidein_out",
        ),
    )


def _collector() -> dict[str, Any]:
    col = f'job="{N.JOB_COLLECTOR}"'
    dropping, full = "GwmsCollectorDroppingSpans", "GwmsCollectorQueueNearlyFull"

    def at(instance: str, labels: str) -> str:
        return f'{col},instance="{instance}:8888",{labels}'

    otlp, jaeger = 'receiver="otlp",transport="http"', 'exporter="otlp/jaeger"'
    return group(
        [
            s(N.OTELCOL_RECEIVER_REFUSED, at("a", otlp), "0+60x30"),
            s(N.OTELCOL_RECEIVER_REFUSED, at("b", otlp), "0x30"),
            s(N.OTELCOL_EXPORTER_FAILED, at("b", jaeger), "0x30"),
            s(N.OTELCOL_EXPORTER_ENQUEUE_FAILED, at("b", jaeger), "0x30"),
            # Each way of losing spans fires on its own: c fails to send, d cannot enqueue.
            s(N.OTELCOL_EXPORTER_FAILED, at("c", jaeger), "0+60x30"),
            s(N.OTELCOL_EXPORTER_ENQUEUE_FAILED, at("d", jaeger), "0+60x30"),
            s(N.OTELCOL_QUEUE_SIZE, at("a", jaeger), "900x30"),
            s(N.OTELCOL_QUEUE_CAPACITY, at("a", jaeger), "1000x30"),
            s(N.OTELCOL_QUEUE_SIZE, at("b", jaeger), "800x30"),  # 80%: quiet
            s(N.OTELCOL_QUEUE_CAPACITY, at("b", jaeger), "1000x30"),
        ],
        quiet("4m", dropping),
        firing(
            "15m",
            dropping,
            *(
                expect(
                    "warning",
                    "factory",
                    "The collector drops spans",
                    f"The collector {i}:8888 refuses or fails to export 1.00 spans/s.",
                    instance=f"{i}:8888",
                )
                for i in "acd"
            ),
        ),
        quiet("4m", full),
        fires(
            "15m",
            full,
            "warning",
            "factory",
            "The collector's export queue is nearly full",
            "The export queue of collector a:8888 is 90% full; spans will be dropped when it is full.",
            instance="a:8888",
        ),
    )


def _recording() -> dict[str, Any]:
    # 90 goodput and 30 badput core-seconds a minute: 25% badput, 7,200 job core-seconds an hour.
    def sample(name: str, labels: str, value: float) -> dict[str, Any]:
        return {"expr": name, "eval_time": "70m", "exp_samples": [{"labels": f"{name}{{{labels}}}", "value": value}]}

    es = 'entry="E",site="S"'
    return {
        "interval": "1m",
        "input_series": [cpu("E", "S", "goodput", "0+90x80"), cpu("E", "S", "preemption_badput", "0+30x80")],
        "promql_expr_test": [
            sample(N.RR_BADPUT_RATIO, es, 0.25),
            sample(N.RR_JOB_SECONDS, es, 7200),
            {
                "expr": f'{N.RR_CPU_RATE}{{category="goodput"}}',
                "eval_time": "10m",
                "exp_samples": [
                    {
                        "labels": f'{N.RR_CPU_RATE}{{entry="E",client="fe",site="S",'
                        'accuracy="exact",category="goodput"}',
                        "value": 1.5,
                    }
                ],
            },
        ],
    }


def _two_factories() -> dict[str, Any]:
    """Two factories' exporters on one Prometheus, each with its factory label (the scrape target's),
    with an entry of the same name at the same site: the recorded series and alerts stay per factory.
    Summed, the badput would be one 43% and the validation failures one 33% alert with no factory."""
    P, name = catalogue.PILOTS.name, "GwmsSiteValidationFailuresRising"
    vf, ran = 'outcome="validation_failed"', 'outcome="ran_jobs"'

    def at(factory: str, extra: str) -> str:
        return pool("E", "S", extra=f'factory="{factory}",{extra}')

    def ratio(factory: str, value: float) -> dict[str, Any]:
        return {"labels": f'{N.RR_BADPUT_RATIO}{{factory="{factory}",entry="E",site="S"}}', "value": value}

    cpu_ = catalogue.CPU_SECONDS.name
    return {
        **group(
            [
                s(cpu_, at("fa", 'category="goodput",accuracy="exact"'), "0+90x120"),
                s(cpu_, at("fa", 'category="preemption_badput",accuracy="exact"'), "0+30x120"),
                s(cpu_, at("fb", 'category="goodput",accuracy="exact"'), "0+60x120"),
                s(cpu_, at("fb", 'category="preemption_badput",accuracy="exact"'), "0+60x120"),
                # half of fa's pilots fail validation, none of fb's
                s(P, at("fa", vf), "0+1x120"),
                s(P, at("fa", ran), "0+1x120"),
                s(P, at("fb", ran), "0+1x120"),
            ],
            site_fires(
                "90m",
                name,
                "E",
                "S",
                "Pilots fail validation at S (E)",
                "60 pilots of entry E at site S failed worker-node validation in the last 1h,"
                " more than 25% of its pilots.",
                factory="fa",
            ),
        ),
        "promql_expr_test": [
            {"expr": N.RR_BADPUT_RATIO, "eval_time": "70m", "exp_samples": [ratio("fa", 0.25), ratio("fb", 0.5)]}
        ],
    }


def tests_yaml(rule_files: list[str], more: Sequence[dict[str, Any]] = ()) -> str:
    tests = [_validation(), _held(), _no_match(), _badput(), _stale_and_downtime(), _exporter_health(), _collector()]
    tests.append(_two_factories())
    tests += _down(
        N.JOB_EXPORTER,
        "GwmsExporterDown",
        "The gwms-obs exporter is down",
        "Prometheus cannot scrape the gwms-obs exporter{}; factory metrics are not collected.",
    )
    tests += _down(
        N.JOB_COLLECTOR,
        "GwmsCollectorDown",
        "The OpenTelemetry Collector is down",
        "Prometheus cannot scrape the collector{}; pilot traces are being lost.",
    )
    tests += _down(
        N.JOB_CONTROLLER,
        "GwmsControllerDown",
        "The gwms-obs monitoring controller is down",
        "Prometheus cannot scrape the monitoring controller{}; pilots get no answer and trace at the factory's"
        " default verbosity, and no rule can be changed.",
        severity="warning",
    )
    tests += [_runbook_base(), _recording(), *more]  # more: the site-health groups (health_tests.py)
    doc = {"rule_files": rule_files, "evaluation_interval": "1m", "tests": tests}
    head = "# Generated by `make generate` (dashboards/gen/rule_tests.py); do not edit by hand.\n"
    return head + yaml.safe_dump(doc, sort_keys=False, width=1000)
