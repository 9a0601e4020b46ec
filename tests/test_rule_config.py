"""Thresholds live once, in dashboards/gen/config.py: rules.py and health.py spell none, every
threshold is read, and an alert and the red-light problem with the same condition read the same field."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from dashboards.gen import config, health, rules
from tools import ROOT

READERS = (ROOT / "dashboards/gen/rules.py", ROOT / "dashboards/gen/health.py")
# A comparison with a number in PromQL (or a Go template's query) text.
_COMPARISON = re.compile(r"(?:[<>]=?|==|!=)\s*(\d+(?:\.\d+)?)")
# 0 and 1 are "any at all" and flags (up == 0, downtime == 1, a rate > 0), never a tunable.
_NOT_TUNABLE = {"0", "1"}


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """The literal text of every string in the module, f-strings' constant parts included."""
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def literal_thresholds(source: str) -> list[str]:
    """Where a module spells a threshold of its own: a comparison with a number in its strings, or a
    number outside an enum's members (Status's 0, 1, 2 are the light's colours)."""
    tree = ast.parse(source)
    found = [
        f"line {line}: {m.group(0)!r}"
        for line, text in _strings(tree)
        for m in _COMPARISON.finditer(text)
        if m.group(1) not in _NOT_TUNABLE
    ]
    enum_members = {
        id(n)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef) and any("Enum" in ast.unparse(b) for b in cls.bases)
        for n in ast.walk(cls)
    }
    found += [
        f"line {n.lineno}: {n.value!r}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, int | float)
        and not isinstance(n.value, bool)
        and id(n) not in enum_members
    ]
    return found


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name)
def test_rules_and_health_spell_no_threshold(path: Path) -> None:
    assert literal_thresholds(path.read_text()) == [], f"{path.name}: thresholds belong in config.Thresholds"


def test_the_literal_check_finds_a_threshold() -> None:
    """The check itself: a comparison or a bare number in a reader is found, a flag is not."""
    assert literal_thresholds('X = f"{a} >= 10 and {b} > 0.25"\n') == ["line 1: '>= 10'", "line 1: '> 0.25'"]
    assert literal_thresholds("LIMIT = 3.5\n") == ["line 1: 3.5"]
    assert literal_thresholds('X = f"{a} == 0 or absent({a})"\nclass S(enum.IntEnum):\n    OK = 0\n') == []


def _rendered(c: config.Config) -> tuple[dict[str, str], dict[str, str]]:
    """{alert name: expr} and {problem reason: expr} rendered with ``c``."""
    alerts = {a.name: a.expr for a in rules.alerts(c) + health.alerts(c)}
    problems = {str(p.reason): p.expr for p in health.problems(c)}
    return alerts, problems


# An alert and the red-light problem stating its condition read the same fields.
SHARED = {
    "validation_failed_pilots": ({"GwmsSiteValidationFailuresRising"}, {"validation_failures", "validation_failing"}),
    "validation_failure_share": ({"GwmsSiteValidationFailuresRising"}, {"validation_failures"}),
    "held_glideins": ({"GwmsPilotsHeld"}, {"pilots_held"}),
    "badput_share": ({"GwmsEntryBadputHigh"}, {"badput_high"}),
    "badput_job_seconds": ({"GwmsEntryBadputHigh"}, {"badput_high"}),
    "held_share": ({"GwmsEntryMostlyHeld"}, {"held"}),
    "held_mostly_glideins": ({"GwmsEntryMostlyHeld"}, {"held"}),
    "ce_unreachable_seconds": ({"GwmsEntryCeUnreachable"}, {"ce_unreachable"}),
    "queue_slow_ratio": ({"GwmsEntryQueueSlow"}, {"queue_slow"}),
    "queue_slow_seconds": ({"GwmsEntryQueueSlow"}, {"queue_slow"}),
    "queue_slow_pilots": ({"GwmsEntryQueueSlow"}, {"queue_slow"}),
    "submit_failures": ({"GwmsEntrySubmitFailing"}, {"submit_failing"}),
}


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(config.Thresholds)])
def test_every_threshold_is_read_and_shared_ones_move_alert_and_light_together(name: str) -> None:
    base_alerts, base_problems = _rendered(config.CONFIG)
    base_recorded = str(health.recording_rules(config.CONFIG))
    odd = 987.25  # a value no rule holds
    changed = config.Config(thresholds=dataclasses.replace(config.CONFIG.thresholds, **{name: odd}))
    alerts, problems = _rendered(changed)
    moved_alerts = {k for k in alerts if alerts[k] != base_alerts[k]}
    moved_problems = {k for k in problems if problems[k] != base_problems[k]}
    recorded = str(health.recording_rules(changed))
    assert moved_alerts or moved_problems or recorded != base_recorded, f"{name} is read by no rule"
    assert str(odd) in " ".join([*alerts.values(), *problems.values(), recorded])
    if name in SHARED:
        assert (moved_alerts, moved_problems) == SHARED[name]
    else:
        assert not (moved_alerts and moved_problems), f"{name} moves {moved_alerts} and {moved_problems}: list it"


def test_live_timing_keeps_the_thresholds() -> None:
    """The live tests' windows of seconds change windows only: the committed thresholds are the ones tested."""
    fast = config.Config(timing=config.Timing(window="20s", short_window="20s", for_site="0s"))
    for committed, live in zip(_rendered(config.CONFIG), _rendered(fast), strict=True):
        assert committed.keys() == live.keys()
        for k, expr in committed.items():
            assert _COMPARISON.findall(expr) == _COMPARISON.findall(live[k]), k
