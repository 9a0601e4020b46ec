"""The controller's own metrics (names from catalogue.py), in a registry of its own.

Counters are bound to their label values once, so a decision costs one
increment; the active-rules gauge is computed at scrape time from the policy
snapshot, so it is right at the instant of the scrape, expiries included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import __version__
from .. import catalogue as M
from .policy import DEFAULT, DENIAL_REASONS, Decision, Kind, Policy, Verbosity


class _Rules(Protocol):
    """What the active-rules gauge reads of the controller (service.Controller), named here
    so metrics need not import the service that imports them."""

    clock: Callable[[], float]

    def policy(self) -> Policy: ...


ACTIONS = ("create", "expire", "delete")
JAEGER_OUTCOMES = ("ok", "not_found", "timeout", "error")


class _ActiveRules(Collector):
    def __init__(self) -> None:
        self.controller: _Rules | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(M.CONTROLLER_RULES.name, M.CONTROLLER_RULES.help, labels=M.CONTROLLER_RULES.labels)
        counts = dict.fromkeys(Kind, 0)
        if self.controller is not None:
            now = self.controller.clock()
            for r in self.controller.policy().rules:
                if r.active(now):
                    counts[r.kind] += 1
        for kind, n in counts.items():
            g.add_metric([kind.value], n)
        yield g


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        import platform

        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        decisions = Counter(M.CONTROLLER_DECISIONS.base, M.CONTROLLER_DECISIONS.help, M.CONTROLLER_DECISIONS.labels,
                            registry=r)  # fmt: skip
        kinds = (DEFAULT, Kind.VO.value, Kind.SITE.value, Kind.OPERATOR.value)
        self._decisions = {(v, k): decisions.labels(v.label, k) for v in Verbosity for k in kinds}
        denials = Counter(M.CONTROLLER_DENIALS.base, M.CONTROLLER_DENIALS.help, M.CONTROLLER_DENIALS.labels, registry=r)
        self._denials = {reason: denials.labels(reason) for reason in DENIAL_REASONS}
        changes = Counter(M.CONTROLLER_CHANGES.base, M.CONTROLLER_CHANGES.help, M.CONTROLLER_CHANGES.labels, registry=r)
        self._changes = {a: changes.labels(a) for a in ACTIONS}
        expiries = Counter(M.CONTROLLER_EXPIRIES.base, M.CONTROLLER_EXPIRIES.help, M.CONTROLLER_EXPIRIES.labels,
                           registry=r)  # fmt: skip
        self._expiries = {k: expiries.labels(k.value) for k in Kind}
        self.auth_failures = Counter(M.CONTROLLER_AUTH_FAILURES.base, M.CONTROLLER_AUTH_FAILURES.help, registry=r)
        jaeger = Counter(M.CONTROLLER_JAEGER.base, M.CONTROLLER_JAEGER.help, M.CONTROLLER_JAEGER.labels, registry=r)
        self._jaeger = {o: jaeger.labels(o) for o in JAEGER_OUTCOMES}
        self._rules = _ActiveRules()
        r.register(self._rules)
        build = Gauge(M.BUILD_INFO.name, M.BUILD_INFO.help, M.BUILD_INFO.labels, registry=r)
        build.labels(__version__, platform.python_version()).set(1)

    def bind(self, controller: _Rules) -> None:
        self._rules.controller = controller

    def decided(self, d: Decision) -> None:
        self._decisions[(d.effect.verbosity, d.kind)].inc()

    def denied(self, reason: str) -> None:
        self._denials[reason].inc()

    def changed(self, action: str) -> None:
        self._changes[action].inc()

    def jaeger(self, outcome: str) -> None:
        """A pilot page's request to Jaeger (JAEGER_OUTCOMES)."""
        self._jaeger[outcome].inc()

    def expired(self, kind: Kind) -> None:
        self._expiries[kind].inc()
