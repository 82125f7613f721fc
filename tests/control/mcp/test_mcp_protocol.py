"""What ``memfs mcp`` says about itself over stdio, to the official SDK client with
both protocols (the initialize handshake, "legacy", and the 2026 ``server/discover``,
"auto"): one set of capabilities (resources.subscribe in both: resources/subscribe, or
a subscriptions/listen stream in the 2026 protocol), the
installed package's version as ``serverInfo.version``, and a call of a tool that does
not exist is a JSON-RPC error (-32602 invalid params, the spec's tools section), not a
tool result. The same over
HTTP: tests/control/http/test_http_mcp.py."""

from __future__ import annotations

import importlib.metadata

import pytest
from mcp import Client as McpClient
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ServerCapabilities

from tests.control.mcp.conftest import call_ok, mcp_session
from tests.support import Daemon


def no_change_notifications(capabilities: ServerCapabilities, mode: str = "auto") -> None:
    """memfs never sends list changes; it serves tools, prompts and resources, and
    resource subscriptions (resources/subscribe in the handshake era; the 2026 protocol
    has no such method: a subscriptions/listen stream naming the files)."""
    for kind in (capabilities.tools, capabilities.prompts, capabilities.resources):
        assert kind is not None and not kind.list_changed, capabilities
    assert capabilities.resources is not None
    assert capabilities.resources.subscribe is True, (mode, capabilities)


async def unknown_tool_is_a_protocol_error(client: McpClient) -> None:
    with pytest.raises(MCPError) as refused:
        await client.call_tool("no_such_tool", {"path": "notes/a.md"})
    assert refused.value.code == INVALID_PARAMS
    assert '"no_such_tool"' in refused.value.message


MODES = ("legacy", "auto")


@pytest.mark.parametrize("mode", MODES)
async def test_server_info_names_the_installed_version(daemon: Daemon, mode: str) -> None:
    async with mcp_session(daemon.socket, as_agent="alice", mode=mode) as client:
        assert client.server_info is not None
        assert client.server_info.name == "memfs"
        assert client.server_info.version == importlib.metadata.version("memfs")


async def test_initialize_and_discover_advertise_the_same_capabilities(daemon: Daemon
                                                                      ) -> None:
    seen = {}
    for mode in MODES:
        async with mcp_session(daemon.socket, as_agent="alice", mode=mode) as client:
            seen[mode] = client.server_capabilities
    for mode in MODES:
        no_change_notifications(seen[mode], mode)
    assert seen["legacy"] == seen["auto"]


@pytest.mark.parametrize("mode", MODES)
async def test_an_unknown_tool_is_a_protocol_error(daemon: Daemon, mode: str) -> None:
    async with mcp_session(daemon.socket, as_agent="alice", mode=mode) as client:
        await unknown_tool_is_a_protocol_error(client)
        await call_ok(client, "storage_list", {})  # the server goes on
