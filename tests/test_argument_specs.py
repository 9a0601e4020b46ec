"""Every role option's description says what it does, and its unit where the default is a duration or a size.

`ansible-doc` and the argument-spec validation show these descriptions to operators; "prometheus data dir"
for prometheus_data_dir told them nothing the name did not.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tools import render

STOPWORDS = {"a", "an", "the", "of", "to", "for", "in", "on", "and", "or", "is", "its", "by", "with", "as", "at", "be"}
# Prometheus/Go durations ("30s", "200ms", "24h", "30d"), sizes ("2G", "512MiB") and percentages ("200%").
DURATION = re.compile(r"\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y)")
SIZE = re.compile(r"\d+(?:\.\d+)?(?:[KMGTP]i?B?)")
PERCENT = re.compile(r"\d+(?:\.\d+)?%")
# A number whose name says it is a time or an amount: it needs a unit as much as "30s" does.
DURATION_NAME = re.compile(r"seconds|timeout|interval|delay|_age\b|_ttl|period|lifetime")
SIZE_NAME = re.compile(r"_mib|_mb\b|_kb\b|_gb\b|bytes|_size\b|memory_max")


def _unit(*words: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z])(?:" + "|".join(words) + r")(?![A-Za-z])", re.I)


DURATION_UNITS = _unit(r"durations?", r"ms", r"milliseconds?", r"seconds?", r"minutes?", r"hours?", r"days?")
# A size or a count: bytes, or what is counted (spans, batches...).
SIZE_UNITS = _unit(
    r"bytes?", r"[KMGT]i?B", r"[KMGT] suffix", r"spans?", r"batch(?:es)?", r"traces?", r"elements?",
    r"characters?", r"series", r"items?", r"entries", r"requests?",
)  # fmt: skip
PERCENT_UNITS = re.compile(r"%|percent", re.I)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def restates_name(role: str, name: str, description: str) -> bool:
    """The description's words, stop words aside, are all the option's (or its role's) name."""
    said = {w for w in _words(description) if w not in STOPWORDS}
    return said <= set(_words(name)) | set(_words(role))


def missing_unit(name: str, default: Any, description: str) -> str | None:
    """What unit the description should name but does not (duration, size or percent), else None."""
    if isinstance(default, bool):
        return None
    if isinstance(default, str):
        if DURATION.fullmatch(default):
            return None if DURATION_UNITS.search(description) else "duration"
        if PERCENT.fullmatch(default):
            return None if PERCENT_UNITS.search(description) else "percent"
        if SIZE.fullmatch(default):
            return None if SIZE_UNITS.search(description) else "size"
        return None
    if isinstance(default, int | float):
        if DURATION_NAME.search(name) and not DURATION_UNITS.search(description):
            return "duration"
        if SIZE_NAME.search(name) and not SIZE_UNITS.search(description):
            return "size"
    return None


def _roles() -> list[str]:
    return sorted(p.parent.parent.name for p in render.roles_dir().glob("*/meta/argument_specs.yml"))


def _options(role: str) -> dict[str, Any]:
    doc = yaml.safe_load((render.roles_dir() / role / "meta" / "argument_specs.yml").read_text())
    options: dict[str, Any] = doc["argument_specs"]["main"]["options"]
    return options


@pytest.mark.parametrize("role", _roles())
def test_descriptions_say_more_than_the_name(role: str) -> None:
    bad = [name for name, o in _options(role).items() if restates_name(role, name, str(o.get("description", "")))]
    assert not bad, f"{role}: descriptions that only restate the option's name: {bad}"


@pytest.mark.parametrize("role", _roles())
def test_durations_and_sizes_name_their_unit(role: str) -> None:
    defaults = render.role_defaults(role)
    bad = {
        name: why
        for name, o in _options(role).items()
        if (why := missing_unit(name, defaults.get(name), str(o.get("description", ""))))
    }
    assert not bad, f"{role}: descriptions without the unit of their default: {bad}"


def test_the_checks_themselves() -> None:
    assert restates_name("prometheus", "prometheus_data_dir", "prometheus data dir")
    assert restates_name("gwms_exporter", "gwms_exporter_log_level", "Log level of the exporter.")
    assert not restates_name("prometheus", "prometheus_data_dir", "Directory of the TSDB (--storage.tsdb.path).")
    assert missing_unit("x_interval", "30s", "How often it scrapes.") == "duration"
    assert missing_unit("x_interval", "30s", "How often it scrapes (a Prometheus duration).") is None
    assert missing_unit("x_settle_seconds", 30, "Age a file must have.") == "duration"
    assert missing_unit("x_settle_seconds", 30, "Age, in seconds, a file must have.") is None
    assert missing_unit("x_memory_limit_mib", 1024, "Limit of the process.") == "size"
    assert missing_unit("x_memory_max", "2G", "Memory of the unit (bytes, K/M/G suffix).") is None
    assert missing_unit("x_cpu_quota", "200%", "CPUQuota= of the unit.") == "percent"
    assert missing_unit("x_port", 9090, "TCP port.") is None  # a number, neither duration nor size
