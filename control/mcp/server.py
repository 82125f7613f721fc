"""``memfs mcp``: memory served over MCP with the official SDK.

The MCP SDK is imported inside ``build_server``/``main_mcp`` only, so nothing else pays
for it (the CLI imports this module only for ``memfs mcp``). The tools are made from the
op registry (control/mcp/tools.py) and carried out by control/mcp/storage.py, history.py
and memory.py; this module builds the server and runs the stdio transport. MCP over
streamable HTTP is served by the daemon itself, at ``/mcp`` on its authenticated
listener (control/http/mcp.py, with the same `build_server`).

Identity: the server holds one control-socket connection; the daemon identifies the
agent from that socket's SO_PEERCRED, i.e. the uid running ``memfs mcp``, or the agent
named with ``--as`` when that uid is a delegate. In personal mode the agent is the one
named with ``--agent`` (or ``MEMFS_AGENT``), else the MCP client's own name
(control/mcp/identity.py): never one identity for several clients.
"""

import functools
import importlib.metadata
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import memfs
from memfs.control.client import ConnectionFailed, default_socket
from memfs.control.mcp import resources
from memfs.control.mcp.daemon import DaemonChecked
from memfs.control.mcp.identity import ClientNamed, IdentityRefused, whoami
from memfs.control.mcp.memory import MEMORY_INSTRUCTIONS, AgentTools
from memfs.control.mcp.stdio import executor_runner, run_stdio
from memfs.control.mcp.storage import INSTRUCTIONS, Connection, StorageTools
from memfs.control.mcp.tools import install

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

log = logging.getLogger("memfs.mcp")


def build_server(tools: AgentTools, instructions: str = INSTRUCTIONS, *,
                 local_files: bool = True,
                 run_sync: "Callable[..., Awaitable[Any]] | None" = None,
                 middleware: Sequence[Any] = ()) -> "MCPServer[Any]":
    """An MCPServer exposing every tool of the op registry, each run in a
    worker thread (by ``run_sync(fn, *args)``; default anyio's ``to_thread.run_sync``).
    ``local_files`` False leaves out storage_download/storage_upload (whose local files
    would be the server's, not the client's: over HTTP). ``middleware``: the SDK's
    server middleware, e.g. control/mcp/identity.py's `ClientNamed`."""
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer

    # subscriptions=False: not the SDK's subscriptions/listen, whose streams carry list
    # changes that memfs never sends; resources.install serves its own (files only)
    server: MCPServer[Any] = MCPServer("memfs", version=package_version(),
                                       instructions=instructions, log_level="WARNING",
                                       subscriptions=False)
    server.middleware.extend(middleware)
    run = run_sync or anyio.to_thread.run_sync
    install(server, tools, run, local_files=local_files)
    resources.install(server, tools, run)
    return server


@functools.cache
def package_version() -> str:
    """The installed memfs's version (its package metadata; ``memfs.__version__`` for
    a checkout used without installing it): the MCP ``serverInfo.version``."""
    try:
        return importlib.metadata.version("memfs")
    except importlib.metadata.PackageNotFoundError:
        return memfs.__version__


GENERIC = INSTRUCTIONS + MEMORY_INSTRUCTIONS


def instructions_for(tools: StorageTools) -> str:
    """The server instructions, naming this agent and its stores when the daemon answers.
    Raises IdentityRefused if the daemon will serve this caller nothing (or serves a
    personal memory and no agent is named)."""
    try:
        me = whoami(tools)
    except ConnectionFailed as error:  # the daemon may come later: tools reconnect
        log.warning("%s; starting anyway", error.message)
        return GENERIC
    if me is None:
        raise IdentityRefused("this is a personal memory: name the agent (--agent NAME)")
    return naming(me)


def naming(me: dict[str, Any]) -> str:
    """The instructions for the agent the daemon's whoami describes."""
    stores = ", ".join(f"{name} ({access.replace('_', '-')})"
                       for name, access in sorted(me.get("stores", {}).items()))
    return (f"{INSTRUCTIONS}\n{MEMORY_INSTRUCTIONS}\n\nYou are agent {me.get('agent')} in "
            f"memfs; your stores: {stores or 'none'}.")


HTTP_MOVED = ("memfs mcp --http is gone: MCP over HTTP is served by the daemon at /mcp on "
              "its [http] listener, with a bearer token from `memfs token create AGENT` "
              "(see docs/reference/http.md)")


def main_mcp(socket_path: str | None, as_agent: str | None = None, http: str | None = None,
             local_dir: str | None = None) -> int:
    """Run the MCP server over stdio until stdin closes. ``local_dir`` confines
    storage_download/storage_upload to one local directory. ``http`` (the former
    unauthenticated listener) is refused with where MCP over HTTP went (exit 2)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(name)s: %(levelname)s: %(message)s")
    if http is not None:
        print(HTTP_MOVED, file=sys.stderr)
        return 2
    if local_dir is not None and not os.path.isdir(local_dir):
        print(f"memfs mcp: --local-dir {local_dir}: not a directory", file=sys.stderr)
        return 2
    if local_dir is None and os.geteuid() == 0:
        log.warning("running as root without --local-dir: storage_download/storage_upload "
                    "can write and read any local file")
    connection = Connection(socket_path or default_socket(), as_agent)
    tools = AgentTools(connection, os.path.abspath(local_dir) if local_dir else None)
    try:
        try:
            me = whoami(tools)
        except ConnectionFailed as error:  # the daemon may come later: tools reconnect
            log.warning("%s; starting anyway", error.message)
            me = None
        except IdentityRefused as error:
            print(f"memfs mcp: {error}", file=sys.stderr)
            return 4
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="memfs-mcp") as executor:
            run = executor_runner(executor)
            # Not known yet (a personal memory and no --agent, or no daemon yet): the
            # first request settles it, by the MCP client's own name if need be.
            settle: list[Any] = [DaemonChecked(connection, socket_path, run)]  # initialize
            if me is None and as_agent is None:
                settle.append(ClientNamed(tools, naming, run))
            server = build_server(tools, GENERIC if me is None else naming(me),
                                  run_sync=run, middleware=settle)
            run_stdio(server)
    except KeyboardInterrupt:
        pass
    finally:
        connection.close()
    return 0
