"""A `Client` without a socket: each call is validated with the protocol models and
carried out by the Dispatcher of this very process, for one agent.

MCP over HTTP (control/http/mcp.py) gives each MCP session one of these, so the
tool layer and all of the client's per-connection bookkeeping (what this connection
last saw of each path, sent as ``expect``) work exactly as over the socket. Errors
are the client's MemfsClientError subclasses, by protocol code (control.ops.dispatcher's
`describe`), as if the reply had crossed the socket.
"""

from __future__ import annotations

import _thread
import itertools
import logging
from typing import Any

from control.client.client import _BY_CODE, Client, InternalError, PermissionDeniedError
from control.ops.dispatcher import Dispatcher, describe
from control.ops.registry import RESERVED_FIELDS, agent_ops, build_request

log = logging.getLogger("memfs.control")


class InProcessClient(Client):
    def __init__(self, dispatcher: Dispatcher, agent: str) -> None:
        # Deliberately not Client.__init__: there is no socket to connect.
        self.socket_path = "(in-process)"
        self.as_agent = None
        self._ids = itertools.count(1)
        self._lock = _thread.allocate_lock()
        self._pending = b""
        self._versions: dict[str, str] = {}
        self.dispatcher = dispatcher
        self.agent = agent

    def close(self) -> None:
        return None

    def peer_closed(self) -> bool:
        return False

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Carry out one request for this client's agent (never as a delegate) and
        return its result; raises the MemfsClientError subclass of its error code."""
        if op not in agent_ops() or RESERVED_FIELDS & fields.keys():
            raise PermissionDeniedError(f"{op} is not available to an agent here")
        try:
            request = build_request(op, fields)
            return self.dispatcher.execute(self.agent, request, delegate=False)
        except Exception as error:
            described = describe(error)
            if described is None:
                log.exception("internal error on %s", op)
                raise InternalError(f"internal error: {error!r}") from None
            code, message, details = described
            raise _BY_CODE.get(code, InternalError)(message, details) from None
