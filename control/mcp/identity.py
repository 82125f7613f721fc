"""Who a stdio ``memfs mcp`` acts as when no ``--agent`` (or ``MEMFS_AGENT``) names it.

Against a daemon that knows agents by uid the answer is the uid running the server;
against a personal memory it is the MCP client's own name: ``clientInfo.name`` of its
``initialize`` (or, in the 2026 protocol without a handshake, of each request's
envelope), made into an agent name by `agent_from_client`. A client that gives no
usable name (none, or the SDK's placeholder ``mcp``) is refused with what to add to
its config. So several clients of one user are several agents, never one silently.

`ClientNamed` is the server middleware (the SDK's ``ServerMiddleware``) that settles
this on the first request that can (the daemon may come later: until it answers,
each request asks again) and writes the agent into the instructions the client gets.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from memfs.control.client import ConnectionFailed, MemfsClientError
from memfs.control.mcp.memory import AgentTools
from memfs.control.mcp.storage import StorageTools

log = logging.getLogger("memfs.mcp")

# Names an SDK sends when the client program gives none: not an identity.
PLACEHOLDERS = frozenset({"mcp", "mcp-client", "client", "unknown"})
_OTHER = re.compile(r"[^a-z0-9._-]+")

REFUSED = (
    "memfs: this is a personal memory and the MCP client did not name itself "
    "(clientInfo.name {name}): name the agent in the server's command, e.g. "
    "`claude mcp add memfs -- memfs mcp --agent claude`, or in a JSON config "
    '"args": ["mcp", "--agent", "NAME"], or set MEMFS_AGENT=NAME in its env')


def agent_from_client(name: object) -> str | None:
    """``clientInfo.name`` as an agent name (1-64 of [a-z0-9._-], starting with a
    letter or digit): lowercased, each run of other characters made one "-", trimmed
    of "-", "." and "_" at both ends, cut to 64 ("claude-code" stays, "Codex CLI" is
    "codex-cli", "Gemini CLI (v2)" "gemini-cli-v2"). None when nothing usable is left
    or it is a placeholder (PLACEHOLDERS)."""
    if not isinstance(name, str):
        return None
    agent = _OTHER.sub("-", name.lower()).strip("-._")[:64].rstrip("-._")
    return agent if agent and agent not in PLACEHOLDERS else None


def client_name(ctx: Any) -> object:
    """The client's ``clientInfo.name`` as this request carries or follows it."""
    params = ctx.params if isinstance(ctx.params, dict) else {}
    info = params.get("clientInfo")  # the initialize request itself
    if info is None:
        info = (params.get("_meta") or {}).get("io.modelcontextprotocol/clientInfo")
    if isinstance(info, dict):
        return info.get("name")
    committed = getattr(ctx.session, "client_params", None)  # after the handshake
    return None if committed is None else committed.client_info.name


class IdentityRefused(Exception):
    """The daemon answered but serves this caller nothing (or refuses ``--as``)."""


def whoami(tools: StorageTools) -> dict[str, Any] | None:
    """The daemon's view of this server's agent; None when the daemon is a personal
    memory and no agent is named yet. Raises IdentityRefused, ConnectionFailed."""
    try:
        return tools.whoami()
    except ConnectionFailed:
        raise
    except MemfsClientError as error:
        if error.details.get("agent_required"):
            return None
        raise IdentityRefused(error.message) from None


class ClientNamed:
    """Server middleware: settles who this server acts as (see the module docstring)
    on the first request that can, and puts the agent in the instructions of the
    ``initialize`` (or ``server/discover``) result. ``instructions(me)`` makes the
    instructions from the daemon's whoami; ``run(fn, *args)`` runs a blocking call in
    a worker thread."""

    def __init__(self, tools: AgentTools, instructions: Callable[[dict[str, Any]], str],
                 run: Callable[..., Awaitable[Any]]) -> None:
        self.tools = tools
        self.instructions = instructions
        self.run = run
        self.settled: str | None = None  # the instructions, once settled

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if self.settled is None and not ctx.method.startswith("notifications/"):
            try:
                self.settled = await self.run(self._settle, client_name(ctx))
            except Exception:
                # ``server/discover`` only probes which protocol the server speaks: an
                # error there sends the SDK to the old handshake, which then fails
                # confusingly. Answer it; the client's next request gets the refusal.
                if ctx.method != "server/discover":
                    raise
        result = await call_next(ctx)
        if self.settled is not None and isinstance(result, dict) and \
                ctx.method in ("initialize", "server/discover"):
            result["instructions"] = self.settled
        return result

    def _settle(self, name: object) -> str | None:
        """The instructions once the identity is known (None: the daemon is not there
        yet). Raises MCPError for a client a personal memory cannot name, or one the
        daemon refuses."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_REQUEST

        try:
            me = whoami(self.tools)
            if me is None:
                agent = agent_from_client(name)
                if agent is None:
                    message = REFUSED.format(name=_shown(name))
                    log.error("%s", message)
                    raise MCPError(INVALID_REQUEST, message)
                self.tools.conn.bind(agent)
                me = whoami(self.tools)
                if me is None:  # pragma: no cover - the daemon just took the name
                    raise IdentityRefused(f"the daemon did not take agent {agent!r}")
                log.info("acting as agent %s (the MCP client's name %s)", agent, _shown(name))
        except ConnectionFailed:
            return None
        except (IdentityRefused, MemfsClientError) as error:
            raise MCPError(INVALID_REQUEST, f"memfs: {error}") from None
        return self.instructions(me)


def _shown(name: object) -> str:
    return "absent" if name is None else repr(name)[:100]
