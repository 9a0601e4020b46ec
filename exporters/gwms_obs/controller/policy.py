"""The monitoring policy: who may trace which pilots, where, at what verbosity (docs/controller.md).

Pure: rules and attributes in, a decision or a denial out; no clock, no I/O.
Every function takes ``now`` (Unix seconds) so expiry is tested with a clock
the test controls, and the service and the tests call the very same code.

A decision is made in two steps:

1. **The override.** Among the active rules whose selector matches the pilot,
   the one of the highest kind wins (operator > site > vo), then the most
   specific selector, then the newest. No match: the factory's default.
2. **The caps.** Every active ``cap`` rule matching the pilot bounds the
   result, field by field (verbosity, sampling ratio, command lines), and so
   does the ceiling every cap is itself bounded by (the controller's
   ``max_effect``). A cap binds every kind, an operator's too: the site owns
   its worker nodes, so an operator who needs more detail there lifts the cap
   in the open, and the audit log shows it.

The decision names the rule that decided it, the caps that cut it, and on
request why every other rule did not decide.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any


class Verbosity(IntEnum):
    """How much of a glidein is traced; each level includes the ones below it."""

    OFF = 0  # no span at all
    PHASES = 1  # the glidein and its phases (validation, condor, jobs)
    SCRIPTS = 2  # + one span per validation script
    COMMANDS = 3  # + the commands inside scripts (command lines only where the effect allows)

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | int | Verbosity) -> Verbosity:
        if isinstance(value, Verbosity):
            return value
        try:
            if isinstance(value, str):
                return cls[value.strip().upper()]
            if isinstance(value, int) and not isinstance(value, bool):
                return cls(value)
        except (KeyError, ValueError):
            pass
        if isinstance(value, str) and len(value) < 40:
            shown = repr(value)
        elif isinstance(value, int) and abs(value) < 1000:  # str() of a 5,000-digit int raises
            shown = str(value)
        else:
            shown = type(value).__name__
        raise ValueError(f"verbosity {shown}: one of {', '.join(v.label for v in cls)}")


class Role(StrEnum):
    """What a token may do. Pilots and readers (end users) never write."""

    OPERATOR = "operator"  # any scope, any kind
    SITE_ADMIN = "site_admin"  # site and cap rules at their own sites
    VO_MANAGER = "vo_manager"  # vo rules for their own frontends, never above a cap
    PILOT = "pilot"  # asks for its decision
    READER = "reader"  # reads rules, decisions and the audit log

    @property
    def writes(self) -> bool:
        return self in (Role.OPERATOR, Role.SITE_ADMIN, Role.VO_MANAGER)


class Kind(StrEnum):
    """A rule's kind: the three overrides in rising precedence, and the cap."""

    VO = "vo"
    SITE = "site"
    OPERATOR = "operator"
    CAP = "cap"


DEFAULT = "default"  # the deciding "kind" when no override matched
_RANK = {Kind.VO: 1, Kind.SITE: 2, Kind.OPERATOR: 3}
# which kinds each writing role may create, expire or delete
KINDS_OF_ROLE: Mapping[Role, frozenset[Kind]] = {
    Role.OPERATOR: frozenset(Kind),
    Role.SITE_ADMIN: frozenset({Kind.SITE, Kind.CAP}),
    Role.VO_MANAGER: frozenset({Kind.VO}),
}

