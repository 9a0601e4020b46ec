"""``python -m dashboards.gen``: write every generated dashboard, rule and config file."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

from tools.generate import write

from . import alerting, dashboards, rule_tests, rules
from .alerting import render

RULES = "dashboards/rules"


def generated() -> dict[str, Callable[[], str]]:
    files: dict[str, Callable[[], str]] = {
        f"{RULES}/gwms-recording.rules.yml": rules.recording_yaml,
        f"{RULES}/gwms-alerts.rules.yml": rules.alerts_yaml,
        # promtool resolves rule_files relative to the test file.
        f"{RULES}/tests/gwms-alerts.test.yml": lambda: rule_tests.tests_yaml(
            ["../gwms-recording.rules.yml", "../gwms-alerts.rules.yml"]
        ),
        "dashboards/alerting/alertmanager.example.yml": alerting.example_config,
        "dashboards/provisioning/datasources/gwms-obs.yml": lambda: render("grafana", "datasources.yml.j2"),
        "dashboards/provisioning/dashboards/gwms-obs.yml": lambda: render("grafana", "dashboards.yml.j2"),
    }
    for path, text in dashboards.render().items():
        files[path] = functools.partial(str, text)
    return files


def render_all() -> dict[str, str]:
    return {path: fn() for path, fn in generated().items()}


def main() -> int:
    write(render_all())
    return 0


if __name__ == "__main__":
    sys.exit(main())
