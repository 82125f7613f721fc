"""MCP over streamable HTTP at ``/mcp``, on the daemon's listener, for the agent of
the bearer token (control/http/auth.py runs first).

The same tools as ``memfs mcp`` (control/mcp/server.py's `build_server`), except
storage_download and storage_upload, whose "local" files would be the daemon's. Each
agent gets its own MCPServer and session manager (the official SDK), built on first
use, whose instructions name the agent and its stores. Requests of a session must
carry the token that opened it (the SDK compares the principal we put in the scope);
a session id of another agent is unknown to this agent's manager (404).

Tools run on an `AgentTools` over an in-process client (control/client/inproc.py): the
Dispatcher of this process, no socket, with the client's per-connection version
bookkeeping. There is one per MCP session (the ``Mcp-Session-Id`` of the handshake
protocols) and, for the stateless 2026 protocol where no session exists, one per
token. The SDK runs a tool call in the context of the HTTP request that carried it,
so each request sets `_CURRENT` and the tool functions (built once per agent) reach
the right AgentTools through `SessionTools`; with none set, a tool fails closed.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import trio
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from memfs.control.client.inproc import in_process_client
from memfs.control.mcp.memory import AgentTools
from memfs.control.mcp.storage import Connection
from memfs.control.ops.dispatcher import Dispatcher

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from memfs.control.http.metrics import Metrics

log = logging.getLogger("memfs.http")

# the current request's AgentTools, made on first use (a request the SDK refuses, such
# as one naming an unknown session, never makes one)
_CURRENT: contextvars.ContextVar[Callable[[], AgentTools] | None] = contextvars.ContextVar(
    "memfs_mcp_tools", default=None)
MAX_TOOLS = 4096  # AgentTools kept (sessions and tokens); the oldest go first
MAX_SESSIONS_PER_AGENT = 256
SESSION_IDLE_SECONDS = 30 * 60
_REFUSED = frozenset({"download", "upload"})


class _NotClientsGone(logging.Filter):
    """Drops the SDK's traceback for a client that went away mid-request: no one is
    left to answer, and it is no error (control/http/server.py logs one short line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ClientDisconnect))


_CLIENTS_GONE = _NotClientsGone()


class SessionTools:
    """Stands in for AgentTools in `build_server`: every attribute is looked up on the
    AgentTools of the current request's MCP session (or token)."""

    def __getattr__(self, name: str) -> Any:
        current = _CURRENT.get()
        if current is None or name in _REFUSED:
            raise RuntimeError(f"no MCP session for {name}")
        return getattr(current(), name)


class McpEndpoint:
    """The ASGI app behind ``/mcp``; `running` must be entered (the app's lifespan)."""

    def __init__(self, dispatcher: Dispatcher, max_body: int,
                 metrics: Metrics | None = None) -> None:
        self.dispatcher = dispatcher
        self.max_body = max_body
        self.metrics = metrics
        self._managers: dict[str, StreamableHTTPSessionManager] = {}
        self._tools: collections.OrderedDict[tuple[str, str | None], AgentTools] = \
            collections.OrderedDict()
        self._lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        logging.getLogger("mcp.server.streamable_http").addFilter(_CLIENTS_GONE)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Keep the session managers running; on exit every session ends. Imports the
        MCP SDK first (in a thread), so that no first request waits for it."""
        await trio.to_thread.run_sync(_import_sdk)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    def tools_for(self, agent: str) -> AgentTools:
        """A fresh AgentTools for ``agent`` over its own in-process client."""
        connection = Connection("(in-process)", None,
                                factory=lambda _socket, _as: in_process_client(self.dispatcher,
                                                                              agent))
        return AgentTools(connection, None)

    def _tools_of(self, agent: str, token: str, session: str | None) -> AgentTools:
        key = (token, session)
        tools = self._tools.get(key)
        if tools is None:
            tools = self._tools[key] = self.tools_for(agent)
            while len(self._tools) > MAX_TOOLS:
                self._tools.popitem(last=False)
        else:
            self._tools.move_to_end(key)
        return tools

    async def _manager(self, agent: str) -> StreamableHTTPSessionManager:
        async with self._lock:
            manager = self._managers.get(agent)
            if manager is None:
                if self._nursery is None:
                    raise RuntimeError("the MCP endpoint is not running")
                manager = self._build(agent)
                await self._nursery.start(_run_manager, manager)
                self._managers[agent] = manager
            return manager

    def _build(self, agent: str) -> StreamableHTTPSessionManager:
        from mcp.server.transport_security import TransportSecuritySettings

        from memfs.control.mcp.server import build_server, instructions_for

        instructions = instructions_for(self.tools_for(agent))
        server = build_server(cast(AgentTools, SessionTools()), instructions,
                              local_files=False)
        # Host and Origin are checked in front of the bearer token by
        # control/http/origins.py (a problem+json 403, its log rate-limited); the SDK's
        # own check would answer in plain text and log every refusal.
        server.streamable_http_app(
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=self.max_body, session_idle_timeout=SESSION_IDLE_SECONDS,
            max_sessions=MAX_SESSIONS_PER_AGENT)
        return server.session_manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken

        agent, token = scope["memfs.agent"], scope["memfs.token"]
        # The principal that owns a session: the token (its id, never the token itself).
        scope["user"] = AuthenticatedUser(AccessToken(token=f"memfs-token-{token}",
                                                      client_id=token, scopes=[],
                                                      subject=agent))
        session = None
        for name, value in scope["headers"]:
            if name == b"mcp-session-id":
                session = value.decode("latin-1")[:128]
        manager = await self._manager(agent)
        if session is None and self.metrics is not None and scope["method"] == "POST":
            send = self._counting(send)
        reset = _CURRENT.set(functools.partial(self._tools_of, agent, token, session))
        try:
            await manager.handle_request(scope, receive, send)
        finally:
            _CURRENT.reset(reset)
            if scope["method"] == "DELETE" and session is not None:
                self._tools.pop((token, session), None)

    def _counting(self, send: Send) -> Send:
        """``send`` that counts a new session when the reply carries its id."""
        metrics = self.metrics
        assert metrics is not None

        async def counting(message: Any) -> None:
            if message["type"] == "http.response.start" and any(
                    name == b"mcp-session-id" for name, _ in message.get("headers", [])):
                metrics.mcp_sessions.inc()
            await send(message)

        return counting


def _import_sdk() -> None:
    import mcp.server.streamable_http_manager  # noqa: F401

    import memfs.control.mcp.server  # noqa: F401


async def _run_manager(manager: StreamableHTTPSessionManager, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    async with manager.run():
        task_status.started()
        await trio.sleep_forever()
