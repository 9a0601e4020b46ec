"""Dashboards, rules and rule tests for gwms-obs, generated from the metric catalogue.

A library: :func:`render_all` returns every file it generates, keyed by its
path relative to the repository root. ``make generate`` (tools/generate.py)
writes them with the repository's other generated files, and
tests/test_generated.py fails when a committed one differs. This is a
build-time tool: factory hosts receive the JSON and YAML, never this code
(grafana-foundation-sdk needs Python >= 3.11).
"""

from __future__ import annotations

from . import dashboards, rule_tests, rules

RULES = "dashboards/rules"


def render_all() -> dict[str, str]:
    """{path relative to the repository root: text} of every file this package generates."""
    files = {
        f"{RULES}/gwms-recording.rules.yml": rules.recording_yaml(),
        f"{RULES}/gwms-alerts.rules.yml": rules.alerts_yaml(),
        # promtool resolves rule_files relative to the test file.
        f"{RULES}/tests/gwms-alerts.test.yml": rule_tests.tests_yaml(
            ["../gwms-recording.rules.yml", "../gwms-alerts.rules.yml"]
        ),
    }
    return {**files, **dashboards.grafana_json()}
