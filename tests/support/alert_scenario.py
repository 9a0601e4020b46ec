"""One site going bad, told the same way to every stack the tests run.

The live alerting test (real processes on 127.0.0.1) and the compose stack
test (the same programs in containers) share the scenario and its checks:
a simulated factory with a healthy site (Nebraska), a site whose pilots fail
validation (FailSite) and a GPU entry; half of FailSite's pilots held back
until Prometheus has a baseline, then released; rules with seconds instead
of hours (``FAST``), thresholds unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from dashboards import gen
from dashboards.gen import config, lint
from dashboards.gen import names as N
from dashboards.gen.boards.frontend import FRONTEND
from gwms_obs import catalogue
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from tests.support.servers import prom_query, wait_for
from tools.mailsink import Mail

GOOD, BAD = DEFAULT_ENTRIES[0], DEFAULT_ENTRIES[1]  # Nebraska (healthy), FailSite (validation fails)
GPU = next(e for e in DEFAULT_ENTRIES if "GPU" in e.name)  # so the GPU accounting panels have data
ENTRIES = (GOOD, BAD, GPU)
assert "Nebraska" in GOOD.name and "FAIL_VALIDATION" in BAD.name
GOOD_ADMIN, BAD_ADMIN = "admin@nebraska.test", "admin@failsite.test"
CONTACTS = {
    "factory_ops": ["ops@factory.test"],
    "sites": {
        GOOD.site: {"admins": [GOOD_ADMIN], "entries": [GOOD.name]},
        BAD.site: {"admins": [BAD_ADMIN], "entries": [BAD.name]},
    },
}
FAST = config.Timing(window="20s", short_window="20s", for_site="0s", for_stack="0s", for_held="30m")
# Alertmanager's waits in seconds, so the firing and resolved mails come within a test
FAST_ALERTMANAGER = {
    "alertmanager_group_wait": "1s",
    "alertmanager_group_interval": "2s",
    "alertmanager_repeat_interval": "1h",
}
ALERT = "GwmsSiteValidationFailuresRising"
GRAFANA_VARS = {"entry": ".*", "client": ".*", "site": ".*", "datasource": "prometheus"}


def move_pilots(factory: Path, dest: Path, outs: list[Path]) -> list[Path]:
    """Move these pilots' .out and .err from ``factory`` to the same place under ``dest``;
    returns where their .out went."""
    for out in outs:
        for f in (out, out.with_suffix(".err")):
            if f.exists():
                rel = f.relative_to(factory)
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(f, dest / rel)
    return [dest / o.relative_to(factory) for o in outs]


def hold_back(factory: Path, dest: Path, entry: str = BAD.name) -> int:
    """Move the newer half of ``entry``'s pilot files out of the factory (and its completed_jobs,
    so those pilots are not counted from there first). Returns the number of pilots held back."""
    outs = sorted(factory.glob(f"client/*/*/entry_{entry}/job.*.out"), key=lambda p: int(p.name.split(".")[1]))
    late = outs[len(outs) // 2 :]
    dest.mkdir()
    move_pilots(factory, dest, late)
    for f in factory.glob(f"server/entry_{entry}/completed_jobs_*.log"):
        f.unlink()
    return len(late)


def release(held: Path, factory: Path) -> None:
    # .err before .out: the exporter finds pilots by their .out and reads the .err with it.
    for suffix in (".err", ".out"):
        for f in sorted(held.rglob(f"*{suffix}")):
            dst = factory / f.relative_to(held)
            os.replace(f, dst)


def to(mails: list[Mail], addr: str, kind: str) -> list[str]:
    return [m.subject for m in mails if addr in m.rcpt_tos and m.subject.startswith(f"[{kind}")]


def site_fires(prom: str, mails: Callable[[], list[Mail]], factory: Path, held: Path) -> Mail:
    """Release the held failures: FailSite's admins get the firing mail, nobody else a site's.
    Returns that mail for the caller's own checks."""
    vf = f'{catalogue.PILOTS.name}{{entry="{BAD.name}",outcome="validation_failed"}}'
    # A baseline: the counter is known for a few scrapes before the failures arrive.
    wait_for("a baseline of FailSite's failures", lambda: prom_query(prom, f"count_over_time({vf}[1m]) >= 3"), 90)
    before = float(prom_query(prom, vf)[0]["value"][1])
    assert not [m for m in mails() if "admin@" in " ".join(m.rcpt_tos)], "a site was mailed before going bad"
    release(held, factory)
    wait_for("the failures in Prometheus", lambda: float(prom_query(prom, vf)[0]["value"][1]) >= before + 10, 60)

    # Its site may fire other alerts too (GwmsSiteFailing, one thread each): wait for this one's.
    def this_alert() -> list[str]:
        return [s for s in to(mails(), BAD_ADMIN, "FIRING") if ALERT in s]

    fired = wait_for(f"FailSite's {ALERT} mail", this_alert, 60)
    assert BAD.site in fired[0]
    return next(m for m in mails() if BAD_ADMIN in m.rcpt_tos and m.subject == fired[0])


