"""The controller: tokens, the store and the policy snapshot behind the API and the web page.

Decisions never touch the database: they read an in-memory :class:`Policy`
rebuilt from the store whenever a rule changes. This process's own writes
rebuild it at once; another process's (a second worker, a second controller
on the same PostgreSQL) are seen within ``refresh_seconds``, when the store's
generation counter moves. Expiry needs no refresh at all: every decision
compares the rules' expiry with the clock.

Every change and every refused change is written to the audit log in the
same transaction as the change (store.py); every decision and denial is
counted (metrics.py).
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from .config import ControllerConfig, token_hash
from .metrics import ControllerMetrics
from .policy import (
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
    authorize_change,
    authorize_create,
)
from .store import AuditEntry, Store
from .validate import check_reason

log = logging.getLogger("gwms_obs.controller")

# The effective-tracing table's scopes that pilots asked about: kept per asker (a token's name), so a
# token making scopes up fills its own share of the table and pushes out nobody else's; and only those
# asked about lately, so yesterday's flood is gone today. A factory asks for its entries and frontends,
# a few hundred scopes at most; the configured [[scopes]] are always listed.
MAX_SEEN_PER_ASKER = 200
SEEN_SECONDS = 6 * 3600.0
# a scope is listed only when every field could be a selector's (policy._SAFE without patterns): junk
# (a NUL, a bidi override, spaces) is decided for, never shown to an operator
_LISTABLE = re.compile(r"^[A-Za-z0-9_.:@/-]{0,256}$")
SESSION_SECONDS = 8 * 3600.0  # a web session lasts this long at most (web.SESSION_MAX_AGE)


class Controller:
    def __init__(
        self,
        config: ControllerConfig,
        store: Store,
        clock: Callable[[], float] = time.time,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.metrics = metrics if metrics is not None else ControllerMetrics()
        self._principals = config.principals()
        self._lock = threading.Lock()  # writes, and rebuilding the snapshot
        # asker -> scope (factory, entry, site, frontend, security class) -> when last asked, oldest first
        self._seen: dict[str, dict[tuple[str, ...], float]] = {}
        self._policy = Policy((), config.default, config.ceiling)
        self._generation = -1
        self._checked = float("-inf")
        self._next_expiry = float("inf")
        self._reload(self.clock())
        self.metrics.bind(self)

    # --- who is asking ---------------------------------------------------------------------------
    def authenticate(self, token: str) -> Principal | None:
        if not token or len(token) > 512:
            return None
        return self._principals.get(token_hash(token))

    def principal(self, digest: str) -> Principal | None:
        """The principal of a token's hash (the web page's session keeps the hash, never the token)."""
        return self._principals.get(digest)

    # --- web sessions ----------------------------------------------------------------------------------
    def open_session(self, token: str) -> str | None:
        """A new web session for ``token`` (None if it is no token of ours): its id, for the signed cookie.

        The database keeps the session (its id's hash and the token's hash) so that a logout
        ends it everywhere: a copy of the cookie is worth nothing after it.
        """
        if self.authenticate(token) is None:
            return None
        sid = secrets.token_urlsafe(32)
        now = self.clock()
        self.store.open_session(_digest(sid), token_hash(token), now, now + SESSION_SECONDS)
        return sid

    def session_principal(self, sid: str) -> Principal | None:
        """Who a web session speaks for: None once it is closed or expired, or its token left the config."""
        if not sid or len(sid) > 128:
            return None
        digest = self.store.session(_digest(sid), self.clock())
        return None if digest is None else self.principal(digest)

    def close_session(self, sid: str) -> None:
        if sid and len(sid) <= 128:
            self.store.close_session(_digest(sid))

    # --- the snapshot ------------------------------------------------------------------------------
    def _reload(self, now: float) -> None:
        generation = self.store.generation()
        rules = self.store.rules()
        self._policy = Policy(rules, self.config.default, self.config.ceiling)
        self._generation = generation
        self._checked = now
        self._next_expiry = min(
            (r.expires for r in rules if r.expires is not None and r.expires > now), default=float("inf")
        )

    def policy(self) -> Policy:
        return self._snapshot(self.clock())

    def _snapshot(self, now: float) -> Policy:
        """The policy to decide with at ``now``: refreshed when another process changed the rules."""
        if now >= self._next_expiry:
            self._count_expiries(now)
        if now - self._checked >= self.config.refresh_seconds:
            with self._lock:
                if now - self._checked >= self.config.refresh_seconds:
                    if self.store.generation() != self._generation:
                        self._reload(now)
                    else:
                        self._checked = now
        return self._policy

    def _count_expiries(self, now: float) -> None:
        with self._lock:
            if now < self._next_expiry:
                return
            later = float("inf")
            for r in self._policy.rules:
                if r.expires is None:
                    continue
                if self._next_expiry <= r.expires <= now:
                    self.metrics.expired(r.kind)
                elif r.expires > now:
                    later = min(later, r.expires)
            self._next_expiry = later

    # --- deciding ----------------------------------------------------------------------------------
    def decide(self, attrs: Attributes, explain: bool = False, asker: str = "") -> Decision:
        """The decision for a pilot; ``asker`` (the token's name) files its scope in the effective table."""
        now = self.clock()
        decision = self._snapshot(now).decide(attrs, now, explain)
        self.metrics.decided(decision)
        self._remember(attrs, asker, now)
        return decision

    def _remember(self, attrs: Attributes, asker: str, now: float) -> None:
        # on every decision: a tuple key (its hash and == in C), one pop and one insert (which moves it last)
        scope = (attrs.factory, attrs.entry, attrs.site, attrs.frontend, attrs.security_class)
        seen = self._seen.get(asker)
        if seen is None:
            seen = self._seen[asker] = {}
        if seen.pop(scope, None) is None and not all(_LISTABLE.match(v) for v in scope):
            return
        seen[scope] = now
        if len(seen) > MAX_SEEN_PER_ASKER:
            del seen[next(iter(seen))]  # the one asked about least lately

    def effective(self) -> list[tuple[Attributes, Decision]]:
        """The decision, now, for every configured scope and every scope a pilot asked about lately."""
        now = self.clock()
        since = now - SEEN_SECONDS
        lately: list[Attributes] = []
        # decide() changes these in the event loop while this runs in a thread: list() copies each at once
        for seen in list(self._seen.values()):
            lately.extend(Attributes(*scope) for scope, at in list(seen.items()) if at > since)
        scopes = list(dict.fromkeys([*self.config.scopes, *lately]))
        scopes.sort(key=lambda a: (a.site, a.entry, a.frontend, a.factory, a.security_class))
        policy = self._snapshot(now)
        return [(a, policy.decide(a, now)) for a in scopes]

    # --- reading -----------------------------------------------------------------------------------
    def rules(self, active_only: bool = False) -> list[Rule]:
        now = self.clock()
        rules = self.store.rules()
        return [r for r in rules if r.active(now)] if active_only else rules

    def rule(self, rule_id: int) -> Rule | None:
        return self.store.rule(rule_id)

    def audit(self, limit: int = 100, before_id: int | None = None, rule_id: int | None = None) -> list[AuditEntry]:
        return self.store.audit(limit=max(1, min(limit, 1000)), before_id=before_id, rule_id=rule_id)

    # --- changing ----------------------------------------------------------------------------------
    def refuse(
        self,
        who: Principal,
        action: str,
        e: Denied,
        request: dict[str, Any] | None,
        rule_id: int | None,
        why: str = "",
    ) -> None:
        """Audit and count a refused change (``why``: the reason its author gave, whatever it is).

        Counted first: a refusal the database cannot take (it is away) is still counted, and logged.
        The store keeps the why and the detail escaped (validate.visible), so their text cannot fail the write.
        """
        self.metrics.denied(e.reason)
        why = why.strip() if isinstance(why, str) else ""
        try:
            self.store.record_denial(who, action, e.reason, e.detail, self.clock(), request, rule_id, why=why)
        except Exception:
            log.exception("refused %s by %s (%s: %s) could not be audited", action, who.name, e.reason, e.detail)
            raise

    def create_rule(
        self,
        who: Principal,
        kind: Kind,
        selector: Selector,
        effect: Effect,
        reason: str,
        expires: float | None = None,
    ) -> Rule:
        request = {"kind": kind.value, "selector": selector.as_dict(), "effect": effect.as_dict(), "expires": expires}
        with self._lock:
            now = self.clock()
            self._reload(now)  # authorize against every cap in force, whoever wrote it
            try:
                # who may do what first: a refusal names the real reason, not a missing field
                authorize_create(who, kind, selector, effect, self._policy, now, expires)
                reason = check_reason(reason)
                if who.role != Role.OPERATOR:
                    hours = self.config.max_override_hours
                    if expires is None:
                        raise Denied("invalid", f"a {who.role.value}'s rule needs an expiry")
                    if expires - now > hours * 3600:
                        raise Denied("invalid", f"a {who.role.value}'s rule may last {hours:g} h at most")
            except Denied as e:
                self.refuse(who, "create", e, request, None, reason)
                raise
            rule = self.store.create(kind, selector, effect, who, reason, now, expires)
            self.metrics.changed("create")
            self._reload(now)
        return rule

    def expire_rule(self, who: Principal, rule_id: int, reason: str) -> Rule:
        return self._change(who, rule_id, reason, "expire")

    def delete_rule(self, who: Principal, rule_id: int, reason: str) -> Rule:
        return self._change(who, rule_id, reason, "delete")

    def _change(self, who: Principal, rule_id: int, reason: str, action: str) -> Rule:
        with self._lock:
            now = self.clock()
            rule = self.store.rule(rule_id)
            try:
                if rule is None:
                    raise Denied("not_found", f"no rule {rule_id}")
                authorize_change(who, rule)
                reason = check_reason(reason)
                if action == "expire" and not rule.active(now) and rule.created <= now:
                    raise Denied("invalid", f"rule {rule_id} has already expired")
            except Denied as e:
                self.refuse(who, action, e, None, rule_id, reason)
                raise
            if action == "expire":
                _, after = self.store.expire(rule_id, who, reason, now)
            else:
                after = self.store.delete(rule_id, who, reason, now)
            self.metrics.changed(action)
            self._reload(now)
        return after


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()
