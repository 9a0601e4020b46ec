"""The controller's policy, table by table: precedence, caps, expiry, and each role's powers."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.controller.policy import (
    CEILING,
    DEFAULT,
    Attributes,
    Decision,
    Denied,
    Effect,
    Kind,
    Policy,
    Principal,
    Role,
    Rule,
    Selector,
    Verbosity,
    authorize_change,
    authorize_create,
    sampled,
)

T0 = 1_800_000_000.0
V = Verbosity
PILOT = Attributes(
    factory="gf1", entry="CMS_T2_US_Nebraska_red", site="T2_US_Nebraska", frontend="cms", security_class="prod",
    pilot="glidein_123.0",
)  # fmt: skip
OTHER_SITE = Attributes(factory="gf1", entry="CMS_T2_DE_DESY", site="T2_DE_DESY", frontend="cms", pilot="g.1")
DEFAULT_EFFECT = Effect(V.PHASES)

OPERATOR = Principal("olga", Role.OPERATOR)
SITE_ADMIN = Principal("sam", Role.SITE_ADMIN, sites=frozenset({"T2_US_Nebraska"}))
VO = Principal("vic", Role.VO_MANAGER, frontends=frozenset({"cms"}))
PILOT_TOKEN = Principal("pilots", Role.PILOT)
READER = Principal("rita", Role.READER)

_ids = itertools.count(1)


def rule(
    kind: Kind,
    verbosity: Verbosity,
    created: float = T0,
    expires: float | None = None,
    sample: float = 1.0,
    commands: bool = False,
    **selector: str,
) -> Rule:
    role = {Kind.OPERATOR: Role.OPERATOR, Kind.SITE: Role.SITE_ADMIN, Kind.VO: Role.VO_MANAGER}.get(kind, Role.OPERATOR)
    return Rule(next(_ids), kind, Selector(**selector), Effect(verbosity, sample, commands), "x", role, "why",
                created, expires)  # fmt: skip


def with_selector(r: Rule, selector: Selector) -> Rule:
    return dataclasses.replace(r, selector=selector)


def decide(
    *rules: Rule, at: float = T0 + 60, attrs: Attributes = PILOT, ceiling: Effect | None = None
) -> tuple[Verbosity, str, int | None, Decision]:
    p = Policy(rules, DEFAULT_EFFECT, ceiling) if ceiling else Policy(rules, DEFAULT_EFFECT)
    d = p.decide(attrs, at, explain=True)
    return d.effect.verbosity, d.kind, d.rule, d


# --- precedence ------------------------------------------------------------------------------------


def test_no_rule_is_the_default() -> None:
    v, kind, rid, d = decide()
    assert (v, kind, rid) == (V.PHASES, DEFAULT, None) and d.capped_by == ()


@pytest.mark.parametrize(
    ("rules", "want_verbosity", "want_kind"),
    [
        # one rule of each kind alone decides
        ([(Kind.VO, V.SCRIPTS, {"frontend": "cms"})], V.SCRIPTS, Kind.VO),
        ([(Kind.SITE, V.OFF, {"site": "T2_US_Nebraska"})], V.OFF, Kind.SITE),
        ([(Kind.OPERATOR, V.COMMANDS, {"entry": "CMS_T2_US_Nebraska_red"})], V.COMMANDS, Kind.OPERATOR),
        # a site rule beats a VO rule, whatever their specificity
        ([(Kind.VO, V.COMMANDS, {"frontend": "cms", "site": "T2_US_Nebraska", "entry": "CMS_T2_US_Nebraska_red"}),
          (Kind.SITE, V.OFF, {"site": "T2_US_Nebraska"})], V.OFF, Kind.SITE),
        # an operator rule beats a site rule
        ([(Kind.SITE, V.OFF, {"site": "T2_US_Nebraska"}),
          (Kind.OPERATOR, V.SCRIPTS, {"site": "T2_US_Nebraska"})], V.SCRIPTS, Kind.OPERATOR),
        # within a kind the more specific selector wins
        ([(Kind.OPERATOR, V.SCRIPTS, {"site": "T2_US_Nebraska", "entry": "CMS_T2_US_Nebraska_red"}),
          (Kind.OPERATOR, V.OFF, {"site": "T2_US_Nebraska"})], V.SCRIPTS, Kind.OPERATOR),
        # an exact entry is more specific than a pattern
        ([(Kind.OPERATOR, V.OFF, {"entry": "CMS_*"}),
          (Kind.OPERATOR, V.COMMANDS, {"entry": "CMS_T2_US_Nebraska_red"})], V.COMMANDS, Kind.OPERATOR),
        # a rule for another site or frontend does not apply
        ([(Kind.SITE, V.OFF, {"site": "T2_DE_DESY"}), (Kind.VO, V.OFF, {"frontend": "dune"})], V.PHASES, DEFAULT),
        # pilot id patterns select single glideins
        ([(Kind.OPERATOR, V.COMMANDS, {"pilot": "glidein_12*"})], V.COMMANDS, Kind.OPERATOR),
        ([(Kind.OPERATOR, V.COMMANDS, {"pilot": "glidein_9*"})], V.PHASES, DEFAULT),
    ],
)  # fmt: skip
def test_precedence(
    rules: list[tuple[Kind, Verbosity, dict[str, str]]], want_verbosity: Verbosity, want_kind: str
) -> None:
    v, kind, _, _ = decide(*(with_selector(rule(k, lvl), Selector(**sel)) for k, lvl, sel in rules))
    assert (v, kind) == (want_verbosity, want_kind)


def test_equal_rules_the_newest_wins_and_the_answer_names_it() -> None:
    old = rule(Kind.OPERATOR, V.OFF, created=T0, site="T2_US_Nebraska")
    new = rule(Kind.OPERATOR, V.SCRIPTS, created=T0 + 10, site="T2_US_Nebraska")
    for order in ((old, new), (new, old)):
        v, _, rid, d = decide(*order)
        assert (v, rid) == (V.SCRIPTS, new.id)
        why = {w.rule: w.outcome for w in d.explanation}
        assert why == {new.id: "decided", old.id: "outranked"}


def test_the_explanation_says_why_each_rule_did_not_decide() -> None:
    other_site = rule(Kind.SITE, V.OFF, site="T2_DE_DESY")
    other_frontend = rule(Kind.VO, V.OFF, frontend="dune")
    expired = rule(Kind.OPERATOR, V.OFF, expires=T0 + 30)
    future = rule(Kind.OPERATOR, V.OFF, created=T0 + 3600)
    winner = rule(Kind.VO, V.SCRIPTS, frontend="cms")
    _, _, rid, d = decide(other_site, other_frontend, expired, future, winner)
    assert rid == winner.id
    why = {w.rule: (w.outcome, w.detail) for w in d.explanation}
    assert other_site.id not in why  # indexed by site: another site's rules are not even looked at
    assert why[other_frontend.id] == ("no_match", "frontend")
    assert why[expired.id] == ("inactive", "expired")
    assert why[future.id] == ("inactive", "not yet")
    assert why[winner.id][0] == "decided"
    assert d.as_dict(explain=True)["rule"] == winner.id


# --- caps --------------------------------------------------------------------------------------------


def test_a_site_cap_bounds_vo_site_and_operator_rules_alike() -> None:
    cap = rule(Kind.CAP, V.PHASES, site="T2_US_Nebraska")
    for kind in (Kind.VO, Kind.SITE, Kind.OPERATOR):
        over = rule(kind, V.COMMANDS, commands=True, site="T2_US_Nebraska", frontend="cms")
        v, k, rid, d = decide(cap, over)
        assert (v, k, rid) == (V.PHASES, kind.value, over.id)
        assert d.capped_by == (cap.id,)
        assert not d.effect.record_commands


def test_a_cap_cuts_each_field_and_only_when_it_binds() -> None:
    cap = rule(Kind.CAP, V.COMMANDS, sample=0.25, commands=False, site="T2_US_Nebraska")
    over = rule(Kind.OPERATOR, V.COMMANDS, sample=1.0, commands=True, site="T2_US_Nebraska")
    _, _, _, d = decide(cap, over)
    assert d.effect == Effect(V.COMMANDS, 0.25, False) and d.capped_by == (cap.id,)
    under = rule(Kind.OPERATOR, V.SCRIPTS, sample=0.1, site="T2_US_Nebraska")
    _, _, _, d = decide(cap, under)
    assert d.effect == Effect(V.SCRIPTS, 0.1, False) and d.capped_by == ()
    assert {w.rule: w.outcome for w in d.explanation}[cap.id] == "cap_not_binding"


def test_the_ceiling_bounds_even_the_default_and_is_named_0() -> None:
    over = rule(Kind.OPERATOR, V.COMMANDS, commands=True)
    _, _, _, d = decide(over, ceiling=Effect(V.SCRIPTS))
    assert d.effect == Effect(V.SCRIPTS) and d.capped_by == (CEILING,)
    p = Policy((), Effect(V.COMMANDS, 1.0, True), Effect(V.PHASES))
    assert p.decide(PILOT, T0).effect == Effect(V.PHASES)


def test_caps_of_another_site_do_not_apply() -> None:
    cap = rule(Kind.CAP, V.OFF, site="T2_DE_DESY")
    v, _, _, d = decide(cap, rule(Kind.VO, V.SCRIPTS, frontend="cms"))
    assert v == V.SCRIPTS and d.capped_by == ()


# --- expiry (a clock the test controls) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "want"),
    [(T0 - 1, V.PHASES), (T0, V.OFF), (T0 + 7199.999, V.OFF), (T0 + 7200, V.PHASES), (T0 + 10**6, V.PHASES)],
)
def test_an_override_applies_from_its_creation_until_its_expiry(at: float, want: Verbosity) -> None:
    off = rule(Kind.SITE, V.OFF, created=T0, expires=T0 + 7200, site="T2_US_Nebraska")
    assert decide(off, at=at)[0] == want


def test_an_expired_cap_stops_cutting() -> None:
    cap = rule(Kind.CAP, V.OFF, expires=T0 + 100, site="T2_US_Nebraska")
    raise_ = rule(Kind.OPERATOR, V.SCRIPTS, site="T2_US_Nebraska")
    assert decide(cap, raise_, at=T0 + 99)[0] == V.OFF
    assert decide(cap, raise_, at=T0 + 100)[0] == V.SCRIPTS


# --- who may write what ---------------------------------------------------------------------------------

NEBRASKA = Selector(site="T2_US_Nebraska")
DESY = Selector(site="T2_DE_DESY")
CMS = Selector(frontend="cms")
CMS_NEBRASKA = Selector(site="T2_US_Nebraska", frontend="cms")


@pytest.mark.parametrize(
    ("who", "kind", "selector", "effect", "denial"),
    [
        # operators: any scope, any kind
        (OPERATOR, Kind.OPERATOR, Selector(), Effect(V.COMMANDS, 1, True), None),
        (OPERATOR, Kind.CAP, DESY, Effect(V.OFF), None),
        (OPERATOR, Kind.SITE, DESY, Effect(V.OFF), None),
        # site admins: site and cap rules, their own sites only
        (SITE_ADMIN, Kind.SITE, NEBRASKA, Effect(V.OFF), None),
        (SITE_ADMIN, Kind.CAP, NEBRASKA, Effect(V.SCRIPTS), None),
        (SITE_ADMIN, Kind.SITE, DESY, Effect(V.OFF), "out_of_scope"),
        (SITE_ADMIN, Kind.CAP, DESY, Effect(V.OFF), "out_of_scope"),
        (SITE_ADMIN, Kind.SITE, Selector(), Effect(V.OFF), "out_of_scope"),
        (SITE_ADMIN, Kind.OPERATOR, NEBRASKA, Effect(V.OFF), "wrong_kind"),
        (SITE_ADMIN, Kind.VO, CMS_NEBRASKA, Effect(V.OFF), "wrong_kind"),
        # VO managers: vo rules for their own frontends only
        (VO, Kind.VO, CMS, Effect(V.SCRIPTS), None),
        (VO, Kind.VO, CMS_NEBRASKA, Effect(V.SCRIPTS), None),
        (VO, Kind.VO, Selector(frontend="dune"), Effect(V.SCRIPTS), "out_of_scope"),
        (VO, Kind.VO, NEBRASKA, Effect(V.SCRIPTS), "out_of_scope"),
        (VO, Kind.SITE, CMS_NEBRASKA, Effect(V.OFF), "wrong_kind"),
        (VO, Kind.CAP, CMS_NEBRASKA, Effect(V.OFF), "wrong_kind"),
        # pilots and end users never write
        (PILOT_TOKEN, Kind.VO, CMS, Effect(V.COMMANDS), "read_only"),
        (READER, Kind.SITE, NEBRASKA, Effect(V.OFF), "read_only"),
    ],
)  # fmt: skip
def test_what_each_role_may_create(
    who: Principal, kind: Kind, selector: Selector, effect: Effect, denial: str | None
) -> None:
    policy = Policy((), DEFAULT_EFFECT)
    if denial is None:
        authorize_create(who, kind, selector, effect, policy, T0, T0 + 7200)
    else:
        with pytest.raises(Denied) as e:
            authorize_create(who, kind, selector, effect, policy, T0, T0 + 7200)
        assert e.value.reason == denial


def test_no_rule_of_a_site_admin_or_vo_manager_goes_above_the_site_cap() -> None:
    cap = rule(Kind.CAP, V.SCRIPTS, site="T2_US_Nebraska")
    policy = Policy((cap,), DEFAULT_EFFECT)
    # the site admin raises up to the cap, not past it
    authorize_create(SITE_ADMIN, Kind.SITE, NEBRASKA, Effect(V.SCRIPTS), policy, T0 + 1)
    with pytest.raises(Denied) as e:
        authorize_create(SITE_ADMIN, Kind.SITE, NEBRASKA, Effect(V.COMMANDS), policy, T0 + 1)
    assert e.value.reason == "above_cap" and "verbosity" in e.value.detail
    # the VO manager's rule at that site neither
    authorize_create(VO, Kind.VO, CMS_NEBRASKA, Effect(V.PHASES), policy, T0 + 1)
    for too_much in (Effect(V.COMMANDS), Effect(V.COMMANDS, 1.0, True)):
        with pytest.raises(Denied) as e:
            authorize_create(VO, Kind.VO, CMS_NEBRASKA, too_much, policy, T0 + 1)
        assert e.value.reason == "above_cap"
    # a VO rule for every site is allowed, and cut by the cap where the pilot runs
    authorize_create(VO, Kind.VO, CMS, Effect(V.COMMANDS), policy, T0 + 1)
    vo_everywhere = rule(Kind.VO, V.COMMANDS, frontend="cms")
    assert decide(cap, vo_everywhere)[0] == V.SCRIPTS
    assert decide(cap, vo_everywhere, attrs=OTHER_SITE)[0] == V.COMMANDS
    # once the cap expires the site admin may raise further
    gone = Policy((rule(Kind.CAP, V.SCRIPTS, expires=T0 + 10, site="T2_US_Nebraska"),), DEFAULT_EFFECT)
    authorize_create(SITE_ADMIN, Kind.SITE, NEBRASKA, Effect(V.COMMANDS), gone, T0 + 10)


def test_a_site_admin_cap_may_not_exceed_an_operators_cap() -> None:
    operators = rule(Kind.CAP, V.SCRIPTS)  # a factory-wide cap by an operator
    policy = Policy((operators,), DEFAULT_EFFECT)
    authorize_create(SITE_ADMIN, Kind.CAP, NEBRASKA, Effect(V.PHASES), policy, T0 + 1)
    with pytest.raises(Denied) as e:
        authorize_create(SITE_ADMIN, Kind.CAP, NEBRASKA, Effect(V.COMMANDS), policy, T0 + 1)
    assert e.value.reason == "above_cap"


@pytest.mark.parametrize(
    ("who", "target", "denial"),
    [
        (OPERATOR, rule(Kind.SITE, V.OFF, site="T2_DE_DESY"), None),
        (OPERATOR, rule(Kind.VO, V.OFF, frontend="dune"), None),
        (SITE_ADMIN, rule(Kind.SITE, V.OFF, site="T2_US_Nebraska"), None),
        (SITE_ADMIN, rule(Kind.CAP, V.OFF, site="T2_US_Nebraska"), None),
        (SITE_ADMIN, rule(Kind.SITE, V.OFF, site="T2_DE_DESY"), "out_of_scope"),
        (SITE_ADMIN, rule(Kind.OPERATOR, V.COMMANDS, site="T2_US_Nebraska"), "wrong_kind"),
        (SITE_ADMIN, rule(Kind.VO, V.COMMANDS, frontend="cms", site="T2_US_Nebraska"), "wrong_kind"),
        (VO, rule(Kind.VO, V.OFF, frontend="cms"), None),
        (VO, rule(Kind.VO, V.OFF, frontend="dune"), "out_of_scope"),
        (VO, rule(Kind.SITE, V.OFF, site="T2_US_Nebraska"), "wrong_kind"),
        (READER, rule(Kind.VO, V.OFF, frontend="cms"), "read_only"),
        (PILOT_TOKEN, rule(Kind.SITE, V.OFF, site="T2_US_Nebraska"), "read_only"),
    ],
)
def test_what_each_role_may_expire_or_delete(who: Principal, target: Rule, denial: str | None) -> None:
    if denial is None:
        authorize_change(who, target)
    else:
        with pytest.raises(Denied) as e:
            authorize_change(who, target)
        assert e.value.reason == denial


# --- values ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [{"site": "T2_*"}, {"frontend": "c?s"}, {"entry": "a b"}, {"site": ""}, {"nope": "x"}, {"pilot": "x" * 300}],
)
def test_selectors_refuse_what_they_cannot_match_exactly(bad: dict[str, str]) -> None:
    if bad == {"site": ""}:
        assert Selector.from_mapping(bad) == Selector()  # empty is "any"
        return
    with pytest.raises(ValueError):
        Selector.from_mapping(bad)


@pytest.mark.parametrize(
    "bad",
    [{}, {"verbosity": "loud"}, {"verbosity": "off", "sample": 2}, {"verbosity": "off", "sample": True},
     {"verbosity": "off", "record_commands": "yes"}, {"verbosity": "off", "extra": 1},
     {"verbosity": "off", "sample": float("nan")}],
)  # fmt: skip
def test_effects_refuse_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Effect.from_mapping(bad)


def test_command_lines_exist_only_at_the_commands_level() -> None:
    assert not Effect(V.SCRIPTS, 1.0, True).record_commands
    assert Effect(V.COMMANDS, 1.0, True).record_commands


def test_sampling_is_deterministic_in_the_trace_id_and_proportional() -> None:
    half = Effect(V.PHASES, 0.5)
    ids = [f"{0xABC:018x}{i:014x}" for i in range(0, 2**56, 2**46)]
    # the threshold compares the last 14 hex digits (56 bits): the lower half of that range is sampled
    assert len(ids) == 1024 and sum(sampled(t, half) for t in ids) == 512
    assert all(sampled(t, Effect(V.PHASES, 1.0)) for t in ids)
    assert not any(sampled(t, Effect(V.PHASES, 0.0)) for t in ids)
    assert not sampled("f" * 32, Effect(V.OFF, 1.0))


def test_the_worked_examples_of_docs_controller_md() -> None:
    """docs/controller.md, "Worked examples", decided by the code."""
    default, ceiling = Effect(V.PHASES), Effect(V.COMMANDS, 1.0, True)
    r1 = Rule(1, Kind.VO, Selector(frontend="cms"), Effect(V.SCRIPTS), "vic", Role.VO_MANAGER, "r", T0)
    r2 = Rule(2, Kind.CAP, Selector(site="T2_US_Nebraska"), Effect(V.PHASES), "sam", Role.SITE_ADMIN, "r", T0,
              T0 + 86400)  # fmt: skip
    r3 = Rule(3, Kind.OPERATOR, Selector(entry="CMS_T2_DE_DESY"), Effect(V.COMMANDS, 1.0, True), "olga",
              Role.OPERATOR, "r", T0)  # fmt: skip
    r4 = Rule(4, Kind.SITE, Selector(site="T2_DE_DESY"), Effect(V.OFF), "dora", Role.SITE_ADMIN, "r", T0, T0 + 7200)
    p = Policy((r1, r2, r3, r4), default, ceiling)
    now = T0 + 60
    nebraska = Attributes(entry="CMS_T2_US_Nebraska_red", site="T2_US_Nebraska", frontend="cms")
    d = p.decide(nebraska, now)
    assert d.as_dict() | {"sample_threshold": 0} == {
        "verbosity": "phases", "sample": 1.0, "record_commands": False, "sample_threshold": 0, "rule": 1,
        "kind": "vo", "capped_by": [2],
    }  # fmt: skip
    d = p.decide(Attributes(entry="CMS_T2_DE_DESY", site="T2_DE_DESY", frontend="cms"), now)
    assert (d.effect, d.rule) == (Effect(V.COMMANDS, 1.0, True), 3)
    dune = Attributes(entry="DUNE_T2_DE_DESY", site="T2_DE_DESY", frontend="dune")
    assert (p.decide(dune, now).effect.verbosity, p.decide(dune, now).rule) == (V.OFF, 4)
    assert (p.decide(dune, T0 + 7200).effect.verbosity, p.decide(dune, T0 + 7200).kind) == (V.PHASES, DEFAULT)
    sam = Principal("sam", Role.SITE_ADMIN, sites=frozenset({"T2_US_Nebraska"}))
    with pytest.raises(Denied) as e:
        authorize_create(sam, Kind.SITE, Selector(site="T2_US_Nebraska"), Effect(V.COMMANDS), p, now, now + 3600)
    assert e.value.reason == "above_cap"
    vic = Principal("vic", Role.VO_MANAGER, frontends=frozenset({"cms"}))
    with pytest.raises(Denied) as e:
        authorize_create(vic, Kind.VO, Selector(frontend="cms", site="T2_US_Nebraska"), Effect(V.COMMANDS), p, now)
    assert e.value.reason == "above_cap"
    authorize_create(vic, Kind.VO, Selector(frontend="cms"), Effect(V.COMMANDS), p, now)
    everywhere = Rule(5, Kind.VO, Selector(frontend="cms"), Effect(V.COMMANDS), "vic", Role.VO_MANAGER, "r", now)
    assert Policy((r2, everywhere), default, ceiling).decide(nebraska, now).effect.verbosity == V.PHASES


# --- the kept per-scope scans decide as the whole scan does -------------------------------------------

_SITES = ("S1", "S2")
_rules_strategy = st.lists(
    st.builds(
        lambda i, kind, v, site, entry, frontend, pilot, created, life, sample, commands: Rule(
            i, kind, Selector(site=site, entry=entry, frontend=frontend, pilot=pilot),
            Effect(Verbosity(v), sample, commands), "o", Role.OPERATOR, "r", T0 + created,
            None if life is None else T0 + created + life,
        ),
        st.integers(1, 10**6),
        st.sampled_from(list(Kind)),
        st.integers(0, 3),
        st.sampled_from([None, *_SITES]),
        st.sampled_from([None, "E1", "E*"]),
        st.sampled_from([None, "cms", "dune"]),
        st.sampled_from([None, "p1", "p*"]),
        st.integers(-100, 100),
        st.one_of(st.none(), st.integers(1, 200)),
        st.sampled_from([0.0, 0.5, 1.0]),
        st.booleans(),
    ),
    max_size=12,
    unique_by=lambda r: r.id,
)  # fmt: skip
_asks = st.lists(
    st.tuples(
        st.sampled_from(_SITES), st.sampled_from(["E1", "E2"]), st.sampled_from(["cms", "dune"]),
        st.sampled_from(["p1", "p2", "q"]), st.integers(-150, 350),
    ),
    min_size=1,
    max_size=20,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(rules=_rules_strategy, asks=_asks)
def test_kept_scans_decide_as_the_whole_scan(rules: list[Rule], asks: list[tuple[str, str, str, str, int]]) -> None:
    policy = Policy(rules, Effect(V.PHASES), Effect(V.COMMANDS, 0.75, True))
    for site, entry, frontend, pilot, at in asks:  # one snapshot, asked at moving times, as a controller does
        attrs = Attributes(site=site, entry=entry, frontend=frontend, pilot=pilot)
        fast, whole = policy.decide(attrs, T0 + at), policy.decide(attrs, T0 + at, explain=True)
        assert (fast.effect, fast.rule, fast.kind, fast.capped_by) == (
            whole.effect, whole.rule, whole.kind, whole.capped_by)  # fmt: skip