def site_resolves(mails: Callable[[], list[Mail]]) -> None:
    """No more failures come: resolved mails follow; one firing mail per alert (site routes thread
    by site and alert), none to Nebraska."""
    wait_for("FailSite's resolved mail", lambda: to(mails(), BAD_ADMIN, "RESOLVED"), 120)
    final = mails()
    firing = to(final, BAD_ADMIN, "FIRING")
    assert firing and all(s.startswith("[FIRING:1]") for s in firing), firing  # one alert per thread
    names = [s.split("] ", 1)[1].split()[0] for s in firing]  # "[FIRING:1] <alertname> <site> (...)"
    assert len(names) == len(set(names)), f"an alert was mailed twice: {firing}"
    assert ALERT in names
    assert [m for m in final if GOOD_ADMIN in m.rcpt_tos] == []


_CONTROLLER_NAMES = frozenset(n for m in catalogue.CONTROLLER_METRICS for n in catalogue.exposition_names(m))


def _controller_query(expr: str) -> bool:
    return bool(lint.metric_names(expr) & _CONTROLLER_NAMES) or f'job="{N.JOB_CONTROLLER}"' in expr


def dashboard_queries_without_data(
    prom: str, *, collector: bool, variables: dict[str, str] | None = None
) -> tuple[list[str], int]:
    """Run every panel query of every dashboard; (queries with no data, queries of collector
    metrics). Without a collector (``collector=False``) those are run but not expected to have data,
    nor the monitoring controller's: that stack runs neither (the compose stack runs both).
    ``variables``: the dashboards' variables other than their defaults (a factory chosen)."""
    # Rates over 30 s need a few scrapes; the recording rules a few evaluations.
    wait_for("recording rules", lambda: prom_query(prom, N.RR_CPU_RATE), 90)
    empty, collector_only = [], 0
    # Panels of problems draw something only while a site is not green (the site-health live
    # test checks them while one is failing).
    problems_only = (N.RR_SITE_PROBLEM, f"{N.RR_SITE_STATUS} > 0")
    # So do the factory operator's troubles (held now, CEs down, condor_submit failing): their own
    # live tests draw them while an entry has one (test_operator_live, test_submit_failing_live,
    # test_why_not_running_live).
    troubles = (
        catalogue.HELD_GLIDEINS,
        catalogue.ENTRY_CE_DOWN,
        catalogue.ENTRY_CE_DOWN_SINCE,
        catalogue.SUBMIT_FAILURES,
    )
    trouble_only = {m.name for m in troubles}
    for rel, text in gen.render_all().items():
        if not rel.startswith("dashboards/grafana/") or rel.endswith(f"/{FRONTEND}.json"):
            continue  # the frontend's board reads a frontend exporter: tests/test_frontend_live.py
        for where, expr in lint.dashboard_exprs(json.loads(text)):
            q = lint.substitute(
                expr.replace("$__rate_interval", "30s").replace("$__range", "5m"), {**GRAFANA_VARS, **(variables or {})}
            )
            res = prom_query(prom, q)  # raises unless Prometheus accepts it
            if lint.metric_names(expr) & N.COLLECTOR_NAMES:
                collector_only += 1
                if not collector:
                    continue
            if not collector and _controller_query(expr):
                continue
            if not res and not any(p in expr for p in problems_only) and not lint.metric_names(expr) & trouble_only:
                empty.append(f"{where}: {q}")
    return empty, collector_only


def panel_queries_without_data(prom: str, uid: str, names: set[str], at_least: int) -> list[str]:
    """The queries of board ``uid``'s panels that read any of ``names`` and still return nothing
    after a bounded wait (a series just born needs a second scrape for rate() and increase());
    fails unless at least ``at_least`` such queries exist."""
    board = json.loads(gen.render_all()[f"dashboards/grafana/{uid}.json"])
    mine = [(where, expr) for where, expr in lint.dashboard_exprs(board) if lint.metric_names(expr) & names]
    assert len(mine) >= at_least, mine
    vars_ = {**GRAFANA_VARS, "topn": "10"}
    empty = []
    for where, expr in mine:
        q = lint.substitute(expr.replace("$__rate_interval", "5m").replace("$__range", "10m"), vars_)
        try:
            wait_for(where, lambda q=q: prom_query(prom, q), 30)
        except TimeoutError:
            empty.append(f"{where}: {q}")
    return empty


def make_factory(work: Path) -> tuple[Path, Path]:
    """The scenario's factory under ``work``, FailSite's later half held back; (factory, held)."""
    factory, held = work / "factory", work / "held"
    simulate(factory, 500, seed=5, start=time.time() - 48 * 3600, entries=ENTRIES)
    # One unreadable .out, as a factory always has: the parse-error panels have a series.
    (next(factory.glob(f"client/*/*/entry_{GOOD.name}")) / "job.999999.0.out").write_bytes(b"\x00garbage\n")
    assert hold_back(factory, held) >= 30
    return factory, held
