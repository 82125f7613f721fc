"""The web view at ``/ui/``: a read-only Starlette application mounted in the daemon's
HTTP listener (control/http/app.py), for the people who supervise agents.

Pages are GET only and read the memory as the signed-in token's agent (control/http/web/
look.py): the overview, a store's files, a file, history, a commit's diff, the task
board, decisions, sessions, what changed since. The only forms are sign-in and
sign-out (control/http/web/auth.py). ``/ui/events`` streams commit notifications to the
live pages (control/http/web/live.py). Every answer carries a strict Content-Security-
Policy (scripts, styles, images only from here; nothing inline; no framing),
``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``; pages are
``Cache-Control: no-store``. Bad input gets an HTML error page with the protocol's
status code and message; no request can stop the daemon.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfs.control.http.problems import Problem, query, read_body
from memfs.control.http.web import auth, views, views_history, views_memory
from memfs.control.http.web.live import CommitFeed
from memfs.control.http.web.look import Look, Page, Redirect
from memfs.control.http.web.pages import Web
from memfs.control.http.web.templating import STATIC
from memfs.control.ops.dispatcher import Dispatcher

log = logging.getLogger("memfs.http")

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"x-frame-options", b"DENY"), (b"referrer-policy", b"same-origin"),
           (b"cross-origin-opener-policy", b"same-origin"),
           (b"cross-origin-resource-policy", b"same-origin")]


class Hardened:
    """Adds the security headers to every response of the web view."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *[(n, v) for n, v in HEADERS if n not in names]]
            await send(message)

        await self.app(scope, receive, with_headers)


DRAINED = 1024 * 1024  # a refused request's body is read up to this, then dropped


async def drain(request: Request) -> None:
    """Read and drop the body of a request that is refused without it, so that the
    connection can carry the client's next request (an unread body ends it)."""
    with contextlib.suppress(Exception):
        await read_body(request, DRAINED)


def _params(request: Request, *names: str) -> dict[str, Any]:
    """The query parameters ``names`` (each at most once; any other is refused)."""
    return query(request, {name: name for name in names})


def _store(request: Request) -> str:
    return str(request.path_params["store"])


def _overview(look: Look, request: Request) -> Page | Redirect:
    _params(request)
    return views.overview(look)


def _changes(look: Look, request: Request) -> Page | Redirect:
    q = _params(request, "since", "until", "author")
    return views_history.changes_page(look, q.get("since"), q.get("until"), q.get("author"))


def _store_page(look: Look, request: Request) -> Page | Redirect:
    q = _params(request, "dir", "page")
    return views.store_page(look, _store(request), q.get("dir") or "", q.get("page"))


def _file(look: Look, request: Request) -> Page | Redirect:
    q = _params(request, "at", "page")
    return views.file_page(look, _store(request), request.path_params["path"], q.get("at"),
                           q.get("page"))


def _history(look: Look, request: Request) -> Page | Redirect:
    q = _params(request, "path", "rev")
    return views_history.history_page(look, _store(request), q.get("path") or "",
                                      q.get("rev") or None)


def _commit(look: Look, request: Request) -> Page | Redirect:
    q = _params(request, "path")
    return views_history.commit_page(look, _store(request), request.path_params["rev"],
                                     q.get("path") or None)


def _tasks(look: Look, request: Request) -> Page | Redirect:
    _params(request)
    return views_memory.tasks_page(look, _store(request))


def _decisions(look: Look, request: Request) -> Page | Redirect:
    _params(request)
    return views_memory.decisions_page(look, _store(request))


def _sessions(look: Look, request: Request) -> Page | Redirect:
    q = _params(request, "agent")
    return views_memory.sessions_page(look, _store(request), q.get("agent") or None)


def build(dispatcher: Dispatcher, feed: CommitFeed | None = None) -> Starlette:
    """The web view's application, to be mounted at ``/ui``."""
    web = Web(dispatcher, feed)
    s = "/stores/{store}"
    routes = [
        Route("/", web.page(_overview)),
        Route("/changes", web.page(_changes)),
        Route(f"{s}/", web.page(_store_page)),
        Route(f"{s}/files/{{path:path}}", web.page(_file)),
        Route(f"{s}/history", web.page(_history)),
        Route(f"{s}/commits/{{rev}}", web.page(_commit)),
        Route(f"{s}/tasks", web.page(_tasks)),
        Route(f"{s}/decisions", web.page(_decisions)),
        Route(f"{s}/sessions", web.page(_sessions)),
        Route("/events", web.events),
        Route("/login", functools.partial(auth.login_form, web), methods=["GET"]),
        Route("/login", functools.partial(auth.login, web), methods=["POST"]),
        Route("/logout", functools.partial(auth.logout, web), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]

    async def not_found(request: Request, _: Exception) -> Response:
        return web.error(Problem("not_found", f"no such page: {request.url.path}"),
                         web.session(request))

    async def not_allowed(request: Request, _: Exception) -> Response:
        await drain(request)
        return web.error(Problem("method_not_allowed", f"{request.method} is not allowed "
                                 "here: the web view only reads (GET)"), web.session(request))

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return web.error(Problem("invalid", str(error.detail), status=error.status_code),
                         web.session(request))

    app = Starlette(routes=routes, middleware=[Middleware(Hardened)],
                    exception_handlers={404: not_found, 405: not_allowed,
                                        HTTPException: http_error})
    app.state.web = web
    return app

