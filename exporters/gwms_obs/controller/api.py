"""The controller's HTTP JSON API (docs/controller.md, "API"), a Starlette application.

Every request but /healthz and /metrics carries ``Authorization: Bearer
TOKEN``; the token's role and scope decide what it may do (policy.py), and a
refusal is a JSON body naming the reason. ``/v1/decide`` is the hot path:
async, no database, no thread hop; the writes are rare and run in the thread
pool so a slow database never stalls the decisions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import unquote_plus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from . import web
from .policy import SELECTOR_FIELDS, Attributes, Denied, Principal, require_writer
from .validate import STATUS, parse_id, rule_request

log = logging.getLogger("gwms_obs.controller")

MAX_BODY = 64 * 1024

Handler = Callable[[Request], Awaitable[Response]]


UNAUTHENTICATED = "a valid bearer token is required"


def _dumps(content: Any) -> bytes:
    return json.dumps(content, separators=(",", ":"), allow_nan=False).encode()


class _Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        return _dumps(content)


def error(status: int, reason: str, detail: str, headers: dict[str, str] | None = None) -> Response:
    return _Json({"error": reason, "detail": detail}, status_code=status, headers=headers)


def bearer(authorization: str) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` header's value ("" for any other scheme)."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _unauthorized() -> Response:
    return error(401, "unauthenticated", UNAUTHENTICATED, {"WWW-Authenticate": "Bearer"})


async def _body(request: Request) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and (not (declared.isascii() and declared.isdigit()) or int(declared) > MAX_BODY):
        raise Denied("invalid", f"a body of at most {MAX_BODY} bytes")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise Denied("invalid", f"a body of at most {MAX_BODY} bytes")
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as e:  # UnicodeDecodeError and a number of over 4,300 digits included
        raise Denied("invalid", f"the body is not JSON: {e}") from None
    except RecursionError:  # [[[[... within the size cap
        raise Denied("invalid", "the body nests too deeply") from None
    if not isinstance(body, dict):
        raise Denied("invalid", "the body must be a JSON object")
    return body


_JSON_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
_DECIDE_FIELDS = frozenset(SELECTOR_FIELDS)
MAX_BODIES = 4096  # rendered answers kept: one per distinct decision, a handful in practice


class DecideFastPath:
    """``GET /v1/decide`` straight on ASGI, everything else to the Starlette application.

    Pilots ask once each, thousands a second: Starlette's request objects,
    routing and JSONResponse cost more than the decision itself, so this path
    reads the raw scope, and renders each distinct answer (a handful: effect,
    rule, kind, caps) once. Its refusals are the routed handlers': 401
    without a known token, 400 for an unknown parameter.
    """

    def __init__(self, controller: Any, app: Starlette) -> None:
        self.controller = controller
        self.app = app
        self._bodies: dict[Any, bytes] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/decide" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        token = next((bearer(v.decode("latin-1")) for k, v in scope["headers"] if k == b"authorization"), "")
        who = self.controller.authenticate(token)
        if who is None:
            self.controller.metrics.auth_failures.inc()
            await _send(send, 401, _dumps({"error": "unauthenticated", "detail": UNAUTHENTICATED}),
                        [(b"www-authenticate", b"Bearer")])  # fmt: skip
            return
        values: dict[str, str] = {}
        explain = False
        query = scope["query_string"]
        if query:
            for key, value in _query(query):
                if key in _DECIDE_FIELDS:
                    values[key] = value
                elif key == "explain":
                    explain = value in ("1", "true")
                else:
                    detail = f"unknown parameter {key[:40]!r}: {', '.join(SELECTOR_FIELDS)}, explain"
                    await _send(send, 400, _dumps({"error": "invalid", "detail": detail}))
                    return
        decision = self.controller.decide(Attributes.from_mapping(values), explain, who.name)
        if explain:
            body = _dumps(decision.as_dict(True))
        else:
            body = self._bodies.get(decision)  # type: ignore[assignment]
            if body is None:
                if len(self._bodies) >= MAX_BODIES:
                    self._bodies.clear()
                body = self._bodies[decision] = _dumps(decision.as_dict())
        await _send(send, 200, body)


def _query(raw: bytes) -> Iterator[tuple[str, str]]:
    """``parse_qsl(..., keep_blank_values=True)`` for a query string, unquoting only what is quoted:
    pilots' queries rarely are, and parse_qsl's unquoting was a fifth of a decision."""
    for part in raw.decode("latin-1").split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        if "%" in key or "+" in key:
            key = unquote_plus(key)
        if "%" in value or "+" in value:
            value = unquote_plus(value)
        yield key, value


async def _send(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [*_JSON_HEADERS, (b"content-length", str(len(body)).encode()), *(headers or ())],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def create_app(controller: Any, session_secret: str, https_only: bool = False) -> DecideFastPath:
    """The API and the web page (web.py) over one Controller."""

    def authed(handler: Callable[[Request, Principal], Awaitable[Response]]) -> Handler:
        async def wrapped(request: Request) -> Response:
            who = controller.authenticate(bearer(request.headers.get("authorization", "")))
            if who is None:
                controller.metrics.auth_failures.inc()
                return _unauthorized()
            try:
                return await handler(request, who)
            except Denied as e:
                return error(STATUS.get(e.reason, 403), e.reason, e.detail)

        return wrapped

    async def whoami(request: Request, who: Principal) -> Response:
        return _Json(who.as_dict())

    async def rules(request: Request, who: Principal) -> Response:
        active = request.query_params.get("active", "") in ("1", "true")
        found = await run_in_threadpool(controller.rules, active)
        return _Json({"rules": [r.as_dict() for r in found], "now": controller.clock()})

    def _rule_id(request: Request) -> int:
        return parse_id(request.path_params["rule_id"], "rule", "not_found")

    async def rule(request: Request, who: Principal) -> Response:
        rule_id = _rule_id(request)
        found = await run_in_threadpool(controller.rule, rule_id)
        if found is None:
            raise Denied("not_found", f"no rule {rule_id}")
        return _Json(found.as_dict())

    async def create(request: Request, who: Principal) -> Response:
        body: dict[str, Any] = {}
        try:
            require_writer(who)
            body = await _body(request)
            kind, selector, effect, reason, expires = rule_request(body, controller.clock())
        except Denied as e:  # the request's own reason goes with it, whatever it is (the store escapes it)
            await run_in_threadpool(controller.refuse, who, "create", e, None, None, body.get("reason", ""))
            raise
        made = await run_in_threadpool(controller.create_rule, who, kind, selector, effect, reason, expires)
        return _Json(made.as_dict(), status_code=201)

    async def change(request: Request, who: Principal, action: str) -> Response:
        """Expire or delete a rule; a refusal of the request itself (bad id, bad body) is audited too."""
        rule_id: int | None = None
        try:
            rule_id = _rule_id(request)
            body = await _body(request)
        except Denied as e:
            await run_in_threadpool(controller.refuse, who, action, e, None, rule_id)
            raise
        reason = body.get("reason", request.query_params.get("reason", "") if action == "delete" else "")
        done = await run_in_threadpool(
            controller.expire_rule if action == "expire" else controller.delete_rule, who, rule_id, reason
        )
        return _Json(done.as_dict())

    async def expire(request: Request, who: Principal) -> Response:
        return await change(request, who, "expire")

    async def delete(request: Request, who: Principal) -> Response:
        return await change(request, who, "delete")

    async def audit(request: Request, who: Principal) -> Response:
        q = request.query_params

        def number(name: str) -> int | None:
            v = q.get(name)
            return None if v is None else parse_id(v, name)

        entries = await run_in_threadpool(controller.audit, number("limit") or 100, number("before"), number("rule"))
        return _Json({"audit": [e.as_dict() for e in entries]})

    async def effective(request: Request, who: Principal) -> Response:
        rows = await run_in_threadpool(controller.effective)
        return _Json({"effective": [{"scope": vars_(a), **d.as_dict()} for a, d in rows]})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(controller.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        try:
            revision = await run_in_threadpool(controller.store.revision)
        except Exception as e:  # the database is away: say so, with a 503 the probe sees
            log.warning("health check: database unreachable: %s", e)
            return error(503, "database", "the database does not answer")
        return _Json({"status": "ok", "schema": revision})

    routes = [
        Route("/healthz", healthz),
        Route("/metrics", metrics),
        Route("/v1/whoami", authed(whoami)),
        Route("/v1/rules", authed(rules), methods=["GET"]),
        Route("/v1/rules", authed(create), methods=["POST"]),
        Route("/v1/rules/{rule_id}", authed(rule), methods=["GET"]),
        Route("/v1/rules/{rule_id}", authed(delete), methods=["DELETE"]),
        Route("/v1/rules/{rule_id}/expire", authed(expire), methods=["POST"]),
        Route("/v1/audit", authed(audit)),
        Route("/v1/effective", authed(effective)),
        # the web page, with its session cookie, in an application of its own: the API's
        # requests never pay for the session middleware
        Mount("/", app=web.app(controller, session_secret, https_only)),
    ]
    return DecideFastPath(controller, Starlette(routes=routes))


def vars_(a: Attributes) -> dict[str, str]:
    return {f: v for f in SELECTOR_FIELDS if (v := getattr(a, f))}


__all__ = ["bearer", "create_app", "error"]
