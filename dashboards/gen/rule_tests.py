"""promtool unit tests for every alert: each fires where it must and stays quiet just below.

The numbers here are literals, deliberately not taken from rules.py: a
threshold or ``for:`` changed there without changing these tests fails
`promtool test rules`. Metric names still come from the catalogue.
"""

from __future__ import annotations

from typing import Any

import yaml

from gwms_obs import catalogue

from . import names as N
from .rules import RUNBOOK

EXP = f'job="{N.JOB_EXPORTER}",instance="factory:9822"'


def s(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{name}{{{labels}}}", "values": values}


def pool(entry: str, site: str, client: str = "fe", extra: str = "") -> str:
    lab = f'entry="{entry}",client="{client}",site="{site}",{EXP}'
    return f"{lab},{extra}" if extra else lab


def alert(
    entry: str | None,
    site: str | None,
    severity: str,
    audience: str,
    summary: str,
    description: str,
    anchor: str,
    **labels: str,
) -> dict[str, Any]:
    lab = {"severity": severity, "audience": audience, **labels}
    if entry is not None:
        lab["entry"] = entry
    if site is not None:
        lab["site"] = site
    return {
        "exp_labels": lab,
        "exp_annotations": {"summary": summary, "description": description, "runbook_url": f"{RUNBOOK}#{anchor}"},
    }


def _validation() -> dict[str, Any]:
    P = catalogue.PILOTS.name
    vf, ran = 'outcome="validation_failed"', 'outcome="ran_jobs"'
    return {
        "interval": "1m",
        "input_series": [
            # 60 failures/h, half of the pilots: fires.
            s(P, pool("E_bad", "S_bad", extra=vf), "0+1x120"),
            s(P, pool("E_bad", "S_bad", extra=ran), "0+1x120"),
            # 60 failures/h but only 20% of the pilots: quiet (threshold 25%).
            s(P, pool("E_ratio", "S_ratio", extra=vf), "0+1x120"),
            s(P, pool("E_ratio", "S_ratio", extra=ran), "0+4x120"),
            # All pilots fail, but only 9 in the hour: quiet (threshold 10).
            s(P, pool("E_few", "S_few", extra=vf), "0+0.15x120"),
        ],
        "alert_rule_test": [
            {"eval_time": "12m", "alertname": "GwmsSiteValidationFailuresRising", "exp_alerts": []},  # pending
            {
                "eval_time": "90m",
                "alertname": "GwmsSiteValidationFailuresRising",
                "exp_alerts": [
                    alert(
                        "E_bad",
                        "S_bad",
                        "warning",
                        "site",
                        "Pilots fail validation at S_bad (E_bad)",
                        "60 pilots of entry E_bad at site S_bad failed worker-node validation in the last 1h,"
                        " more than 25% of its pilots.",
                        "gwmssitevalidationfailuresrising",
                    )
                ],
            },
        ],
    }


def _held() -> dict[str, Any]:
    G = catalogue.ENTRY_GLIDEINS.name
    h = 'state="held"'
    return {
        "interval": "1m",
        "input_series": [
            s(G, pool("E_bad", "S_bad", extra=h), "25x60"),
            s(G, pool("E_ok", "S_ok", extra=h), "19x60"),  # below 20: quiet
            # Two clients with 10 each: the entry has 20 held, fires.
            s(G, pool("E_two", "S_two", "fe1", h), "10x60"),
            s(G, pool("E_two", "S_two", "fe2", h), "10x60"),
            s(G, pool("E_run", "S_run", extra='state="running"'), "500x60"),  # not held
        ],
        "alert_rule_test": [
            {"eval_time": "25m", "alertname": "GwmsPilotsHeld", "exp_alerts": []},  # for: 30m
            {
                "eval_time": "45m",
                "alertname": "GwmsPilotsHeld",
                "exp_alerts": [
                    alert(
                        "E_bad",
                        "S_bad",
                        "warning",
                        "site",
                        "Pilots held at S_bad (E_bad)",
                        "25 glideins of entry E_bad are held in the factory queue.",
                        "gwmspilotsheld",
                    ),
                    alert(
                        "E_two",
                        "S_two",
                        "warning",
                        "site",
                        "Pilots held at S_two (E_two)",
                        "20 glideins of entry E_two are held in the factory queue.",
                        "gwmspilotsheld",
                    ),
                ],
            },
        ],
    }


def _no_match() -> dict[str, Any]:
    P = catalogue.PILOTS.name
    nm, ran = 'outcome="no_match"', 'outcome="ran_jobs"'
    return {
        "interval": "1m",
        "input_series": [
            s(P, pool("E_bad", "S_bad", extra=nm), "0+1x150"),
            s(P, pool("E_bad", "S_bad", extra=ran), "0+0.5x150"),  # 67% never matched: fires
            s(P, pool("E_ratio", "S_ratio", extra=nm), "0+1x150"),
            s(P, pool("E_ratio", "S_ratio", extra=ran), "0+1.1x150"),  # 48%: quiet (threshold 50%)
            s(P, pool("E_few", "S_few", extra=nm), "0+0.15x150"),  # 9 in the hour: quiet
        ],
        "alert_rule_test": [
            {"eval_time": "30m", "alertname": "GwmsPilotsNeverMatched", "exp_alerts": []},
            {
                "eval_time": "120m",
                "alertname": "GwmsPilotsNeverMatched",
                "exp_alerts": [
                    alert(
                        "E_bad",
                        "S_bad",
                        "warning",
                        "factory",
                        "Pilots of E_bad never get a job",
                        "60 pilots of entry E_bad ended without running a job in the last 1h,"
                        " more than half of its pilots.",
                        "gwmspilotsnevermatched",
                    )
                ],
            },
        ],
    }


def _badput() -> dict[str, Any]:
    C = catalogue.CPU_SECONDS.name

    def cpu(entry: str, site: str, cat: str, values: str) -> dict[str, str]:
        return s(C, pool(entry, site, extra=f'category="{cat}",accuracy="exact"'), values)

    return {
        "interval": "1m",
        "input_series": [
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
        "alert_rule_test": [
            {"eval_time": "60m", "alertname": "GwmsEntryBadputHigh", "exp_alerts": []},  # pending
            {
                "eval_time": "120m",
                "alertname": "GwmsEntryBadputHigh",
                "exp_alerts": [
                    alert(
                        "E_bad",
                        "S_bad",
                        "warning",
                        "site",
                        "High badput at S_bad (E_bad)",
                        "40% of the user-job CPU time of entry E_bad was badput in the last 1h.",
                        "gwmsentrybadputhigh",
                    )
                ],
            },
        ],
    }


def _stale_and_downtime() -> dict[str, Any]:
    U, D = catalogue.ENTRY_UPDATED.name, catalogue.ENTRY_DOWNTIME.name
    return {
        "interval": "1m",
        "input_series": [
            s(U, f'entry="E_stale",site="S_stale",{EXP}', "0x120"),  # never rewritten
            s(U, f'entry="E_fresh",site="S_fresh",{EXP}', "0+60x120"),  # rewritten every minute
            s(D, f'entry="E_stale",site="S_stale",{EXP}', "0x120"),
            s(D, f'entry="E_fresh",site="S_fresh",{EXP}', "0 0 0 1x117"),
        ],
        "alert_rule_test": [
            {"eval_time": "70m", "alertname": "GwmsEntryInfoStale", "exp_alerts": []},  # 70m old, for 15m
            {
                "eval_time": "100m",
                "alertname": "GwmsEntryInfoStale",
                "exp_alerts": [
                    alert(
                        "E_stale",
                        "S_stale",
                        "warning",
                        "factory",
                        "Entry E_stale status is stale",
                        "The factory last wrote the status of entry E_stale 1h 40m 0s ago.",
                        "gwmsentryinfostale",
                    )
                ],
            },
            {"eval_time": "2m", "alertname": "GwmsEntryInDowntime", "exp_alerts": []},
            {
                "eval_time": "3m",
                "alertname": "GwmsEntryInDowntime",
                "exp_alerts": [
                    alert(
                        "E_fresh",
                        "S_fresh",
                        "info",
                        "factory",
                        "Entry E_fresh is in downtime",
                        "Entry E_fresh at site S_fresh is in downtime; its other alerts are inhibited.",
                        "gwmsentryindowntime",
                    )
                ],
            },
        ],
    }


def _down(job: str, name: str, summary: str, what: str) -> list[dict[str, Any]]:
    inst = f'job="{job}",instance="h:1"'
    anchor = name.lower()
    return [
        {
            "interval": "1m",
            "input_series": [{"series": f"up{{{inst}}}", "values": "1 1 0x20"}],
            "alert_rule_test": [
                {"eval_time": "6m", "alertname": name, "exp_alerts": []},  # down 4m, for: 5m
                {
                    "eval_time": "8m",
                    "alertname": name,
                    "exp_alerts": [
                        alert(
                            None,
                            None,
                            "critical",
                            "factory",
                            summary,
                            what.format(" at h:1"),
                            anchor,
                            job=job,
                            instance="h:1",
                        )
                    ],
                },
            ],
        },
        {
            # The target is gone from Prometheus entirely (no `up` series): absent() fires.
            "interval": "1m",
            "input_series": [{"series": 'up{job="other",instance="h:2"}', "values": "1x20"}],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": name, "exp_alerts": []},
                {
                    "eval_time": "10m",
                    "alertname": name,
                    "exp_alerts": [alert(None, None, "critical", "factory", summary, what.format(""), anchor, job=job)],
                },
            ],
        },
        {
            "interval": "1m",
            "input_series": [{"series": f"up{{{inst}}}", "values": "1x20"}],
            "alert_rule_test": [{"eval_time": "15m", "alertname": name, "exp_alerts": []}],
        },
    ]


def _exporter_health() -> dict[str, Any]:
    L, E = catalogue.LAST_SCAN.name, catalogue.PARSE_ERRORS.name
    return {
        "interval": "1m",
        "input_series": [
            s(L, 'job="gwms-obs",instance="stuck:9822"', "0x150"),
            s(L, 'job="gwms-obs",instance="ok:9822"', "0+60x150"),
            s(E, f'{EXP},source="glidein_out",reason="truncated"', "0+1x150"),  # 60/h: fires
            s(E, f'{EXP},source="glidein_err",reason="truncated"', "0+0.8x150"),  # 48/h: quiet (50)
            # A scan that stopped catching up: the oldest unaccounted .out ages a minute a minute.
            s(catalogue.LAG.name, 'job="gwms-obs",instance="behind:9822",source="glidein_out"', "0+60x150"),
            # An idle factory: nothing waits, however long nothing arrives.
            s(catalogue.LAG.name, 'job="gwms-obs",instance="ok:9822",source="glidein_out"', "0x150"),
            # A young .out waiting to settle: under a minute, again and again.
            s(catalogue.LAG.name, 'job="gwms-obs",instance="ok:9822",source="completed_jobs"', "0 45 0 50 0 40x24"),
        ],
        "alert_rule_test": [
            {"eval_time": "33m", "alertname": "GwmsExporterFallingBehind", "exp_alerts": []},  # > 1800 since 31m
            {
                "eval_time": "40m",
                "alertname": "GwmsExporterFallingBehind",
                "exp_alerts": [
                    alert(
                        None,
                        None,
                        "warning",
                        "factory",
                        "gwms-obs is falling behind on glidein_out",
                        "The oldest glidein_out input not yet accounted by behind:9822 is 40m 0s old;"
                        " the accounting is that far behind.",
                        "gwmsexporterfallingbehind",
                        instance="behind:9822",
                        source="glidein_out",
                    )
                ],
            },
            {"eval_time": "18m", "alertname": "GwmsExporterStalled", "exp_alerts": []},  # 18m old, for 5m
            {
                "eval_time": "30m",
                "alertname": "GwmsExporterStalled",
                "exp_alerts": [
                    alert(
                        None,
                        None,
                        "critical",
                        "factory",
                        "The gwms-obs exporter stopped scanning",
                        "The last scan of gwms-obs stuck:9822 ended 30m 0s ago.",
                        "gwmsexporterstalled",
                        instance="stuck:9822",
                    )
                ],
            },
            {"eval_time": "60m", "alertname": "GwmsExporterParseErrors", "exp_alerts": []},  # pending since ~50m
            {
                "eval_time": "120m",
                "alertname": "GwmsExporterParseErrors",
                "exp_alerts": [
                    alert(
                        None,
                        None,
                        "warning",
                        "factory",
                        "gwms-obs skips unreadable glidein_out input",
                        "60 glidein_out inputs were skipped as unreadable in the last 1h;"
                        " their pilots are missing from the accounting.",
                        "gwmsexporterparseerrors",
                        instance="factory:9822",
                        source="glidein_out",
                    )
                ],
            },
        ],
    }


def _collector() -> dict[str, Any]:
    col = f'job="{N.JOB_COLLECTOR}"'
    return {
        "interval": "1m",
        "input_series": [
            s(N.OTELCOL_RECEIVER_REFUSED, f'{col},instance="a:8888",receiver="otlp",transport="http"', "0+60x30"),
            s(N.OTELCOL_RECEIVER_REFUSED, f'{col},instance="b:8888",receiver="otlp",transport="http"', "0x30"),
            s(N.OTELCOL_EXPORTER_FAILED, f'{col},instance="b:8888",exporter="otlp/jaeger"', "0x30"),
            s(N.OTELCOL_EXPORTER_ENQUEUE_FAILED, f'{col},instance="b:8888",exporter="otlp/jaeger"', "0x30"),
            # Each way of losing spans fires on its own: c fails to send, d cannot enqueue.
            s(N.OTELCOL_EXPORTER_FAILED, f'{col},instance="c:8888",exporter="otlp/jaeger"', "0+60x30"),
            s(N.OTELCOL_EXPORTER_ENQUEUE_FAILED, f'{col},instance="d:8888",exporter="otlp/jaeger"', "0+60x30"),
            s(N.OTELCOL_QUEUE_SIZE, f'{col},instance="a:8888",exporter="otlp/jaeger"', "900x30"),
            s(N.OTELCOL_QUEUE_CAPACITY, f'{col},instance="a:8888",exporter="otlp/jaeger"', "1000x30"),
            s(N.OTELCOL_QUEUE_SIZE, f'{col},instance="b:8888",exporter="otlp/jaeger"', "800x30"),  # 80%: quiet
            s(N.OTELCOL_QUEUE_CAPACITY, f'{col},instance="b:8888",exporter="otlp/jaeger"', "1000x30"),
        ],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "GwmsCollectorDroppingSpans", "exp_alerts": []},
            {
                "eval_time": "15m",
                "alertname": "GwmsCollectorDroppingSpans",
                "exp_alerts": [
                    alert(
                        None,
                        None,
                        "warning",
                        "factory",
                        "The collector drops spans",
                        f"The collector {i}:8888 refuses or fails to export 1.00 spans/s.",
                        "gwmscollectordroppingspans",
                        instance=f"{i}:8888",
                    )
                    for i in "acd"
                ],
            },
            {"eval_time": "4m", "alertname": "GwmsCollectorQueueNearlyFull", "exp_alerts": []},
            {
                "eval_time": "15m",
                "alertname": "GwmsCollectorQueueNearlyFull",
                "exp_alerts": [
                    alert(
                        None,
                        None,
                        "warning",
                        "factory",
                        "The collector's export queue is nearly full",
                        "The export queue of collector a:8888 is 90% full; spans will be dropped when it is full.",
                        "gwmscollectorqueuenearlyfull",
                        instance="a:8888",
                    )
                ],
            },
        ],
    }


def _recording() -> dict[str, Any]:
    C = catalogue.CPU_SECONDS.name
    lab = pool("E", "S", extra='accuracy="exact"')
    return {
        "interval": "1m",
        "input_series": [
            s(C, f'{lab},category="goodput"', "0+90x20"),
            s(C, f'{lab},category="preemption_badput"', "0+30x20"),
        ],
        "promql_expr_test": [
            {
                "expr": N.RR_BADPUT_RATIO,
                "eval_time": "10m",
                "exp_samples": [{"labels": f'{N.RR_BADPUT_RATIO}{{entry="E",site="S"}}', "value": 0.25}],
            },
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


def tests_yaml(rule_files: list[str]) -> str:
    tests = [_validation(), _held(), _no_match(), _badput(), _stale_and_downtime(), _exporter_health(), _collector()]
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
    tests.append(_recording())
    doc = {"rule_files": rule_files, "evaluation_interval": "1m", "tests": tests}
    head = "# Generated by `make dashboards` (dashboards/gen/rule_tests.py); do not edit by hand.\n"
    return head + yaml.safe_dump(doc, sort_keys=False, width=1000)
