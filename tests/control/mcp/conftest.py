"""MCP test helpers: real ``memfs mcp`` servers launched by the official SDK client.

A server runs either truly as an agent's uid (``setpriv`` drops to it before exec, so
the daemon sees that uid through SO_PEERCRED) or as root acting for an agent with
``--as`` (root is a delegate in the standard config).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, TextContent

from tests.support import MEMFS, REPO, public_tmpdir, scaled

SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


def server_params(socket: str | os.PathLike[str], *, uid: int | None = None,
                  as_agent: str | None = None, extra: Sequence[str] = ()
                  ) -> StdioServerParameters:
    argv = [*MEMFS, "--socket", str(socket), "mcp", *extra]
    if as_agent is not None:
        argv += ["--as", as_agent]
    if uid is not None:
        argv = [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
    return StdioServerParameters(
        command=argv[0], args=argv[1:], cwd=str(REPO),
        env={"PYTHONPATH": str(REPO), "LC_ALL": "C.UTF-8", "HOME": "/"},
    )


@contextlib.asynccontextmanager
async def mcp_session(socket: str | os.PathLike[str], *, uid: int | None = None,
                      as_agent: str | None = None, extra: Sequence[str] = (),
                      mode: str = "auto") -> AsyncIterator[McpClient]:
    """An SDK client connected over stdio to a fresh ``memfs mcp`` subprocess;
    ``mode``: the SDK's (``legacy``: the initialize handshake; ``auto``: the 2026
    protocol's server/discover first)."""
    params = server_params(socket, uid=uid, as_agent=as_agent, extra=extra)
    async with McpClient(params, read_timeout_seconds=scaled(60), mode=mode) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def call_ok(client: McpClient, name: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(name, arguments)
    assert isinstance(result, CallToolResult)
    text = text_of(result)
    assert not result.is_error, f"{name}({arguments}) failed: {text}"
    return text


async def call_error(client: McpClient, name: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(name, arguments)
    assert isinstance(result, CallToolResult)
    text = text_of(result)
    assert result.is_error, f"{name}({arguments}) should have failed, got: {text}"
    return text


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A local scratch directory owned by uid 2001 (the MCP server's downloads)."""
    path = public_tmpdir("memfs-mcp-work-")
    os.chown(path, 2001, 2001)
    yield path
    shutil.rmtree(path, ignore_errors=True)
