"""`Web`: the web view's pages rendered for the signed-in agent: the session of a
request, a page built in a worker thread and rendered from its template, the error page
of what a page raised, and the live commit events. control/http/web/app.py routes to it,
control/http/web/auth.py signs in and out with it."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import anyio.to_thread
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from memfs.config import HttpConfig
from memfs.control.http.problems import STATUS, Problem
from memfs.control.http.web import live
from memfs.control.http.web.live import CommitFeed
from memfs.control.http.web.look import Look, Page, Redirect
from memfs.control.http.web.signin import COOKIE, SignIns, WebSession
from memfs.control.http.web.templating import environment
from memfs.control.ops.dispatcher import Dispatcher, describe

log = logging.getLogger("memfs.http")

Builder = Callable[[Look, Request], Page | Redirect]


class Web:
    """The pages, rendered for the signed-in agent."""

    def __init__(self, dispatcher: Dispatcher, feed: CommitFeed | None) -> None:
        self.dispatcher = dispatcher
        self.feed = feed
        config = dispatcher.engine.config
        limits = config.http or HttpConfig()
        self.signins = SignIns(dispatcher.tokens, dispatcher.engine.agents,
                               most=limits.max_web_sessions,
                               per_agent=limits.max_web_sessions_per_agent)
        self.env = environment()

    def session(self, request: Request) -> WebSession | None:
        return self.signins.check(request.cookies.get(COOKIE))

    def html(self, template: str, context: dict[str, Any], status: int = 200,
             session: WebSession | None = None) -> HTMLResponse:
        """A rendered page (call in a worker thread for big pages)."""
        full = {"live": None, **context, "agent": session.agent if session else None,
                "csrf": session.csrf if session else ""}
        body = self.env.get_template(template).render(full)
        return HTMLResponse(body, status, headers={"Cache-Control": "no-store"})

    def error(self, error: BaseException, session: WebSession | None) -> HTMLResponse:
        """The error page of an exception a page raised (an unexpected one is logged
        and shown as an internal error, without its details; a client that went away
        is raised again)."""
        if isinstance(error, ClientDisconnect):
            raise error  # no one to answer: not an internal error (control/http/server.py)
        if isinstance(error, Problem):
            code, message, status = error.code, error.message, error.status
        else:
            described = describe(error)
            if described is None:
                log.error("internal error answering a web page", exc_info=error)
                code, message = "internal", "internal error (logged by the daemon)"
            else:
                code, message, _ = described
            status = STATUS.get(code, 500)
        return self.html("error.html", {"code": code, "message": message, "status": status},
                         status, session)

    def page(self, build: Builder) -> Callable[[Request], Awaitable[Response]]:
        """An endpoint: signed in (else to the sign-in page), then ``build`` and
        render in a worker thread; any error becomes an error page."""

        async def endpoint(request: Request) -> Response:
            session = self.session(request)
            if session is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query
                                             else "")
                return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", 303)
            return await anyio.to_thread.run_sync(
                functools.partial(self._render, build, request, session))

        return endpoint

    def _render(self, build: Builder, request: Request, session: WebSession) -> Response:
        try:
            made = build(Look(self.dispatcher, session.agent), request)
            if isinstance(made, Redirect):
                return RedirectResponse(made.url, 303)
            return self.html(made.template, {**made.context, "live": made.live},
                             made.status, session)
        except Exception as error:
            return self.error(error, session)

    async def events(self, request: Request) -> Response:
        session = self.session(request)
        if session is None:
            return PlainTextResponse("not signed in", 401)
        if self.feed is None:
            return PlainTextResponse("no live updates here", 404)
        try:
            stream = self.feed.open(session.agent)
        except live.TooManyStreams as error:
            return PlainTextResponse(str(error), 503, headers={"Retry-After": "30"})
        cookie = request.cookies.get(COOKIE)
        return live.EventStream(self.feed, stream,
                                lambda: self.signins.check(cookie) is not None)