SELECTOR_FIELDS = ("factory", "entry", "site", "frontend", "security_class", "pilot")
# fields matched as shell-style patterns (fnmatch, case-sensitive); the others exactly
PATTERN_FIELDS = frozenset({"entry", "pilot"})
_SAFE = re.compile(r"^[A-Za-z0-9_.:@/*?\[\]!-]{1,256}$")
SAMPLE_SCALE = 1 << 56  # sampling compares the trace id's last 56 bits (W3C trace context level 2)


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a pilot (or the factory, for a glidein it submits) tells about itself."""

    factory: str = ""
    entry: str = ""
    site: str = ""
    frontend: str = ""
    security_class: str = ""
    pilot: str = ""

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> Attributes:
        return cls(**{f: str(values.get(f, "") or "")[:256] for f in SELECTOR_FIELDS})


@dataclass(frozen=True, slots=True)
class Selector:
    """Which pilots a rule is about: every field that is set must match; None is any."""

    factory: str | None = None
    entry: str | None = None
    site: str | None = None
    frontend: str | None = None
    security_class: str | None = None
    pilot: str | None = None

    def __post_init__(self) -> None:
        for name in SELECTOR_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if not _SAFE.match(value):
                raise ValueError(f"selector {name}={value!r}: 1-256 of letters, digits and _.:@/-*?[]!")
            if name not in PATTERN_FIELDS and any(c in value for c in "*?[]!"):
                raise ValueError(f"selector {name}={value!r}: matched exactly, no patterns (only entry and pilot)")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Selector:
        unknown = set(values) - set(SELECTOR_FIELDS)
        if unknown:
            raise ValueError(f"selector: unknown field(s) {', '.join(sorted(unknown))}")
        for f in SELECTOR_FIELDS:
            if not isinstance(values.get(f, ""), str | None):
                raise ValueError(f"selector {f}: a string")
        return cls(**{f: (values[f] or None) for f in SELECTOR_FIELDS if f in values})

    def as_dict(self) -> dict[str, str]:
        return {f: v for f in SELECTOR_FIELDS if (v := getattr(self, f)) is not None}

    def mismatch(self, attrs: Attributes) -> str | None:
        """The first field that does not match ``attrs``, or None when all do."""
        for name in SELECTOR_FIELDS:
            want = getattr(self, name)
            if want is None:
                continue
            have = getattr(attrs, name)
            if name in PATTERN_FIELDS:
                if not fnmatch.fnmatchcase(have, want):
                    return name
            elif have != want:
                return name
        return None

    @property
    def specificity(self) -> int:
        """Set fields count 2, patterns 1: ``entry=CMS_T2_X`` is more specific than ``entry=CMS_*``."""
        n = 0
        for name in SELECTOR_FIELDS:
            value = getattr(self, name)
            if value is not None:
                n += 1 if name in PATTERN_FIELDS and any(c in value for c in "*?[") else 2
        return n

    def within(self, other: Selector) -> bool:
        """True when every pilot this selects, ``other`` selects too (exact fields only; patterns compare equal)."""
        return all(getattr(other, f) is None or getattr(other, f) == getattr(self, f) for f in SELECTOR_FIELDS)


@dataclass(frozen=True, slots=True)
class Effect:
    """What a decision grants: a verbosity, a sampling ratio, and whether command lines are recorded."""

    verbosity: Verbosity = Verbosity.PHASES
    sample: float = 1.0
    record_commands: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample <= 1.0 or self.sample != self.sample:
            raise ValueError(f"sample {self.sample!r}: a ratio in [0, 1]")
        # command lines exist only at the commands level
        if self.record_commands and self.verbosity < Verbosity.COMMANDS:
            object.__setattr__(self, "record_commands", False)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Effect:
        unknown = set(values) - {"verbosity", "sample", "record_commands"}
        if unknown:
            raise ValueError(f"effect: unknown field(s) {', '.join(sorted(unknown))}")
        if "verbosity" not in values:
            raise ValueError("effect: verbosity is required")
        sample = values.get("sample", 1.0)
        if isinstance(sample, bool) or not isinstance(sample, int | float | str):
            raise ValueError("sample: a ratio in [0, 1]")
        try:
            ratio = float(sample)
        except (ValueError, OverflowError):  # "x", 10**400
            raise ValueError("sample: a ratio in [0, 1]") from None
        record = values.get("record_commands", False)
        if not isinstance(record, bool):
            raise ValueError(f"record_commands {record!r}: true or false")
        return cls(Verbosity.parse(values["verbosity"]), ratio, record)

    def as_dict(self) -> dict[str, Any]:
        return {"verbosity": self.verbosity.label, "sample": self.sample, "record_commands": self.record_commands}

    def bounded(self, cap: Effect) -> Effect:
        """This effect, cut field by field to ``cap``."""
        return Effect(
            min(self.verbosity, cap.verbosity),
            min(self.sample, cap.sample),
            self.record_commands and cap.record_commands,
        )

    def exceeds(self, cap: Effect) -> list[str]:
        """The fields in which this effect is above ``cap`` (empty: within it)."""
        over = []
        if self.verbosity > cap.verbosity:
            over.append("verbosity")
        if self.sample > cap.sample:
            over.append("sample")
        if self.record_commands and not cap.record_commands:
            over.append("record_commands")
        return over

    @property
    def sample_threshold(self) -> int:
        """Sampled when int(trace id's last 14 hex digits, 16) < this (integer math for the pilot's bash)."""
        return round(self.sample * SAMPLE_SCALE)


UNBOUNDED = Effect(Verbosity.COMMANDS, 1.0, True)


def sampled(trace_id: str, effect: Effect) -> bool:
    """Whether a trace is sampled at ``effect.sample``: deterministic in the trace id, the same in the pilot."""
    if effect.verbosity == Verbosity.OFF:
        return False
    try:
        low = int(trace_id[-14:], 16)
    except ValueError:
        return effect.sample >= 1.0
    return low < effect.sample_threshold


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule as stored: who made it, why, and until when."""

    id: int
    kind: Kind
    selector: Selector
    effect: Effect
    owner: str
    role: Role
    reason: str
    created: float
    expires: float | None = None

    def active(self, now: float) -> bool:
        return self.created <= now and (self.expires is None or now < self.expires)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "selector": self.selector.as_dict(),
            "effect": self.effect.as_dict(),
            "owner": self.owner,
            "role": self.role.value,
            "reason": self.reason,
            "created": self.created,
            "expires": self.expires,
        }


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token speaks for: a name, a role, and (for site admins and VO managers) a scope."""

    name: str
    role: Role
    sites: frozenset[str] = frozenset()
    frontends: frozenset[str] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role.value,
            "sites": sorted(self.sites),
            "frontends": sorted(self.frontends),
        }


@dataclass(frozen=True, slots=True)
class Why:
    """Why one rule did or did not shape a decision."""

    rule: int
    outcome: str  # decided | capped | inactive | no_match | outranked | cap_not_binding
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "outcome": self.outcome, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Decision:
    effect: Effect
    rule: int | None  # the override that decided it; None: the default
    kind: str  # a Kind's value, or DEFAULT
    capped_by: tuple[int, ...] = ()  # cap rules that cut the override's effect (0: the ceiling)
    explanation: tuple[Why, ...] = ()

    def as_dict(self, explain: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.effect.as_dict(),
            "sample_threshold": self.effect.sample_threshold,
            "rule": self.rule,
            "kind": self.kind,
            "capped_by": list(self.capped_by),
        }
        if explain:
            out["explain"] = [w.as_dict() for w in self.explanation]
        return out


CEILING = 0  # the id named in capped_by when the controller's max_effect cut the effect


_Best = tuple[Rule | None, tuple[int, int, float, int]]
_NO_BEST: _Best = (None, (0, -1, 0.0, 0))
MAX_SCOPES = 20_000  # scopes whose decision a snapshot keeps (one per factory, entry, site, frontend, class)


def _rank(rule: Rule) -> tuple[int, int, float, int]:
    return (_RANK[rule.kind], rule.selector.specificity, rule.created, rule.id)


class Policy:
    """A snapshot of the rules, indexed for deciding; rebuilt whenever a rule changes.

    Deciding scans the pilot's site's rules and the site-less ones. Pilots of
    one entry share everything but their id, so the scan of the rules that
    name no pilot is kept per scope (factory, entry, site, frontend, security
    class) until the next instant a rule starts or expires; per pilot only the
    few rules with a ``pilot`` pattern are looked at. ``explain=True`` takes
    the whole scan every time, and a test holds the two equal.
    """

    def __init__(self, rules: Iterable[Rule], default: Effect, ceiling: Effect = UNBOUNDED) -> None:
        self.rules: tuple[Rule, ...] = tuple(sorted(rules, key=lambda r: r.id))
        self.default = default.bounded(ceiling)
        self.ceiling = ceiling
        # rules by the site they name (None: any site), so a decision looks at its site's rules only;
        # those naming a pilot apart, as they are looked at for every pilot
        self._by_site: dict[str | None, list[Rule]] = {}
        self._scoped: dict[str | None, list[Rule]] = {}
        self._per_pilot: dict[str | None, list[tuple[re.Pattern[str], Rule]]] = {}
        for rule in self.rules:
            self._by_site.setdefault(rule.selector.site, []).append(rule)
            if rule.selector.pilot is None:
                self._scoped.setdefault(rule.selector.site, []).append(rule)
            else:  # its pilot pattern first: it rules out nearly every pilot, cheaply
                pattern = re.compile(fnmatch.translate(rule.selector.pilot))
                self._per_pilot.setdefault(rule.selector.site, []).append((pattern, rule))
        # the instants at which the set of active rules changes: a scope's scan holds between two
        self._instants = sorted({t for r in self.rules for t in (r.created, r.expires) if t is not None})
        self._cache: tuple[float, float, dict[tuple[str, ...], tuple[_Best, tuple[Rule, ...]]]] = (0.0, -1.0, {})

    def candidates(self, site: str) -> list[Rule]:
        return self._by_site.get(site, []) + self._by_site.get(None, [])

    def _interval(self, now: float) -> tuple[float, float]:
        i = bisect.bisect_right(self._instants, now)
        lo = self._instants[i - 1] if i > 0 else float("-inf")
        hi = self._instants[i] if i < len(self._instants) else float("inf")
        return lo, hi

    @staticmethod
    def _scan(rules: Iterable[Rule], attrs: Attributes, now: float, best: _Best) -> tuple[_Best, list[Rule]]:
        caps: list[Rule] = []
        for rule in rules:
            if not rule.active(now) or rule.selector.mismatch(attrs) is not None:
                continue
            if rule.kind == Kind.CAP:
                caps.append(rule)
                continue
            key = _rank(rule)
            if best[0] is None or key > best[1]:
                best = (rule, key)
        return best, caps

    def decide(self, attrs: Attributes, now: float, explain: bool = False) -> Decision:
        if explain:
            return self._explained(attrs, now)
        lo, hi, scopes = self._cache
        if not lo <= now < hi:
            lo, hi = self._interval(now)
            scopes = {}
            self._cache = (lo, hi, scopes)
        scope = (attrs.factory, attrs.entry, attrs.site, attrs.frontend, attrs.security_class)
        found = scopes.get(scope)
        if found is None:
            site = attrs.site
            best, caps = self._scan(self._scoped.get(site, []) + self._scoped.get(None, []), attrs, now, _NO_BEST)
            found = (best, tuple(caps))
            if len(scopes) < MAX_SCOPES:
                scopes[scope] = found
        best, caps_ = found
        per_pilot = self._per_pilot
        if per_pilot:
            pilot = attrs.pilot
            rules = [r for p, r in per_pilot.get(attrs.site, []) + per_pilot.get(None, []) if p.match(pilot)]
            if rules:
                best, more = self._scan(rules, attrs, now, best)
                caps_ = caps_ + tuple(more)
        effect, capped = self._bounded(best[0], caps_)
        winner = best[0]
        return Decision(effect, winner.id if winner else None, winner.kind.value if winner else DEFAULT, tuple(capped))

    def _bounded(self, best: Rule | None, caps: Iterable[Rule]) -> tuple[Effect, list[int]]:
        """The winner's effect (or the default) cut by the caps and the ceiling, and who cut it."""
        effect = best.effect if best is not None else self.default
        capped = sorted(cap.id for cap in caps if effect.exceeds(cap.effect))  # by id, whichever scan found them
        if self.ceiling is not UNBOUNDED and effect.exceeds(self.ceiling):
            capped.append(CEILING)
        for cap in caps:
            effect = effect.bounded(cap.effect)
        return effect.bounded(self.ceiling), capped

    def _explained(self, attrs: Attributes, now: float) -> Decision:
        """The whole scan, saying for each rule looked at why it did or did not decide."""
        best: Rule | None = None
        best_key: tuple[int, int, float, int] = (0, -1, 0.0, 0)
        caps: list[Rule] = []
        why: list[Why] = []
        for rule in self.candidates(attrs.site):
            if not rule.active(now):
                why.append(Why(rule.id, "inactive", "not yet" if now < rule.created else "expired"))
                continue
            field_ = rule.selector.mismatch(attrs)
            if field_ is not None:
                why.append(Why(rule.id, "no_match", field_))
                continue
            if rule.kind == Kind.CAP:
                caps.append(rule)
                continue
            key = _rank(rule)
            if best is None or key > best_key:
                if best is not None:
                    why.append(Why(best.id, "outranked", ""))
                best, best_key = rule, key
            else:
                why.append(Why(rule.id, "outranked", ""))
        effect, capped = self._bounded(best, caps)
        why.extend(Why(c.id, "cap_not_binding", "") for c in caps if c.id not in capped)
        if best is not None:
            why.append(Why(best.id, "decided", f"{best.kind.value} rule, specificity {best.selector.specificity}"))
        why.extend(Why(c, "capped", "") for c in capped if c != CEILING)
        # the winner's "outranked" entries were added before it was known: keep the final word per rule
        final: dict[int, Why] = {}
        for w in why:
            final[w.rule] = w
        return Decision(
            effect,
            best.id if best is not None else None,
            best.kind.value if best is not None else DEFAULT,
            tuple(capped),
            tuple(sorted(final.values(), key=lambda w: w.rule)),
        )

    def cap_for(self, selector: Selector, now: float, by: Role | None = None) -> Effect:
        """The cap in force over every pilot ``selector`` selects: the ceiling and every active cap that covers it.

        With ``by=Role.OPERATOR`` only operators' caps count (what a site admin's own cap may not exceed).
        """
        cap = self.ceiling
        for rule in self.candidates(selector.site or ""):
            if rule.kind != Kind.CAP or not rule.active(now):
                continue
            if by is not None and rule.role != by:
                continue
            if selector.within(rule.selector):
                cap = cap.bounded(rule.effect)
        return cap


