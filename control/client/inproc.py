"""The in-process transport of a `Client`: each call is built into the op's request
model and carried out by the Dispatcher of this very process, for one agent.

MCP over HTTP (control/http/mcp.py) gives each MCP session a client over one of these,
so the tool layer and all of the client's per-connection bookkeeping (what this
connection last saw of each path, sent as ``expect``) work exactly as over the socket.
Errors are the client's MemfsClientError subclasses, by protocol code
(control.ops.dispatcher's `describe`), as if the reply had crossed the socket.
"""

from __future__ import annotations

import logging
from typing import Any

from memfs.control.client.client import Client, PermissionDeniedError, error_for
from memfs.control.ops.dispatcher import Dispatcher, describe
from memfs.control.ops.registry import RESERVED_FIELDS, agent_ops

log = logging.getLogger("memfs.control")


class InProcessTransport:
    socket_path = "(in-process)"

    def __init__(self, dispatcher: Dispatcher, agent: str) -> None:
        self.dispatcher = dispatcher
        self.agent = agent

    def close(self) -> None:
        return None

    def peer_closed(self) -> bool:
        return False

    def exchange(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Carry out one request for this transport's agent (never as a delegate) and
        return its result; raises the MemfsClientError subclass of its error code."""
        if op not in agent_ops() or RESERVED_FIELDS & fields.keys():
            raise PermissionDeniedError(f"{op} is not available to an agent here")
        try:
            return self.dispatcher.run(self.agent, op, fields)
        except Exception as error:
            described = describe(error)
            if described is None:
                log.exception("internal error on %s", op)
                raise error_for("internal", f"internal error: {error!r}") from None
            raise error_for(*described) from None


def in_process_client(dispatcher: Dispatcher, agent: str) -> Client:
    """A client whose calls ``dispatcher`` carries out for ``agent``."""
    return Client(transport=InProcessTransport(dispatcher, agent))
