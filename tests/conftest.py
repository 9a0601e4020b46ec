"""Under `make test` (GWMS_OBS_STRICT_SKIPS=1) a skip is a failure unless ALLOWED_SKIPS names it.

`make test` runs every test: a test skipped because a prerequisite is missing
(a Debian package, root for systemd-nspawn, a binary `make` builds) would
leave the suite green with that test never run. The only skips allowed are
what this machine cannot provide and no install fixes, each listed below with
why. GWMS_OBS_ALLOW_SKIP=1 (README, Testing) turns this off; `make check`
never sets GWMS_OBS_STRICT_SKIPS.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from tests.support.reference import REFERENCE
from tests.support.reference import SKIP_REASON as REFERENCE_SKIP


def _dashboard_linter_refused() -> bool:
    """The Makefile tried to build the linter and the Go proxy refused one of its modules."""
    linter = Path(os.environ.get("GWMS_OBS_DASHBOARD_LINTER", "/nonexistent"))
    log = linter.parent / "dashboard-linter-build.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    return bool(re.search(r"403 Forbidden|This module version is not available", text))


# skip reason (regex, matched at its start) -> condition under which it is allowed
ALLOWED_SKIPS: dict[str, Callable[[], bool]] = {
    # tests/test_grafana_container.py: no image registry here, so no Grafana image (an engine runs)
    r"no Grafana image: ": lambda: True,
    # tests/test_deploy_nspawn.py: Grafana has no Debian package and cannot be downloaded here
    r"Grafana server not deployed: no Debian package exists": lambda: True,
    # tests/test_dashboard_linter.py: only when its build failed because the Go proxy refused a module
    r"dashboard-linter not built at": _dashboard_linter_refused,
    # tests that read a real factory file: only in a clone without ../shared/reference beside it
    re.escape(REFERENCE_SKIP): lambda: not REFERENCE.is_dir(),
}


def strict() -> bool:
    return os.environ.get("GWMS_OBS_STRICT_SKIPS") == "1" and os.environ.get("GWMS_OBS_ALLOW_SKIP") != "1"


def skip_reason(longrepr: Any) -> str:
    # a skip's longrepr is (path, line, "Skipped: reason")
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def allowed(reason: str) -> bool:
    return any(re.match(pat, reason) and ok() for pat, ok in ALLOWED_SKIPS.items())


def _fail_unless_allowed(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not (report.skipped and strict()) or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report.longrepr)
    if not allowed(reason):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under `make test`, which runs every test: {reason}\n"
            "install the prerequisites (`sudo make prereqs`), or allow skips with GWMS_OBS_ALLOW_SKIP=1"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    _fail_unless_allowed(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield  # a module-level skip (pytest.importorskip ...) is a skipped collection
    _fail_unless_allowed(report)
    return report
