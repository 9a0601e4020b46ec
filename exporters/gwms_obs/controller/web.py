"""The controller's web page: the people who own a site or a frontend change its tracing here.

Server-rendered HTML from the Jinja2 templates shipped in ``templates/``,
plain HTML forms, no JavaScript: every page works in any browser, and the
Content-Security-Policy forbids inline script outright.

Sessions are Starlette's signed cookie (8 h, SameSite=Strict, HttpOnly). It
holds a random session id and a CSRF token, never the token; the database
holds the session (the id's hash, the token's hash, its expiry), and every
request looks it up again (``controller.session_principal``): a logout
deletes it, so a copy of the cookie is worth nothing after it, in every
worker; and a token removed from the configuration stops working on its very
next request. Every POST (the login's too) carries the session's CSRF token
in a hidden field; a login starts a new session (new id, new CSRF token), so
a session planted before it is worth nothing after.

Every row is rendered, whatever the database holds: a time no calendar shows
reads "(not a time: ...)", an audit entry that cannot be read says so, and
control and bidirectional-override characters show as escapes
(validate.visible), never as what they would do to the page.

The page decides which forms and buttons to show from the same policy
functions the controller enforces (policy.authorize_change), and the
controller checks and audits every write again, whatever the page showed.
"""

from __future__ import annotations

import hmac
import logging
import math
import re
import secrets
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..tracing import conventions as C
from . import pilots as PL
from .policy import CEILING, Denied, Kind, Principal, Role, Rule, Verbosity, authorize_change, require_writer
from .validate import STATUS, parse_id, rule_request, visible

log = logging.getLogger("gwms_obs.controller")

SESSION_COOKIE = "gwms_controller_session"
SESSION_MAX_AGE = 8 * 3600
MAX_FORM = 16 * 1024  # the largest form is a few hundred bytes; a reason is at most 500 characters
MAX_FIELDS = 32
AUDIT_PAGE = 50  # entries per page of /audit
RECENT_AUDIT = 15  # entries on the front page
LEVELS = tuple(v.label for v in Verbosity)
DEFAULT_HOURS = 2
PILOT_HOURS = 24  # /pilots lists the last day's pilots unless told
PILOT_ROWS = 100
# where a login may send the browser back to: a pilot page or list (the one page reached by a link from
# elsewhere, a dashboard's); any other "next" is ignored, so a link cannot send a login off-site
_NEXT = re.compile(r"^/pilots(/[0-9a-f]{32})?(\?[A-Za-z0-9_.:@/%=&+-]{0,600})?$")
_ENTRY = re.compile(r"^[A-Za-z0-9_.:@/-]{1,256}$")

