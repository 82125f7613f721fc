"""The daemon's HTTP listener: one Starlette application served by hypercorn's trio
worker inside ``memfs serve``'s nursery, on the daemon's own Dispatcher (no second
process, no second engine).

Routes: ``/healthz`` and ``/v1/openapi.json`` (public), REST ``/v1/...``
(control/http_rest.py, control/http_routes.py), MCP at ``/mcp`` (control/http_mcp.py),
``/metrics`` (control/metrics.py; public only with ``[http] public_metrics``), and the
read-only web view at ``/ui/`` (control/web/), whose pages take a sign-in cookie
opened with a token instead of the header. Everything else needs ``Authorization:
Bearer TOKEN`` (control/http_auth.py). Every error is a problem+json answer (an HTML
page under ``/ui/``); no request can stop the listener.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from control import http_rest, http_routes
from control.dispatch import Dispatcher
from control.http_auth import BearerAuth
from control.http_mcp import McpEndpoint
from control.http_openapi import document
from control.http_problems import problem
from control.metrics import CONTENT_TYPE, Metrics
from control.server import max_line_bytes
from control.web.app import build as build_web
from control.web.live import CommitFeed
from memfs.config import HttpConfig

log = logging.getLogger("memfs.http")
PUBLIC = frozenset({"/healthz", "/v1/openapi.json"})
WEB = "/ui"  # the web view: its own sign-in (control/web/signin.py), not the header
GRACEFUL_SECONDS = 3.0  # in-flight requests get this long at shutdown


class _Counting:
    """Counts HTTP requests by status, and those in flight (metrics)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def watch(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.http_in_flight.inc()
        try:
            await self.app(scope, receive, watch)
        finally:
            self.metrics.http_in_flight.dec()
            self.metrics.http_requests.labels(str(status)).inc()


def build_app(dispatcher: Dispatcher, http: HttpConfig, metrics: Metrics | None,
              feed: CommitFeed | None = None) -> Starlette:
    """The application for ``dispatcher``'s engine, its tokens and ``metrics``;
    ``feed``: the commit notifications of the web view's live pages (none: the pages
    do not update by themselves)."""
    config = dispatcher.engine.config
    api = http_rest.Api(dispatcher)
    mcp = McpEndpoint(dispatcher, max_line_bytes(config.max_file_size), metrics)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def openapi(_: Request) -> Response:
        return JSONResponse(document())

    async def metrics_text(_: Request) -> Response:
        if metrics is None:
            return problem("not_found", "metrics are off")
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def not_found(request: Request, _: Exception) -> Response:
        return problem("not_found", f"no such endpoint: {request.url.path} (see "
                       "/v1/openapi.json)")

    async def not_allowed(request: Request, _: Exception) -> Response:
        return problem("method_not_allowed", f"{request.method} is not allowed on "
                       f"{request.url.path}")

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return problem("invalid", str(error.detail), status=error.status_code)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with mcp.running():
            yield

    public = PUBLIC | ({"/metrics"} if http.public_metrics else set())

    def no_header(path: str) -> bool:
        return path in public or path == WEB or path.startswith(f"{WEB}/")

    middleware = [Middleware(BearerAuth, tokens=dispatcher.tokens, agents=config.agents,
                             public=no_header)]
    if metrics is not None:
        middleware.insert(0, Middleware(_Counting, metrics=metrics))
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/openapi.json", openapi, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        Route("/mcp", mcp),
        *http_rest.routes(api),
        *http_routes.routes(api),
        Route(WEB, lambda _: RedirectResponse(f"{WEB}/", 308), methods=["GET", "HEAD"]),
        Mount(WEB, build_web(dispatcher, feed)),
    ]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                     exception_handlers={404: not_found, 405: not_allowed,
                                         HTTPException: http_error})


async def serve_http(app: ASGIApp, http: HttpConfig, *, stop: trio.Event, stopped: trio.Event,
                     task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                     ) -> None:
    """Serve ``app`` on ``http.listen`` (TLS when configured) until ``stop`` is set;
    in-flight requests then get GRACEFUL_SECONDS. Reports the bound URLs when
    listening (port 0: the port picked); sets ``stopped`` when done. Raises OSError
    when the address cannot be bound or the certificate loaded."""
    from hypercorn.config import Config as HyperConfig
    from hypercorn.trio import serve

    from control.http_coalesce import install

    install()  # one write per sized response (see there)
    host, port = http.address
    server_log = logging.getLogger("memfs.http.server")
    server_log.setLevel(logging.WARNING)  # hypercorn's own "Running on ..." is ours to say
    hyper = HyperConfig()
    hyper.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    if http.tls_cert is not None and http.tls_key is not None:
        try:  # a clear message now rather than hypercorn's bare errno later
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(http.tls_cert, http.tls_key)
        except (OSError, ssl.SSLError) as error:
            raise OSError(f"cannot load [http] tls_cert {http.tls_cert} and tls_key "
                          f"{http.tls_key}: {error.strerror or error}") from None
        hyper.certfile = str(http.tls_cert)
        hyper.keyfile = str(http.tls_key)
    hyper.accesslog = None  # never a line per request (and never a header)
    hyper.errorlog = server_log
    hyper.graceful_timeout = GRACEFUL_SECONDS
    hyper.keep_alive_timeout = 75.0
    hyper.include_server_header = False
    try:
        await serve(cast(Any, app), hyper, shutdown_trigger=stop.wait, task_status=task_status)
    finally:
        stopped.set()
