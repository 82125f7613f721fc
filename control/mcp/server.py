"""``memfs mcp``: the storage tools served over MCP with the official SDK.

The MCP SDK is imported inside ``build_server``/``main_mcp`` only, so nothing else pays
for it (the CLI imports this module only for ``memfs mcp``). The tools themselves live
in control/mcp/storage.py; this module declares their MCP signatures and runs the stdio
transport. MCP over streamable HTTP is served by the daemon itself, at ``/mcp`` on its
authenticated listener (control/http/mcp.py, with the same `build_server`).

Identity: the server holds one control-socket connection; the daemon identifies the
agent from that socket's SO_PEERCRED, i.e. the uid running ``memfs mcp``, or the agent
named with ``--as`` when that uid is a delegate. In personal mode the agent is the one
named with ``--agent`` (or ``MEMFS_AGENT``), else the MCP client's own name
(control/mcp/identity.py): never one identity for several clients.

No ``from __future__ import annotations`` here: the SDK reads the tool functions'
annotations at registration time, and they name objects imported inside build_server.
"""

import functools
import importlib.metadata
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

import memfs
from control.client import ConnectionFailed, default_socket
from control.mcp.daemon import DaemonChecked
from control.mcp.declared import add_declared_tools
from control.mcp.history import HISTORY_DESCRIPTION, RESTORE_DESCRIPTION
from control.mcp.identity import ClientNamed, IdentityRefused, whoami
from control.mcp.memory import MEMORY_INSTRUCTIONS, AgentTools
from control.mcp.memory_signatures import add_memory_tools
from control.mcp.stdio import executor_runner, run_stdio
from control.mcp.storage import (
    DOWNLOAD_DESCRIPTION,
    INSTRUCTIONS,
    LIST_DESCRIPTION,
    READ_DESCRIPTION,
    SEARCH_DESCRIPTION,
    UPLOAD_DESCRIPTION,
    WRITE_DESCRIPTION,
    Connection,
    StorageTools,
)
from control.mcp.types import OptionalFlag, OptionalText, PathArg, SearchOutput, result_of

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

log = logging.getLogger("memfs.mcp")


