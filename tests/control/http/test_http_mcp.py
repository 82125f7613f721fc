"""MCP at /mcp on the daemon's listener, driven by the official SDK client over
streamable HTTP with a bearer header: the same tools as over stdio for the token's
agent (minus the local-file ones), a read and a conflicting write behave as over
stdio, one client per MCP session, and no token (or another agent's session) gets
nowhere. What the server says about itself and an unknown tool are as over stdio
(tests/control/mcp/test_mcp_protocol.py). A page of another site (its Origin), or a
request to another name (its Host: DNS rebinding), gets 403 before its token is even
looked at."""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.control.http.conftest import http_config, problem
from tests.control.mcp.conftest import call_error, call_ok, mcp_session
from tests.control.mcp.test_mcp_protocol import (
    MODES,
    no_change_notifications,
    unknown_tool_is_a_protocol_error,
)
from tests.support import REPO, UID_B, Daemon, connect_as

STDIO_ONLY = {"storage_download", "storage_upload"}


def readme_tools() -> set[str]:
    """The tools docs/reference/mcp.md's table lists (its first column)."""
    section = (REPO / "docs" / "reference" / "mcp.md").read_text().split(
        "# The MCP tool layer", 1)[1]
    rows = [line for line in section.split("\n## ", 1)[0].splitlines()
            if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


@contextlib.asynccontextmanager
async def mcp_http(daemon: Daemon, token: str | None, mode: str = "auto"
                   ) -> AsyncIterator[McpClient]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, McpClient(
            streamable_http_client(f"{daemon.http_url}/mcp", http_client=http), mode=mode,
            read_timeout_seconds=60) as client:
        yield client


async def test_tools_and_instructions(daemon: Daemon, tokens: dict[str, str]) -> None:
    async with mcp_http(daemon, tokens["carol"]) as client:
        over_http = {tool.name for tool in (await client.list_tools()).tools}
        assert client.instructions is not None and "You are agent carol" in client.instructions
    async with mcp_session(daemon.socket, as_agent="carol") as stdio:
        over_stdio = {tool.name for tool in (await stdio.list_tools()).tools}
    assert over_http == over_stdio - STDIO_ONLY
    assert "storage_write" in over_http and "task_claim" in over_http
    assert over_stdio == readme_tools()  # mcp.md's table: every tool, and only those


async def test_read_and_conflicting_write_as_over_stdio(daemon: Daemon,
                                                        tokens: dict[str, str]) -> None:
    """The same steps over HTTP and over stdio give the same answers."""
    texts = {}
    for transport in ("http", "stdio"):
        path = f"notes/mcp-{transport}.md"
        with connect_as(UID_B, daemon.socket) as bob:
            bob.write(path, "bob's first line\n")
        session = (mcp_http(daemon, tokens["alice"]) if transport == "http"
                   else mcp_session(daemon.socket, as_agent="alice"))
        async with session as client:
            read = await call_ok(client, "storage_read", {"path": path})
            assert "bob's first line" in read
            with connect_as(UID_B, daemon.socket) as bob:
                bob.read(path)
                bob.write(path, "bob's second line\n")
            refused = await call_error(client, "storage_write",
                                       {"path": path, "content": "alice's\n"})
            with connect_as(UID_B, daemon.socket) as bob:
                assert bob.read(path)["text"] == "bob's second line\n"
            await call_ok(client, "storage_read", {"path": path})
            wrote = await call_ok(client, "storage_write", {"path": path, "content": "alice's\n"})
        texts[transport] = tuple(re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "TIME",
                                        text.replace(transport, "T")) for text in (refused, wrote))
    assert texts["http"][0].startswith("CONFLICT") and "bob" in texts["http"][0]
    assert texts["http"] == texts["stdio"]


async def test_one_client_per_session(daemon: Daemon, tokens: dict[str, str]) -> None:
    """Two MCP sessions of one agent keep apart what each saw, like two socket
    connections: a write over what the other session wrote since is a conflict."""
    path = "notes/mcp-sessions.md"
    async with mcp_http(daemon, tokens["alice"], mode="legacy") as first, \
            mcp_http(daemon, tokens["alice"], mode="legacy") as second:
        await call_ok(first, "storage_write", {"path": path, "content": "v1\n"})
        await call_ok(second, "storage_read", {"path": path})
        await call_ok(second, "storage_write", {"path": path, "content": "v2 by second\n"})
        refused = await call_error(first, "storage_write", {"path": path, "content": "v2!\n"})
        assert refused.startswith("CONFLICT")
    # the stateless 2026 protocol has no session: one client per token
    other_token = daemon.token("alice", "--label", "second client")
    async with mcp_http(daemon, tokens["alice"]) as first, \
            mcp_http(daemon, other_token) as second:
        await call_ok(first, "storage_read", {"path": path})
        await call_ok(second, "storage_read", {"path": path})
        await call_ok(second, "storage_write", {"path": path, "content": "v3 by second\n"})
        refused = await call_error(first, "storage_write", {"path": path, "content": "v3!\n"})
        assert refused.startswith("CONFLICT")
    with connect_as(UID_B, daemon.socket) as bob:
        assert bob.read(path)["text"] == "v3 by second\n"


async def test_sessions_of_structured_stores(daemon: Daemon, tokens: dict[str, str]) -> None:
    async with mcp_http(daemon, tokens["dave"], mode="legacy") as client:
        started = await call_ok(client, "session_start", {"goal": "over http"})
        assert "started in store team" in started
        await call_ok(client, "session_checkpoint", {"note": "remembered, no id needed"})
        assert "LEASE" not in await call_ok(client, "memory_brief", {})


