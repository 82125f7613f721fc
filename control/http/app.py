"""The daemon's HTTP listener: one Starlette application served by our HTTP/1.1
server (control/http/server.py) inside ``memfs serve``'s nursery, on the daemon's
own Dispatcher (no second process, no second engine).

Routes: ``/healthz`` and ``/v1/openapi.json`` (public), REST ``/v1/...``
(control/http/files.py, control/http/op_routes.py), MCP at ``/mcp`` (control/http/mcp.py;
its Host and Origin checked first, control/http/origins.py),
``/metrics`` (control/http/metrics.py; public only with ``[http] public_metrics``), and the
read-only web view at ``/ui/`` (control/http/web/), whose pages take a sign-in cookie
opened with a token instead of the header. Everything else needs ``Authorization:
Bearer TOKEN`` (control/http/auth.py). Every error is a problem+json answer (an HTML
page under ``/ui/``); no request can stop the listener.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memfs.config import HttpConfig
from memfs.control.http import files, mounts, op_routes
from memfs.control.http.auth import BearerAuth
from memfs.control.http.mcp import McpEndpoint
from memfs.control.http.metrics import CONTENT_TYPE, Metrics
from memfs.control.http.openapi import document
from memfs.control.http.origins import OriginCheck
from memfs.control.http.problems import problem
from memfs.control.http.server import HttpLimits, HttpServer
from memfs.control.http.web.app import Hardened
from memfs.control.http.web.app import build as build_web
from memfs.control.http.web.live import CommitFeed
from memfs.control.ops.dispatcher import Dispatcher
from memfs.control.socket.server import max_line_bytes

log = logging.getLogger("memfs.http")
PUBLIC = frozenset({"/healthz", "/v1/openapi.json"})
MCP = "/mcp"  # Host and Origin checked (control/http/origins.py)
WEB = "/ui"  # the web view: its own sign-in (control/http/web/signin.py), not the header


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
    api = files.Api(dispatcher)
    mcp = McpEndpoint(dispatcher, max_line_bytes(config.max_file_size), metrics)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def openapi(_: Request) -> Response:
        # Built once, on first use: about 0.3 s of schema generation, kept off the
        # event loop so that it stalls no other request.
        return JSONResponse(await trio.to_thread.run_sync(document))

    async def metrics_text(_: Request) -> Response:
        if metrics is None:
            return problem("not_found", "metrics are off")
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def not_found(request: Request, _: Exception) -> Response:
        return problem("not_found", f"no such endpoint: {request.url.path} (see "
                       "/v1/openapi.json)")

    async def not_allowed(request: Request, _: Exception) -> Response:
        allowed = ", ".join(allowed_methods(routes, request.scope["path"]))
        return problem("method_not_allowed", f"{request.method} is not allowed on "
                       f"{request.url.path} (allowed: {allowed})", headers={"Allow": allowed})

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

    # Host and Origin first (MCP's transport rules: 403 for a page of another site,
    # token or not), then the bearer token
    middleware = [Middleware(OriginCheck, http=http, paths={MCP}),
                  Middleware(BearerAuth, tokens=dispatcher.tokens,
                             agents=dispatcher.engine.agents, public=no_header)]
    if metrics is not None:
        middleware.insert(0, Middleware(_Counting, metrics=metrics))
    # Starlette tries the routes in order, a regular expression each: the file routes,
    # the most asked for, first (no path of the others is one of theirs)
    routes: list[BaseRoute] = [
        *files.routes(api),
        *mounts.routes(api, feed),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/openapi.json", openapi, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        Route(MCP, mcp),
        *op_routes.routes(api),
        # the web view's own address without its slash: a web answer, so hardened too
        Route(WEB, Hardened(RedirectResponse(f"{WEB}/", 308)), methods=["GET", "HEAD"]),
        Mount(WEB, build_web(dispatcher, feed)),
    ]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                     exception_handlers={404: not_found, 405: not_allowed,
                                         HTTPException: http_error})


def allowed_methods(routes: list[BaseRoute], path: str) -> list[str]:
    """Every method some route of ``path`` takes (RFC 9110 section 15.5.6: a 405 names
    them all in Allow; several routes may share one path, a method each)."""
    found: set[str] = set()
    for route in routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(path):
            found |= route.methods
    return sorted(found)


@dataclass
class BoundHttp:
    """The HTTP listener's sockets, bound and listening, its TLS context (None: plain
    HTTP) and the URLs it serves (the ports actually bound)."""

    sockets: list[socket.socket]
    tls: ssl.SSLContext | None
    urls: list[str]

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def bind_http(http: HttpConfig) -> BoundHttp:
    """Load the TLS certificate and key (when configured) and bind ``http.listen``
    (every address the host name has; port 0: any free port). Blocking, no event loop
    needed: a daemon started as root does it before it drops root, so the key may be
    readable by root only (memfs/daemon/privilege.py). Raises OSError when the
    certificate cannot be loaded or an address cannot be bound."""
    host, port = http.address
    tls = None
    if http.tls_cert is not None and http.tls_key is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(http.tls_cert, http.tls_key)
        except (OSError, ssl.SSLError) as error:
            raise OSError(f"cannot load [http] tls_cert {http.tls_cert} and tls_key "
                          f"{http.tls_key}: {error.strerror or error}") from None
        tls.set_alpn_protocols(["http/1.1"])
    bound = BoundHttp([], tls, [])
    try:
        for family, _type, _proto, _name, address in socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
            sock = socket.create_server(address, family=family, backlog=socket.SOMAXCONN)
            bound.sockets.append(sock)
            bound_host, bound_port = sock.getsockname()[:2]
            scheme = "https" if tls else "http"
            bound.urls.append(f"{scheme}://[{bound_host}]:{bound_port}" if ":" in bound_host
                              else f"{scheme}://{bound_host}:{bound_port}")
    except BaseException:
        bound.close()
        raise
    return bound


async def serve_http(app: Starlette, bound: BoundHttp, limits: HttpLimits, *,
                     stop: trio.Event, stopped: trio.Event,
                     counted: Callable[[int], None] | None = None,
                     task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                     ) -> None:
    """Serve ``app`` (its lifespan around it) on the sockets of `bind_http` within
    ``limits`` until ``stop`` is set (in-flight requests then get
    control.http.server.GRACEFUL_SECONDS). Reports the URLs when serving; sets ``stopped``
    when done. ``counted``: see HttpServer."""
    try:
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                     for sock in bound.sockets]
        server = HttpServer(app, limits, tls=bound.tls, counted=counted)
        async with app.router.lifespan_context(app), trio.open_nursery() as nursery:
            await nursery.start(server.serve, listeners, stop)
            task_status.started(bound.urls)
    finally:
        stopped.set()