def build_server(tools: AgentTools, instructions: str = INSTRUCTIONS, *,
                 local_files: bool = True,
                 run_sync: "Callable[..., Awaitable[Any]] | None" = None,
                 middleware: Sequence[Any] = ()) -> "MCPServer[Any]":
    """An MCPServer exposing the storage, history and memory tools, each run in a
    worker thread (by ``run_sync(fn, *args)``; default anyio's ``to_thread.run_sync``).
    ``local_files`` False leaves out storage_download/storage_upload (whose local files
    would be the server's, not the client's: over HTTP). ``middleware``: the SDK's
    server middleware, e.g. control/mcp/identity.py's `ClientNamed`."""
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult, ToolAnnotations

    # subscriptions=False: no subscriptions/listen stream, which would advertise list
    # changes (listChanged, resources.subscribe) in server/discover that memfs never
    # sends and initialize does not claim: both now say what the server does
    server: MCPServer[Any] = MCPServer("memfs", version=package_version(),
                                       instructions=instructions, log_level="WARNING",
                                       subscriptions=False)
    server.middleware.extend([*middleware, KnownToolsOnly(server)])
    run = run_sync or anyio.to_thread.run_sync

    async def storage_list(
        pattern: Annotated[str | list[str] | None, Field(
            description="Glob over STORE/PATH (or a list of globs); `**` spans directories. "
                        "Omit to list every file you can read.")] = None,
    ) -> CallToolResult:
        return result_of(await run(tools.list_files, pattern))

    async def storage_read(
        path: PathArg,
        offset: Annotated[int | None, Field(
            description="First line to show, 1-based (default 1).", ge=1)] = None,
        limit: Annotated[int | None, Field(
            description="Number of lines to show (default 2000).", ge=1, le=100_000)] = None,
    ) -> CallToolResult:
        return result_of(await run(tools.read, path, offset, limit))

    async def storage_search(
        pattern: Annotated[OptionalText, Field(
            description="The regex to search for (ripgrep syntax). Give this or `args`.")
        ] = None,  # type: ignore[assignment]
        flags: Annotated[list[str] | None, Field(
            description='ripgrep flags to use with `pattern`, e.g. ["-i", "-C", "2"].',
            max_length=64)] = None,
        paths: Annotated[list[str] | None, Field(
            description='Limit the search to these stores, folders or files, e.g. ["notes"] '
                        'or ["ops/runbooks"]. Default: every store you can read.',
            max_length=64)] = None,
        args: Annotated[list[str] | None, Field(
            description='Instead of pattern/flags/paths: the whole rg command line, e.g. '
                        '["-i", "-w", "timeout", "ops"].', min_length=1, max_length=128)] = None,
    ) -> Annotated[CallToolResult, SearchOutput]:  # the SDK's outputSchema: SearchOutput
        return result_of(await run(tools.search, pattern, args, flags, paths))

    async def storage_write(
        path: PathArg,
        content: Annotated[OptionalText, Field(
            description="The full new text of the file, or with append=true the text to add "
                        "at its end. Give this or `sed`.")] = None,  # type: ignore[assignment]
        append: Annotated[OptionalFlag, Field(
            description="Add `content` at the end of the file (creating it if needed) "
                        "instead of replacing it; needs no prior read.")] = False,
        sed: Annotated[str | list[str] | None, Field(
            description="A GNU sed script, or a list of scripts applied in order, run on the "
                        "file's current content, e.g. \"s/old/new/g\" or [\"/^DRAFT/d\", "
                        "\"$a\\\\last line\"]. Give this or `content`.")] = None,
        force: Annotated[OptionalFlag, Field(
            description="Skip the version check and overwrite changes you have not seen. "
                        "Only on purpose, never to get past a conflict blindly.")] = False,
    ) -> CallToolResult:
        return result_of(await run(tools.write, path, content, append, sed, force))

    async def storage_download(
        path: PathArg,
        dest: Annotated[str, Field(
            description="Local destination file (or existing directory) on the machine "
                        "running this tool, e.g. /tmp/work/orders.csv.",
            min_length=1, max_length=4096)],
    ) -> CallToolResult:
        return result_of(await run(tools.download, path, dest))

    async def storage_history(
        path: Annotated[OptionalText, Field(
            description="A file (STORE/PATH), folder or store; omit for every store (log "
                        "only).")] = None,  # type: ignore[assignment]
        action: Annotated[Literal["log", "diff", "show"], Field(
            description="log: the changes; diff: a unified diff of one file; show: a file "
                        "as it was at `rev`.")] = "log",
        rev: Annotated[OptionalText, Field(
            description="show: the revision; diff: REV or REV..REV (omit: since you last "
                        "read the file).")] = None,  # type: ignore[assignment]
        offset: Annotated[int | None, Field(description="show: first line, 1-based.",
                                            ge=1)] = None,
        limit: Annotated[int | None, Field(
            description="log: how many changes (default 20); show: lines per page.",
            ge=1, le=10_000)] = None,
    ) -> CallToolResult:
        return result_of(await run(tools.history, path, action, rev, offset, limit))

    async def storage_restore(
        path: PathArg,
        rev: Annotated[str, Field(
            description="The revision to bring back (an id from storage_history, HEAD~N, "
                        "or a time).", min_length=1, max_length=64)],
        force: Annotated[OptionalFlag, Field(
            description="Skip the version check and overwrite changes you have not seen. "
                        "Only on purpose.")] = False,
    ) -> CallToolResult:
        return result_of(await run(tools.restore, path, rev, force))

    async def storage_upload(
        src: Annotated[str, Field(
            description="Local file to send, on the machine running this tool.",
            min_length=1, max_length=4096)],
        path: PathArg,
        force: Annotated[OptionalFlag, Field(
            description="Skip the version check and overwrite changes you have not seen. "
                        "Only on purpose.")] = False,
    ) -> CallToolResult:
        return result_of(await run(tools.upload, src, path, force))

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=True,
                             idempotent_hint=False, open_world_hint=False)
    for fn, description, annotations, title in (
        (storage_list, LIST_DESCRIPTION, read_only, "List memory files"),
        (storage_read, READ_DESCRIPTION, read_only, "Read a memory file"),
        (storage_search, SEARCH_DESCRIPTION, read_only, "Search memory (ripgrep)"),
        (storage_write, WRITE_DESCRIPTION, writes, "Write a memory file"),
        (storage_download, DOWNLOAD_DESCRIPTION,
         ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
         "Download a memory file"),
        (storage_upload, UPLOAD_DESCRIPTION, writes, "Upload a memory file"),
        (storage_history, HISTORY_DESCRIPTION, read_only, "History of memory files"),
        (storage_restore, RESTORE_DESCRIPTION, writes, "Restore an old version"),
    ):
        if not local_files and fn in (storage_download, storage_upload):
            continue
        # storage_search's results carry structured content too (its outputSchema)
        server.add_tool(fn, title=title, description=description, annotations=annotations,
                        structured_output=fn is storage_search)
    add_memory_tools(server, tools, run)
    add_declared_tools(server, tools, run)
    return server


@functools.cache
def package_version() -> str:
    """The installed memfs's version (its package metadata; ``memfs.__version__`` for
    a checkout used without installing it): the MCP ``serverInfo.version``."""
    try:
        return importlib.metadata.version("memfs")
    except importlib.metadata.PackageNotFoundError:
        return memfs.__version__


class KnownToolsOnly:
    """Server middleware: a ``tools/call`` naming no tool of ``server`` is a JSON-RPC
    error (-32602 invalid params, as the MCP spec's tools section says), not a tool
    result the model would take for a tool's own failure."""

    def __init__(self, server: "MCPServer[Any]") -> None:
        self.server = server
        self._names: frozenset[str] | None = None  # the tools, fixed once built

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method == "tools/call" and isinstance(ctx.params, dict):
            name = ctx.params.get("name")
            if self._names is None:
                self._names = frozenset(tool.name for tool in await self.server.list_tools())
            if isinstance(name, str) and name not in self._names:
                from mcp.shared.exceptions import MCPError
                from mcp_types import INVALID_PARAMS

                raise MCPError(INVALID_PARAMS, f"Unknown tool: {json.dumps(name)} (tools/list "
                               "names the tools of this server)")
        return await call_next(ctx)


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
              "(see README, HTTP)")


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
