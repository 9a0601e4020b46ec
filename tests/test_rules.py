"""promtool checks the rules and runs their unit tests; every alert is tested, and thresholds are pinned by them."""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from dashboards.gen import health, lint, rulefiles, rules
from dashboards.gen import names as N
from gwms_obs import catalogue
from tests.support.servers import have
from tools import ROOT

pytestmark = pytest.mark.skipif(not have("promtool"), reason="Debian prometheus (promtool) not installed")
RULES = ROOT / "dashboards/rules"
RECORDING = RULES / "gwms-recording.rules.yml"
TESTS = RULES / "tests/gwms-alerts.test.yml"
SLOW_TESTS = RULES / "tests/gwms-site-health.test.yml"  # trends: days of history, rules every 10 minutes


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60, check=False, cwd=cwd)


def test_promtool_check_rules() -> None:
    r = promtool("check", "rules", str(RECORDING), str(RULES / "gwms-alerts.rules.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_test_rules() -> None:
    r = promtool("test", "rules", str(TESTS), str(SLOW_TESTS))
    assert r.returncode == 0 and r.stdout.count("SUCCESS") == 2, r.stdout + r.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    doc = yaml.safe_load(TESTS.read_text())
    firing: set[str] = set()
    quiet: set[str] = set()
    for t in doc["tests"]:
        for case in t.get("alert_rule_test", []):
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    names = {a.name for a in rulefiles.all_alerts()}
    assert names == firing, names ^ firing
    assert names == quiet, names ^ quiet


def test_rules_name_no_factory_and_need_no_global_tier() -> None:
    """Each factory's Prometheus evaluates the rules on its own series, which have no replica label there
    (an external label, attached by Thanos): a rule selecting, grouping, matching or templating on one
    would match nothing or mean nothing, and no alert may read the global tier (thanos_*). The factory
    label is no rule's selector or template either; the per-entry rules keep it (names.ENTRY_KEY): the
    exporter's series carry it as a scrape label (prometheus_factory_name), and where it is absent the
    grouping is the same as without it (issue 31)."""
    external = {catalogue.FACTORY_LABEL, catalogue.REPLICA_LABEL}
    grouping = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
    checked = 0
    for rel in ("gwms-recording.rules.yml", "gwms-alerts.rules.yml"):
        for g in yaml.safe_load((RULES / rel).read_text())["groups"]:
            for r in g["rules"]:
                name, expr = r.get("alert") or r["record"], r["expr"]
                tree = lint.pp.parse(lint.substitute(expr))
                for sel in lint.selectors(tree):
                    assert not sel.name.startswith("thanos_"), (name, sel)
                    assert not external & {m.name for m in sel.matchers.matchers}, (name, sel)
                for labels in grouping.findall(expr):
                    assert catalogue.REPLICA_LABEL not in {x.strip() for x in labels.split(",")}, (name, labels)
                templates = " ".join([*r.get("labels", {}).values(), *r.get("annotations", {}).values()])
                assert not any(f"Labels.{x}" in templates or f"labels.{x}" in templates for x in external), name
                assert not external & set(r.get("labels", {})), name
                checked += 1
    assert checked > 30


# What rules.runbook_url() renders: the operator's base (an external label) or the default, then the anchor.
_RUNBOOK_URL = re.compile(
    r"\{\{ with \$externalLabels\.(\w+) \}\}\{\{ \. \}\}\{\{ else \}\}([^{}#]+)\{\{ end \}\}#([a-z0-9-]+)"
)


def test_every_alert_has_summary_description_with_value_and_runbook() -> None:
    doc = yaml.safe_load((RULES / "gwms-alerts.rules.yml").read_text())
    runbook = (ROOT / rules.RUNBOOK_DOC).read_text()
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', runbook))
    for r in doc["groups"][0]["rules"]:
        ann = r["annotations"]
        assert ann["summary"] and ("$value" in ann["description"] or "$labels" in ann["description"]), r["alert"]
        m = _RUNBOOK_URL.fullmatch(ann["runbook_url"])
        assert m, f"{r['alert']}: runbook_url {ann['runbook_url']!r} is not built from the base URL"
        label, base, anchor = m.groups()
        assert label == rules.RUNBOOK_BASE_LABEL and base == rules.RUNBOOK_BASE_URL, r["alert"]
        assert anchor in anchors, f"{r['alert']}: no anchor {anchor} in {rules.RUNBOOK_DOC}"
        assert r["labels"]["severity"] in ("info", "warning", "critical")
        assert r["labels"]["audience"] in ("site", "factory", "shifters", "frontend")


def test_runbook_links_are_absolute_and_the_default_is_this_repositorys_doc() -> None:
    """The default base is an absolute https URL of the very document whose anchors are checked above."""
    assert rules.RUNBOOK_BASE_URL.startswith("https://") and rules.RUNBOOK_BASE_URL.endswith("/" + rules.RUNBOOK_DOC)
    # promtool expands the template (test_promtool_test_rules): every firing case expects an absolute link,
    # the default's or, where the test sets the operator's external label, that one.
    tests = yaml.safe_load(TESTS.read_text())
    bases: set[str] = set()
    for t in tests["tests"]:
        base = t.get("external_labels", {}).get(rules.RUNBOOK_BASE_LABEL, rules.RUNBOOK_BASE_URL)
        for case in t.get("alert_rule_test", []):
            for a in case["exp_alerts"]:
                assert a["exp_annotations"]["runbook_url"] == f"{base}#{case['alertname'].lower()}"
                bases.add(base)
    assert rules.RUNBOOK_BASE_URL in bases and len(bases) == 2, bases  # the default, and an operator's


def _thresholds(text: str) -> list[re.Match[str]]:
    return list(re.finditer(r"(?<=[>=] )(\d+(?:\.\d+)?)(?=[ \n'\")]|$)", text))


def _only(alert: dict[str, object], tests: dict[str, list[dict[str, object]]]) -> dict[str, object]:
    """The unit tests of one alert, against the recording rules and only that alert (fast to evaluate)."""
    groups = []
    for g in tests["tests"]:
        cases = [c for c in g.get("alert_rule_test", []) if c["alertname"] == alert["alert"]]  # type: ignore[union-attr]
        if cases:
            groups.append({**g, "alert_rule_test": cases, "promql_expr_test": []})
    return {"rule_files": [RECORDING.name, "rules.yml"], "evaluation_interval": "1m", "tests": groups}


def test_changing_any_threshold_breaks_the_unit_tests(tmp_path: Path) -> None:
    """Each comparison constant of each alert, made 25% more sensitive, must fail `promtool test rules`.

    This is what keeps a threshold from being changed without its test.
    """
    tests = yaml.safe_load(TESTS.read_text())
    doc = yaml.safe_load((RULES / "gwms-alerts.rules.yml").read_text())
    jobs: list[tuple[Path, str]] = []
    baselines: list[Path] = []
    for rule in doc["groups"][0]["rules"]:
        expr = rule["expr"]
        base = tmp_path / f"base-{rule['alert']}"
        base.mkdir()
        shutil.copy(RECORDING, base)  # some alerts read recorded series
        (base / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "m", "rules": [rule]}]}, width=1000))
        (base / "t.yml").write_text(yaml.safe_dump(_only(rule, tests), width=1000))
        baselines.append(base)
        for m in _thresholds(expr):
            v = float(m.group(1))
            new = v * 0.75 if v else 1.5  # `> 0` made stricter instead: nothing is left to fire
            if "==" in expr[max(0, m.start() - 3) : m.start()]:
                new = v + 0.5  # an equality: any change must stop the match
            d = tmp_path / f"m{len(jobs)}"
            d.mkdir()
            shutil.copy(RECORDING, d)
            bad = {**rule, "expr": expr[: m.start()] + f"{new:g}" + expr[m.end() :]}
            (d / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "m", "rules": [bad]}]}, width=1000))
            (d / "t.yml").write_text(yaml.safe_dump(_only(rule, tests), width=1000))
            jobs.append((d, f"{rule['alert']}: threshold {m.group(1)} -> {new:g}"))
    with ThreadPoolExecutor(max_workers=4) as pool:
        # Unmutated, the reduced tests must pass, or a failing mutant would prove nothing.
        for b, r in zip(
            baselines, pool.map(lambda d: promtool("test", "rules", "t.yml", cwd=d), baselines), strict=True
        ):
            assert r.returncode == 0, f"{b.name}: {r.stdout}{r.stderr}"
        results = list(pool.map(lambda j: promtool("test", "rules", "t.yml", cwd=j[0]), jobs))
    survivors = [what for (_, what), r in zip(jobs, results, strict=True) if r.returncode == 0]
    assert not survivors, f"mutants the unit tests do not catch: {survivors}"
    assert len(jobs) >= 15