# no inline script or style anywhere: the stylesheet is served from the package
CSP = "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class _SecurityHeaders:
    """Adds the security headers to every response, errors included; Cache-Control no-store unless set."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if "cache-control" not in headers:
                    headers["Cache-Control"] = "no-store"  # pages show rules and the audit log
            await send(message)

        await self.app(scope, receive, send_with_headers)


# --- formatting ----------------------------------------------------------------------------------


def utc(ts: object) -> str:
    """A Unix time as ISO 8601 UTC; anything no calendar shows (1e300, inf, a string) as itself, never an error."""
    if ts is None:
        return "never"
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        return f"(not a time: {visible(repr(ts), 40)})"


def relative(ts: object, now: float) -> str:
    """``in 1 h 59 min`` / ``3 min ago``: two units at most, rounded down ("" for no time, or not a time)."""
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts) or not math.isfinite(now):
        return ""
    delta = ts - now
    s = round(abs(delta))  # to the second: a rule made for 2 h reads "in 2 h", not "in 1 h 59 min"
    if s == 0:
        return "now"
    if s < 60:
        text = f"{s} s"
    else:
        days, rest = divmod(s // 60, 24 * 60)
        hours, minutes = divmod(rest, 60)
        units = [(days, "d"), (hours, "h"), (minutes, "min")]
        # the two largest units from the first non-zero one
        first = next(i for i, (n, _) in enumerate(units) if n)
        text = " ".join(f"{n} {u}" for n, u in units[first : first + 2] if n)
    return f"in {text}" if delta >= 0 else f"{text} ago"


def effect_text(verbosity: str, sample: float, record_commands: bool) -> str:
    return f"{verbosity}, sample {sample:g}, command lines {'yes' if record_commands else 'no'}"


def selector_text(selector: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in selector.items() if v) or "every pilot"


def rule_summary(d: Mapping[str, Any] | None) -> str:
    """One line for a rule as the audit log keeps it (Rule.as_dict, or a refused request).

    Raises (TypeError, ValueError, AttributeError...) on an entry of another shape: _audit_row says so.
    """
    if not d:
        return ""
    if "unreadable" in d:
        raise ValueError("not a JSON object")
    effect = d.get("effect") or {}
    text = f"{d.get('kind', '?')} [{selector_text(d.get('selector') or {})}]"
    if effect:
        text += ": " + effect_text(
            str(effect.get("verbosity", "?")), float(effect.get("sample", 1.0)), bool(effect.get("record_commands"))
        )
    if d.get("expires") is not None:
        text += f", until {utc(d['expires'])}"
    return text


def scope_text(who: Principal) -> str:
    if who.role == Role.SITE_ADMIN:
        return "sites " + ", ".join(sorted(who.sites))
    if who.role == Role.VO_MANAGER:
        return "frontends " + ", ".join(sorted(who.frontends))
    if who.role == Role.OPERATOR:
        return "every site and frontend"
    return "read only"


@dataclass(frozen=True, slots=True)
class RuleRow:
    rule: Rule
    reason: str  # shown escaped (validate.visible)
    selector: str
    effect: str
    created: str
    created_ago: str
    expires: str
    expires_in: str
    active: bool
    can_change: bool


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    actor: str
    role: str
    action: str
    rule_id: int | None
    summary: str
    reason: str
    at: str
    ago: str
    outcome: str
    denied: bool


def _rule_row(rule: Rule, who: Principal, now: float) -> RuleRow:
    try:
        authorize_change(who, rule)
        can = rule.active(now)
    except Denied:
        can = False
    return RuleRow(
        rule,
        visible(rule.reason),
        selector_text(rule.selector.as_dict()),
        effect_text(rule.effect.verbosity.label, rule.effect.sample, rule.effect.record_commands),
        utc(rule.created),
        relative(rule.created, now),
        utc(rule.expires),
        relative(rule.expires, now),
        rule.active(now),
        can,
    )


def _audit_row(e: Any, now: float) -> AuditRow:
    """One entry as the page shows it; an entry that cannot be read (a bad JSON, a bad shape) says so."""
    try:
        summary = _summary(e)
    except Exception as x:
        log.warning("audit entry %s cannot be shown: %s", e.id, x)
        summary = f"(this entry could not be read: {visible(str(x), 100)})"
    denied = e.action == "denied"
    outcome = f"denied: {e.outcome}" + (f" ({e.detail})" if e.detail else "") if denied else "ok"
    return AuditRow(e.id, visible(e.actor), e.role, e.action, e.rule_id, visible(summary), visible(e.reason),
                    utc(e.at), relative(e.at, now), visible(outcome), denied)  # fmt: skip


def _summary(e: Any) -> str:
    before, after = e.before, e.after
    if e.action == "create":
        summary = "→ " + rule_summary(after)
    elif e.action == "expire":
        summary = f"{rule_summary(before)} → expires {utc((after or {}).get('expires'))}"
    elif e.action == "delete":
        summary = f"{rule_summary(before)} → deleted"
    else:  # denied: what was asked for
        asked = rule_summary(after) if after else (f"rule {e.rule_id}" if e.rule_id is not None else "")
        summary = f"{e.attempted or 'change'} refused" + (f": {asked}" if asked else "")
    return summary


# --- forms ---------------------------------------------------------------------------------------


class _BadForm(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def _read_form(request: Request) -> dict[str, str]:
    """The urlencoded body, bounded in size and fields (plain HTML forms post nothing else)."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype not in ("application/x-www-form-urlencoded", ""):  # "": an empty body, read as an empty form
        raise _BadForm(415, "this page accepts only its own forms (application/x-www-form-urlencoded)")
    declared = request.headers.get("content-length")
    if declared is not None and (not (declared.isascii() and declared.isdigit()) or int(declared) > MAX_FORM):
        raise _BadForm(413, f"a form of at most {MAX_FORM} bytes")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM:
            raise _BadForm(413, f"a form of at most {MAX_FORM} bytes")
    try:
        pairs = urllib.parse.parse_qsl(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise _BadForm(400, "the form could not be read") from None
    return dict(pairs)


def _number(form: Mapping[str, str], name: str, label: str) -> float:
    try:
        v = float(form.get(name, "").strip())
    except ValueError:
        raise Denied("invalid", f"{label}: a number") from None
    if not math.isfinite(v):
        raise Denied("invalid", f"{label}: a number")
    return v


def rule_from_form(form: Mapping[str, str], now: float) -> tuple[Kind, Any, Any, str, float | None]:
    """The override form's fields as a rule request; Denied("invalid") names the field that is wrong.

    ``kind=site`` (with ``ceiling``: a cap) needs a site; ``kind=vo`` a frontend and optionally a site.
    """
    form_kind = form.get("kind", "")
    site, frontend = form.get("site", "").strip(), form.get("frontend", "").strip()
    if form_kind == "site":
        kind = Kind.CAP if form.get("ceiling") else Kind.SITE
        if not site:
            raise Denied("invalid", "site: choose the site the rule is for")
        selector = {"site": site}
    elif form_kind == "vo":
        kind = Kind.VO
        if not frontend:
            raise Denied("invalid", "frontend: choose the frontend the rule is for")
        selector = {"frontend": frontend, "site": site}
    else:
        raise Denied("invalid", "kind: site or vo")
    hours = _number(form, "hours", "duration in hours")
    if hours <= 0:
        raise Denied("invalid", "duration in hours: more than 0")
    body = {
        "kind": kind.value,
        "selector": selector,
        "effect": {
            "verbosity": form.get("level", ""),
            "sample": _number(form, "sample", "sample ratio"),
            "record_commands": bool(form.get("record_commands")),
        },
        "reason": form.get("reason", ""),
        "hours": hours,
    }
    return rule_request(body, now)


def _csrf(session: dict[str, Any]) -> str:
    token = session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def _csrf_ok(session: Mapping[str, Any], form: Mapping[str, str]) -> bool:
    want, got = session.get("csrf"), form.get("csrf")
    if not isinstance(want, str) or not isinstance(got, str):
        return False
    return hmac.compare_digest(want.encode(), got.encode())


# --- the application -----------------------------------------------------------------------------


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gwms_obs.controller", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["levels"] = LEVELS
    return env


def app(controller: Any, session_secret: str, https_only: bool = False) -> Starlette:
    """The web page over one Controller (mounted at "/" by api.create_app)."""
    env = _templates()
    stylesheet = resources.files(__package__).joinpath("templates", "style.css").read_bytes()

    def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("who", None)
        context.setdefault("flash", None)
        context.setdefault("error", None)
        html = env.get_template(template).render(
            base=request.scope.get("root_path", ""), csrf=_csrf(request.session), **context
        )
        return HTMLResponse(html, status_code=status)

    def message(request: Request, status: int, title: str, text: str, who: Principal | None = None) -> HTMLResponse:
        return page(request, "message.html", status, title=title, text=text, who=who)

    async def current(request: Request) -> Principal | None:
        sid = request.session.get("sid")
        if not isinstance(sid, str):
            return None
        who: Principal | None = await run_in_threadpool(controller.session_principal, sid)
        if who is None:  # logged out, expired, or the token left the configuration: so does this cookie
            request.session.clear()
        return who

    def redirect(request: Request, path: str) -> RedirectResponse:
        return RedirectResponse(request.scope.get("root_path", "") + path, status_code=303)

    async def posted(request: Request, who: Principal | None) -> dict[str, str] | Response:
        """The form, or the refusal page: no session, a bad form, or a failed CSRF check."""
        try:
            form = await _read_form(request)
        except _BadForm as e:
            return message(request, e.status, "Form refused", e.message, who)
        if not _csrf_ok(request.session, form):
            return message(
                request,
                403,
                "Form refused",
                "The form did not carry this session's CSRF token: it is stale (you logged in again since) "
                "or did not come from this page. Reload the page and submit it again.",
                who,
            )
        return form

    def next_path(value: object) -> str:
        """Where to go after the login: a pilot page or list asked for before it, else the rules."""
        return value if isinstance(value, str) and _NEXT.fullmatch(value) else "/"

    def to_login(request: Request) -> RedirectResponse:
        """The login page, coming back here (a pilot page) after it."""
        here = request.url.path[len(request.scope.get("root_path", "")) :]
        if request.url.query:
            here += "?" + request.url.query
        nxt = next_path(here)
        return redirect(request, "/login" + (f"?next={urllib.parse.quote(nxt, safe='/')}" if nxt != "/" else ""))

    async def login_page(request: Request) -> Response:
        nxt = next_path(request.query_params.get("next"))
        if await current(request) is not None:
            return redirect(request, nxt)
        return page(request, "login.html", flash=request.session.pop("flash", None), next=nxt)

    async def login(request: Request) -> Response:
        form = await posted(request, None)
        if isinstance(form, Response):
            return form
        token = form.get("token", "").strip()
        who = controller.authenticate(token)
        if who is None:
            controller.metrics.auth_failures.inc()
            text = "That token is not valid here: check that you pasted all of it, or ask an operator for one."
            return page(request, "login.html", 401, error=text, next=next_path(form.get("next")))
        old = request.session.get("sid")
        if isinstance(old, str):  # logging in again over a session ends that one
            await run_in_threadpool(controller.close_session, old)
        sid = await run_in_threadpool(controller.open_session, token)
        # a new session: nothing from before the login (a planted CSRF token) survives it
        request.session.clear()
        request.session["sid"] = sid
        request.session["csrf"] = secrets.token_urlsafe(32)
        request.session["flash"] = f"Logged in as {who.name} ({who.role.value})."
        return redirect(request, next_path(form.get("next")))

    async def logout(request: Request) -> Response:
        form = await posted(request, await current(request))
        if isinstance(form, Response):
            return form
        sid = request.session.get("sid")
        if isinstance(sid, str):  # ended on the server: a copy of this cookie is worth nothing from now on
            await run_in_threadpool(controller.close_session, sid)
        request.session.clear()
        request.session["flash"] = "Logged out."
        return redirect(request, "/login")

    async def stylesheet_(request: Request) -> Response:
        return Response(stylesheet, media_type="text/css", headers={"Cache-Control": "max-age=3600"})

    async def index_page(
        request: Request,
        who: Principal,
        status: int = 200,
        error: dict[str, str] | None = None,
        values: Mapping[str, str] | None = None,
    ) -> Response:
        show_all = request.query_params.get("all") == "1"

        def gather() -> tuple[list[Rule], list[Any], list[Any], float]:
            return (controller.rules(active_only=not show_all), controller.effective(),
                    controller.audit(limit=RECENT_AUDIT), controller.clock())  # fmt: skip

        rules, effective, audit, now = await run_in_threadpool(gather)
        known_sites = sorted(
            {a.site for a, _ in effective if a.site} | {r.selector.site for r in rules if r.selector.site}
        )
        flash = request.session.pop("flash", None) if status == 200 else None
        hours_max = None if who.role == Role.OPERATOR else controller.config.max_override_hours
        return page(
            request,
            "index.html",
            status,
            who=who,
            scope=scope_text(who),
            flash=flash,
            error=error,
            rules=[_rule_row(r, who, now) for r in rules],
            show_all=show_all,
            effective=[_effective_row(a, d) for a, d in effective],
            audit=[_audit_row(e, now) for e in audit],
            site_form=who.role in (Role.OPERATOR, Role.SITE_ADMIN),
            vo_form=who.role in (Role.OPERATOR, Role.VO_MANAGER),
            sites=sorted(who.sites),
            frontends=sorted(who.frontends),
            known_sites=known_sites,
            hours_max=hours_max,
            # a refused form comes back with what was typed in it; the other keeps its defaults
            site_values=_form_values(values if values and values.get("kind") == "site" else None),
            vo_values=_form_values(values if values and values.get("kind") == "vo" else None),
            now=utc(now),
        )

    def refusal(e: Denied, action: str) -> dict[str, str]:
        return {"action": action, "reason": e.reason, "detail": e.detail}

    async def index(request: Request) -> Response:
        who = await current(request)
        if who is None:
            return redirect(request, "/login")
        return await index_page(request, who)

    def not_logged_in(request: Request) -> Response:
        return message(request, 401, "Not logged in", "Log in first: your session has ended or was never started.")

    async def create(request: Request) -> Response:
        who = await current(request)
        if who is None:
            return not_logged_in(request)
        form = await posted(request, who)
        if isinstance(form, Response):
            return form
        try:
            require_writer(who)
            kind, selector, effect, reason, expires = rule_from_form(form, controller.clock())
        except Denied as e:
            why = form.get("reason", "")
            await run_in_threadpool(controller.refuse, who, "create", e, None, None, why)
            return await index_page(request, who, STATUS.get(e.reason, 403), refusal(e, "create"), form)
        try:
            made = await run_in_threadpool(controller.create_rule, who, kind, selector, effect, reason, expires)
        except Denied as e:  # the controller audited it
            return await index_page(request, who, STATUS.get(e.reason, 403), refusal(e, "create"), form)
        request.session["flash"] = (
            f"Rule {made.id} created: {made.kind.value} [{selector_text(made.selector.as_dict())}] at "
            f"{made.effect.verbosity.label} until {utc(made.expires)} ({relative(made.expires, made.created)})."
        )
        return redirect(request, "/")

    async def expire(request: Request) -> Response:
        who = await current(request)
        if who is None:
            return not_logged_in(request)
        form = await posted(request, who)
        if isinstance(form, Response):
            return form
        raw = request.path_params["rule_id"]
        try:
            rule_id = parse_id(raw, "rule", "not_found")
        except Denied as e:
            await run_in_threadpool(controller.refuse, who, "expire", e, None, None, form.get("reason", ""))
            return message(request, 404, "No such rule", f"There is {e.detail}.", who)
        try:
            done = await run_in_threadpool(controller.expire_rule, who, rule_id, form.get("reason", ""))
        except Denied as e:  # the controller audited it
            return await index_page(request, who, STATUS.get(e.reason, 403), refusal(e, f"expire rule {raw}"))
        request.session["flash"] = f"Rule {done.id} expired."
        return redirect(request, "/")

    async def audit(request: Request) -> Response:
        who = await current(request)
        if who is None:
            return redirect(request, "/login")
        q = request.query_params
        numbers: dict[str, int | None] = {}
        for name in ("before", "rule"):
            v = q.get(name)
            try:
                numbers[name] = None if v is None else parse_id(v, name)
            except Denied as e:
                return message(request, 400, "Bad page", f"{e.detail}.", who)

        def gather() -> tuple[list[Any], float]:
            return controller.audit(AUDIT_PAGE, numbers["before"], numbers["rule"]), controller.clock()

        entries, now = await run_in_threadpool(gather)
        older = entries[-1].id if len(entries) == AUDIT_PAGE else None
        return page(
            request,
            "audit.html",
            who=who,
            scope=scope_text(who),
            audit=[_audit_row(e, now) for e in entries],
            before=numbers["before"],
            rule=numbers["rule"],
            older=older,
            now=utc(now),
        )

    # --- pilot pages: one pilot's trace from Jaeger, only for who may see its site ----------------

    def jaeger_failed(request: Request, who: Principal, e: PL.JaegerFailed) -> Response:
        controller.metrics.jaeger(e.outcome)
        log.warning("pilot page: %s", e.message)
        return message(request, e.status, "Jaeger did not answer", f"{e.message}. Try again in a moment.", who)

    def no_pilot_pages(request: Request, who: Principal) -> Response:
        return message(
            request, 404, "No pilot pages here",
            "This controller is not configured with a Jaeger to read pilots' traces from (jaeger_query_url).", who,
        )  # fmt: skip

    async def pilot(request: Request) -> Response:
        who = await current(request)
        if who is None:
            return to_login(request)
        cfg = controller.config
        if not cfg.jaeger_query_url:
            return no_pilot_pages(request, who)
        tid = PL.trace_id(request.path_params["trace_id"])
        # one answer for "no such trace" and "not yours": another site's trace ids cannot be probed
        not_found = message(
            request, 404, "No such pilot",
            "No pilot you may see has this trace id: it is not in Jaeger (yet, or any more), or it ran at a "
            "site that is not yours.", who,
        )  # fmt: skip
        if tid is None or who.role == Role.PILOT:  # a pilot's token sees no pilot: Jaeger is not asked
            return not_found
        try:
            trace = await run_in_threadpool(PL.fetch_trace, cfg.jaeger_query_url, tid, cfg.jaeger_timeout_seconds)
        except PL.JaegerFailed as e:
            return jaeger_failed(request, who, e)
        controller.metrics.jaeger("ok" if trace is not None else "not_found")
        if trace is None or not PL.may_see(who, PL.resource(trace), cfg.scopes):
            return not_found
        v = PL.view(trace, tid)
        v.jaeger_link = PL.jaeger_link(cfg.jaeger_ui_url, tid)
        v.grafana_link = PL.grafana_link(cfg.grafana_url, cfg.grafana_jaeger_datasource, tid)
        # its entry's other pilots at its own factory (another may have an entry of the same name)
        same = {"factory": v.factory} if _ENTRY.fullmatch(v.factory) else {}
        others = urllib.parse.urlencode({**same, "entry": v.entry})
        return page(request, "pilot.html", who=who, pilot=v, others=others, now=utc(controller.clock()))

    async def pilot_list(request: Request) -> Response:
        who = await current(request)
        if who is None:
            return to_login(request)
        cfg = controller.config
        if not cfg.jaeger_query_url:
            return no_pilot_pages(request, who)
        q = request.query_params
        entry = q.get("entry", "").strip() or None
        if entry is not None and not _ENTRY.fullmatch(entry):
            return message(request, 400, "Bad list", "entry: 1-256 of letters, digits and _.:@/-", who)
        # factories sharing a Jaeger may share entry names: a factory's pilots only, when asked
        factory = q.get("factory", "").strip() or None
        if factory is not None and not _ENTRY.fullmatch(factory):
            return message(request, 400, "Bad list", "factory: 1-256 of letters, digits and _.:@/-", who)
        now = controller.clock()
        try:
            since = _when(q.get("since"), now - PILOT_HOURS * 3600, now)
            until = _when(q.get("until"), now, now)
        except ValueError as e:
            return message(request, 400, "Bad list", str(e), who)
        raw_limit = q.get("limit", str(PILOT_ROWS))
        limit = int(raw_limit) if raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) < 6 else -1
        if not 1 <= limit <= PL.MAX_ROWS:
            return message(request, 400, "Bad list", f"limit: a whole number from 1 to {PL.MAX_ROWS}", who)
        if since >= until:
            return message(request, 400, "Bad list", "since must be before until", who)
        try:
            found = await run_in_threadpool(
                PL.search, cfg.jaeger_query_url, entry, since, until, limit, cfg.jaeger_timeout_seconds, factory
            )
        except PL.JaegerFailed as e:
            return jaeger_failed(request, who, e)
        controller.metrics.jaeger("ok")
        rows = PL.list_rows(
            found,  # Jaeger's search by the factory, held here too: a backend may not search resource tags
            lambda attrs: (
                (factory is None or str(attrs.get(C.FACTORY) or "") == factory) and PL.may_see(who, attrs, cfg.scopes)
            ),
        )
        return page(
            request, "pilots.html", who=who, rows=rows, entry=entry or "", factory=factory or "", since=utc(since),
            until=utc(until),
            limit=limit, found=len(found), now=utc(now), scope=scope_text(who),
        )  # fmt: skip

    routes = [
        Route("/", index, methods=["GET"]),
        Route("/pilots", pilot_list, methods=["GET"]),
        Route("/pilots/{trace_id}", pilot, methods=["GET"]),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/rules", create, methods=["POST"]),
        Route("/rules/{rule_id}/expire", expire, methods=["POST"]),
        Route("/audit", audit, methods=["GET"]),
        Route("/static/style.css", stylesheet_, methods=["GET"]),
    ]
    middleware = [
        Middleware(_SecurityHeaders),
        Middleware(
            SessionMiddleware,
            secret_key=session_secret,
            session_cookie=SESSION_COOKIE,
            max_age=SESSION_MAX_AGE,
            same_site="strict",
            https_only=https_only,
        ),
    ]
    return Starlette(routes=routes, middleware=middleware)