class Denied(Exception):
    """A write the principal may not make; ``reason`` is a short word for metrics and the audit log."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# the reasons a write is refused (the controller's denial metric's label values)
DENIAL_REASONS = ("read_only", "wrong_kind", "out_of_scope", "above_cap", "invalid", "not_found")


def require_writer(who: Principal) -> None:
    """Raise Denied("read_only") unless ``who`` may write at all: refused for what it is, whatever it sent."""
    if not who.role.writes:
        raise Denied("read_only", f"a {who.role.value} token reads, never writes")


def authorize_create(
    who: Principal,
    kind: Kind,
    selector: Selector,
    effect: Effect,
    policy: Policy,
    now: float,
    expires: float | None = None,
) -> None:
    """Raise Denied unless ``who`` may create this rule now."""
    require_writer(who)
    if kind not in KINDS_OF_ROLE[who.role]:
        raise Denied("wrong_kind", f"a {who.role.value} may not make {kind.value} rules")
    if expires is not None and expires <= now:
        raise Denied("invalid", "expires before it starts")
    _in_scope(who, kind, selector)
    if who.role == Role.OPERATOR:
        return
    # a site admin's cap may not exceed what the operators' caps (and the ceiling) allow there
    limit = policy.cap_for(selector, now, by=Role.OPERATOR if kind == Kind.CAP else None)
    over = effect.exceeds(limit)
    if over:
        raise Denied(
            "above_cap",
            f"{', '.join(over)} above the cap in force for {_scope_text(selector)} "
            f"({limit.verbosity.label}, sample {limit.sample:g}, "
            f"command lines {'yes' if limit.record_commands else 'no'})",
        )


def authorize_change(who: Principal, rule: Rule) -> None:
    """Raise Denied unless ``who`` may expire or delete ``rule``."""
    require_writer(who)
    if rule.kind not in KINDS_OF_ROLE[who.role]:
        raise Denied("wrong_kind", f"a {who.role.value} may not change {rule.kind.value} rules")
    _in_scope(who, rule.kind, rule.selector)


def _in_scope(who: Principal, kind: Kind, selector: Selector) -> None:
    if who.role == Role.SITE_ADMIN:
        if selector.site is None or selector.site not in who.sites:
            raise Denied("out_of_scope", f"site {selector.site or '(any)'} is not one of {_names(who.sites)}")
    elif who.role == Role.VO_MANAGER and (selector.frontend is None or selector.frontend not in who.frontends):
        raise Denied("out_of_scope", f"frontend {selector.frontend or '(any)'} is not one of {_names(who.frontends)}")


def _names(values: frozenset[str]) -> str:
    return ", ".join(sorted(values)) or "(none)"


def _scope_text(selector: Selector) -> str:
    return ", ".join(f"{k}={v}" for k, v in selector.as_dict().items()) or "every pilot"


__all__ = [
    "CEILING",
    "DEFAULT",
    "DENIAL_REASONS",
    "SELECTOR_FIELDS",
    "UNBOUNDED",
    "Attributes",
    "Decision",
    "Denied",
    "Effect",
    "Kind",
    "Policy",
    "Principal",
    "Role",
    "Rule",
    "Selector",
    "Verbosity",
    "Why",
    "authorize_change",
    "authorize_create",
    "require_writer",
    "sampled",
]
