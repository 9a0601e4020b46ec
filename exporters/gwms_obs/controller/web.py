"""The controller's web page (being written: see docs/controller.md)."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware


def app(controller: Any, session_secret: str, https_only: bool = False) -> Starlette:
    middleware = [Middleware(SessionMiddleware, secret_key=session_secret, same_site="strict", https_only=https_only)]
    return Starlette(routes=[], middleware=middleware)