def _when(raw: str | None, default: float, now: float) -> float:
    """A list's since/until: ISO 8601 (UTC unless it says), an epoch, or hours or days back (``6h``, ``7d``)."""
    if raw is None or not raw.strip():
        return default
    v = raw.strip()
    try:
        if v[-1:] in ("h", "d") and v[:-1].replace(".", "", 1).isdigit() and len(v) < 12:
            return now - float(v[:-1]) * (3600 if v[-1] == "h" else 86400)
        if v.replace(".", "", 1).isdigit():
            t = float(v)
        else:
            dt = datetime.fromisoformat(v)
            t = (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError):
        raise ValueError(f"not a time: {visible(v, 60)} (2026-11-01, 2026-11-01T12:00Z, an epoch, 6h or 7d)") from None
    if not math.isfinite(t):
        raise ValueError(f"not a time: {visible(v, 60)}")
    return t


@dataclass(frozen=True, slots=True)
class EffectiveRow:
    site: str
    entry: str
    frontend: str
    factory: str
    verbosity: str
    sample: str
    commands: str
    decided_by: str
    capped_by: str


def _effective_row(a: Any, d: Any) -> EffectiveRow:
    decided = f"rule {d.rule} ({d.kind})" if d.rule is not None else "default"
    capped = ", ".join("ceiling" if c == CEILING else f"rule {c}" for c in d.capped_by)
    return EffectiveRow(a.site, a.entry, a.frontend, a.factory, d.effect.verbosity.label, f"{d.effect.sample:g}",
                        "yes" if d.effect.record_commands else "no", decided, capped)  # fmt: skip


def _form_values(submitted: Mapping[str, str] | None) -> dict[str, Any]:
    """The override forms' values: what was submitted (after a refusal), else the defaults."""
    values: dict[str, Any] = {
        "kind": "", "site": "", "frontend": "", "level": Verbosity.SCRIPTS.label, "sample": "1",
        "record_commands": False, "hours": str(DEFAULT_HOURS), "reason": "", "ceiling": False,
    }  # fmt: skip
    if submitted:
        for key in ("kind", "site", "frontend", "level", "sample", "hours", "reason"):
            if key in submitted:
                values[key] = visible(submitted[key], 600)  # a NUL or bidi override typed: shown, not obeyed
        values["record_commands"] = bool(submitted.get("record_commands"))
        values["ceiling"] = bool(submitted.get("ceiling"))
    return values


__all__ = ["SESSION_COOKIE", "app", "relative", "rule_from_form", "utc"]