def test_every_site_health_reason_is_in_the_runbook() -> None:
    runbook = (ROOT / rules.RUNBOOK_DOC).read_text()
    for reason in health.Reason:
        assert f"| `{reason}` |" in runbook, reason
    assert {p.reason for p in health.problems()} == set(health.Reason)


def test_changing_any_site_health_threshold_breaks_the_unit_tests(tmp_path: Path) -> None:
    """The same for the site-health problems (recording rules, dashboards/gen/health.py): each
    threshold 25% more sensitive must fail the promtool tests of that problem's reason."""
    rec = yaml.safe_load(RECORDING.read_text())
    docs = [yaml.safe_load(TESTS.read_text()), yaml.safe_load(SLOW_TESTS.read_text())]
    jobs: list[tuple[Path, str]] = []
    baselines: list[Path] = []
    for i, rule in enumerate(rec["groups"][0]["rules"]):
        if rule["record"] != N.RR_SITE_PROBLEM:
            continue
        reason = re.search(r'"reason", "(\w+)"', rule["expr"])
        assert reason, rule
        checks = f'reason="{reason.group(1)}"'
        per_doc = [
            [
                {
                    **g,
                    "alert_rule_test": [],
                    "promql_expr_test": [c for c in g["promql_expr_test"] if checks in c["expr"]],
                }
                for g in doc["tests"]
                if any(checks in c["expr"] for c in g.get("promql_expr_test", []))
            ]
            for doc in docs
        ]
        tests = [
            {"rule_files": ["rec.yml"], "evaluation_interval": doc["evaluation_interval"], "tests": groups}
            for doc, groups in zip(docs, per_doc, strict=True)
            if groups
        ]
        assert tests, f"no promtool test checks {checks}"

        def write(d: Path, expr: str) -> Path:
            d.mkdir()
            rules_ = [dict(r) for r in rec["groups"][0]["rules"]]
            rules_[i]["expr"] = expr  # noqa: B023 - written at once
            (d / "rec.yml").write_text(yaml.safe_dump({"groups": [{"name": "m", "rules": rules_}]}, width=1000))
            for k, t in enumerate(tests):  # noqa: B023
                (d / f"t{k}.yml").write_text(yaml.safe_dump(t, width=1000))
            return d

        baselines.append(write(tmp_path / f"base{i}", rule["expr"]))
        for m in _thresholds(rule["expr"]):
            v = float(m.group(1))
            new = v * 0.75 if v else 1.5
            d = write(tmp_path / f"m{len(jobs)}", rule["expr"][: m.start()] + f"{new:g}" + rule["expr"][m.end() :])
            jobs.append((d, f"{reason.group(1)}: threshold {m.group(1)} -> {new:g}"))

    def run(d: Path) -> subprocess.CompletedProcess[str]:
        return promtool("test", "rules", *sorted(p.name for p in d.glob("t*.yml")), cwd=d)

    with ThreadPoolExecutor(max_workers=4) as pool:
        for b, r in zip(baselines, pool.map(run, baselines), strict=True):
            assert r.returncode == 0, f"{b.name}: {r.stdout}{r.stderr}"
        results = list(pool.map(lambda j: run(j[0]), jobs))
    survivors = [what for (_, what), r in zip(jobs, results, strict=True) if r.returncode == 0]
    assert not survivors, f"mutants the unit tests do not catch: {survivors}"
    assert len(jobs) >= 15
