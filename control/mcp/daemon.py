"""Which daemon a stdio ``memfs mcp`` serves, checked when the client connects.

An MCP client starts ``memfs mcp`` with a minimal environment (the official SDKs pass
HOME, LOGNAME, PATH, SHELL, TERM, USER; ``env -i`` nothing), so the socket is looked
for from the uid alone (memfs/places.py's `find_socket`). `DaemonChecked` refuses the
client's ``initialize`` with a JSON-RPC error naming every place looked and what to
set, when no daemon answers: one clear refusal at connect time instead of every tool
call failing later.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any

from memfs import places
from memfs.control.client import Client, ConnectionFailed
from memfs.control.mcp.storage import Connection


def daemon_socket(given: str | None = None) -> str:
    """The control socket to use: ``given`` (``--socket``) or ``MEMFS_SOCKET`` if set,
    else this user's personal daemon's, else the system daemon's. Raises
    places.NoDaemon (its message names every place looked)."""
    return places.find_socket(given)


def check_daemon(connection: Connection, given: str | None) -> None:
    """Point ``connection`` at the daemon found now (it may have started after this
    server) and make sure it answers. Raises ConnectionFailed with a message naming
    the places looked and what to set."""
    try:
        path = daemon_socket(given)
    except places.NoDaemon as error:
        raise ConnectionFailed(str(error)) from None
    connection.socket_path = path  # the connection opens lazily: the next one goes here
    try:
        with contextlib.closing(Client(path)):
            pass
    except ConnectionFailed as error:
        if given or os.environ.get("MEMFS_SOCKET"):
            raise  # named: the only place looked
        looked = ", ".join(places.candidates(given))
        raise ConnectionFailed(f"{error.message} (looked at: {looked})") from None


class DaemonChecked:
    """Server middleware: until the daemon has answered once, the client's first
    request (``initialize``; in the 2026 protocol, which has no handshake, any
    request after ``server/discover``) is refused with JSON-RPC -32603 "memfs: no
    memfs daemon found: ..." naming the places looked. ``server/discover`` itself is
    answered: it only probes which protocol the server speaks, and the SDKs take an
    error there for an old server. ``given``: the ``--socket`` option, if any;
    ``run(fn, *args)`` runs a blocking call in a worker thread."""

    def __init__(self, connection: Connection, given: str | None,
                 run: Callable[..., Awaitable[Any]]) -> None:
        self.connection = connection
        self.given = given
        self.run = run
        self.found = False  # once found, the connection reconnects by itself

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if not self.found and ctx.method != "server/discover" and \
                not ctx.method.startswith("notifications/"):
            try:
                await self.run(check_daemon, self.connection, self.given)
            except ConnectionFailed as error:
                from mcp.shared.exceptions import MCPError
                from mcp_types import INTERNAL_ERROR

                raise MCPError(INTERNAL_ERROR, f"memfs: {error.message}") from None
            self.found = True
        return await call_next(ctx)