def test_without_a_token_is_401(daemon: Daemon) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=daemon.http_url, timeout=60) as http:
        refused = http.post("/mcp", json=initialize, headers=headers)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert http.post("/mcp", json=initialize, headers={
            **headers, "Authorization": "Bearer memfs_nope"}).status_code == 401


def test_a_session_belongs_to_its_token(daemon: Daemon, tokens: dict[str, str]) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    base = {"Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18"}
    with httpx.Client(base_url=daemon.http_url, timeout=60) as http:
        opened = http.post("/mcp", json=initialize, headers={
            **base, "Authorization": f"Bearer {tokens['alice']}"})
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        for other in (tokens["bob"], daemon.token("alice", "--label", "same agent")):
            stolen = http.post("/mcp", json=listing, headers={
                **base, "Authorization": f"Bearer {other}", "Mcp-Session-Id": session})
            assert stolen.status_code == 404, stolen.text


@pytest.mark.parametrize("mode", MODES)
async def test_server_info_and_an_unknown_tool_as_over_stdio(daemon: Daemon,
                                                             tokens: dict[str, str],
                                                             mode: str) -> None:
    async with mcp_http(daemon, tokens["alice"], mode=mode) as client:
        assert client.server_info is not None
        assert client.server_info.version == importlib.metadata.version("memfs")
        no_change_notifications(client.server_capabilities, mode)
        await unknown_tool_is_a_protocol_error(client)
        # storage_download is a tool of stdio only: over HTTP it does not exist
        with pytest.raises(Exception, match="storage_download"):
            await client.call_tool("storage_download", {"path": "notes/a.md", "dest": "/tmp"})
        await call_ok(client, "storage_list", {})


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def post_mcp(daemon: Daemon, token: str | None, **headers: str) -> httpx.Response:
    """An initialize POSTed to /mcp with these extra headers (``host`` replaces the
    Host httpx would send)."""
    sent: dict[str, Any] = {**ACCEPT, **headers}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    with httpx.Client(base_url=daemon.http_url, timeout=60) as http:
        return http.post("/mcp", json=INITIALIZE, headers=sent)


def test_own_origins_and_none_are_allowed(daemon: Daemon, tokens: dict[str, str]) -> None:
    """Every origin of the listener itself (each loopback name, with the bound port),
    and no Origin at all (a client that is no browser)."""
    port = urlsplit(daemon.http_url).port
    for origin in (None, daemon.http_url, f"http://localhost:{port}",
                   f"http://[::1]:{port}", f"HTTP://LOCALHOST:{port}"):
        extra = {} if origin is None else {"Origin": origin}
        answered = post_mcp(daemon, tokens["alice"], **extra)
        assert answered.status_code == 200, (origin, answered.text)
    answered = post_mcp(daemon, tokens["alice"], host=f"localhost:{port}",
                        Origin=f"http://localhost:{port}")
    assert answered.status_code == 200, answered.text


def test_another_origin_or_host_is_403_even_without_a_token(daemon: Daemon,
                                                             tokens: dict[str, str]) -> None:
    port = urlsplit(daemon.http_url).port
    for token in (tokens["alice"], None):
        for origin in ("http://evil.example", f"http://evil.example:{port}",
                       f"https://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}", "null",
                       f"http://127.0.0.1:{port}/path"):
            body = problem(post_mcp(daemon, token, Origin=origin), 403, "permission_denied")
            assert "Origin" in body["detail"] and "allowed_origins" in body["detail"]
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}",
                     f"rebound.127.0.0.1.nip.io:{port}"):
            body = problem(post_mcp(daemon, token, host=host), 403, "permission_denied")
            assert "Host" in body["detail"] and f"127.0.0.1:{port}" in body["detail"]


def test_allowed_origins_and_a_quiet_log() -> None:
    """``[http] allowed_origins``: those pages may call /mcp, their host is a name of
    the listener (behind a proxy); any other is still refused, and a page that keeps
    trying costs a line in the log now and then, not one per request (neither ours
    nor the SDK's)."""
    config = http_config(allowed_origins=["https://app.example.org",
                                          "http://LOCALHOST:3000"])
    with Daemon(config) as running:
        token = running.token("alice")
        for origin in ("https://app.example.org", "https://app.example.org:443",
                       "http://localhost:3000"):
            answered = post_mcp(running, token, Origin=origin)
            assert answered.status_code == 200, (origin, answered.text)
        answered = post_mcp(running, token, host="app.example.org",
                            Origin="https://app.example.org")
        assert answered.status_code == 200, answered.text
        started = time.monotonic()
        problem(post_mcp(running, token, Origin="https://app.example.org:8443"), 403,
                "permission_denied")
        problem(post_mcp(running, token, Origin="http://app.example.org"), 403,
                "permission_denied")
        refusals = 100
        for _ in range(refusals):
            problem(post_mcp(running, None, Origin="https://evil.example"), 403,
                    "permission_denied")
        took = time.monotonic() - started
        log = running.log()
    lines = [line for line in log.splitlines() if "refused a request to /mcp" in line]
    # One line, then one more per 10 s the refusals went on (a slow machine's many).
    assert 1 <= len(lines) <= 1 + took // 10, (took, lines)
    assert "transport_security" not in log and "Invalid Origin" not in log
