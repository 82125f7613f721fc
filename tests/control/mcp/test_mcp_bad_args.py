"""Hostile or malformed tool calls: each is a tool error (isError) with a clear text,
nothing changes, and the same server keeps answering afterwards (a call of a tool
that does not exist is a protocol error instead: test_mcp_protocol.py). Also: the server
survives a daemon restart (it reconnects); `--http` is gone (MCP over HTTP is the
daemon's authenticated /mcp)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from mcp_types import CallToolResult

from tests.control.mcp.conftest import call_error, call_ok, mcp_session, text_of
from tests.support import MEMFS, REPO, UID_A, Daemon, connect_as

BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    # (tool, arguments, a fragment the error text must contain)
    ("storage_read", {}, "path"),
    ("storage_read", {"path": 5}, "path"),
    ("storage_read", {"path": ["notes/a.md"]}, "path"),
    ("storage_read", {"path": "notes/a.md", "offset": 0}, "offset"),
    ("storage_read", {"path": "notes/a.md", "limit": -3}, "limit"),
    ("storage_read", {"path": "notes/a.md", "offset": "many"}, "offset"),
    ("storage_read", {"path": ""}, "path"),
    ("storage_read", {"path": "../../etc/passwd"}, "Invalid"),
    ("storage_read", {"path": "/etc/passwd"}, ""),
    ("storage_read", {"path": "notes/../ops/a.md"}, "Invalid"),
    ("storage_read", {"path": "notes/missing.md"}, "Not found"),
    ("storage_read", {"path": "nostore/a.md"}, ""),
    ("storage_read", {"path": "notes/a\x00b.md"}, ""),
    ("storage_list", {"pattern": 42}, "pattern"),
    ("storage_list", {"pattern": {"glob": "*"}}, "pattern"),
    ("storage_write", {"path": "notes/a.md"}, "exactly one"),
    ("storage_write", {"path": "notes/a.md", "content": "x", "sed": "s/a/b/"}, "exactly one"),
    ("storage_write", {"path": "notes/a.md", "sed": "s/a/b/", "append": True}, "append"),
    ("storage_write", {"path": "notes/a.md", "sed": []}, "empty"),
    ("storage_write", {"path": "notes/a.md", "content": 12}, "content"),
    ("storage_write", {"path": "notes/a.md", "content": "x", "force": "maybe"}, "force"),
    ("storage_write", {"path": "notes/", "content": "x"}, ""),
    ("storage_write", {"path": "notes", "content": "x"}, ""),
    ("storage_write", {"path": "../x.md", "content": "x"}, "Invalid"),
    ("storage_write", {"path": "notes/a.md", "sed": "w /tmp/pwned"}, ""),
    ("storage_write", {"path": "notes/a.md", "sed": "1e id"}, ""),
    ("storage_write", {"path": "notes/a.md", "sed": "s/a/b/e"}, ""),
    ("storage_write", {"path": "notes/a.md", "sed": "r /etc/passwd"}, ""),
    ("storage_search", {}, "exactly one"),
    ("storage_search", {"pattern": "a", "args": ["a"]}, "exactly one"),
    ("storage_search", {"args": ["a"], "flags": ["-i"]}, "args"),
    ("storage_search", {"args": []}, "args"),
    ("storage_search", {"args": ["--pre", "/bin/sh", "x"]}, "--pre"),
    ("storage_search", {"args": ["--pre=/bin/sh", "x"]}, "--pre"),
    ("storage_search", {"pattern": "x", "flags": ["--pre", "cat"]}, "--pre"),
    ("storage_search", {"pattern": "x", "flags": ["-z"]}, ""),
    ("storage_search", {"pattern": "x", "flags": ["--follow"]}, ""),
    ("storage_search", {"pattern": "x", "flags": ["-f", "/etc/passwd"]}, ""),
    ("storage_search", {"pattern": "x", "paths": ["/etc"]}, ""),
    ("storage_search", {"pattern": "x", "paths": ["../.."]}, ""),
    ("storage_search", {"pattern": "x", "flags": ["--no-such-flag"]}, ""),
    ("storage_search", {"pattern": "(unclosed"}, ""),
    ("storage_download", {"path": "notes/a.md"}, "dest"),
    ("storage_download", {"path": "notes/a.md", "dest": "/proc/self/nope/x"}, "Local file"),
    ("storage_download", {"path": "notes/missing.md", "dest": "/tmp/x"}, "Not found"),
    ("storage_upload", {"src": "/nonexistent/file", "path": "notes/a.md"}, "Local file"),
    ("storage_upload", {"src": "/", "path": "notes/a.md"}, "Local file"),
    ("storage_upload", {"path": "notes/a.md"}, "src"),
]


async def test_bad_arguments_are_tool_errors(daemon: Daemon, tmp_path: Path) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/a.md", "alpha\nbeta\n")
        before = alice.read_bytes("notes/a.md")[0]
    async with mcp_session(daemon.socket, as_agent="alice") as client:
        await call_ok(client, "storage_read", {"path": "notes/a.md"})  # seen: sed may run
        failures = []
        for name, arguments, fragment in BAD_CALLS:
            result = await client.call_tool(name, arguments)
            assert isinstance(result, CallToolResult)
            text = text_of(result)
            if not result.is_error or fragment not in text or not text.strip():
                failures.append((name, arguments, result.is_error, text))
        assert not failures, "\n".join(map(repr, failures))
        # the server is still fine, and nothing changed
        assert "alpha" in await call_ok(client, "storage_read", {"path": "notes/a.md"})
        assert "notes/a.md" in await call_ok(client, "storage_list", {})
    assert not os.path.exists("/tmp/pwned")
    with connect_as(UID_A, daemon.socket) as alice:
        assert alice.read_bytes("notes/a.md")[0] == before
        assert alice.list() == ["notes/a.md"]


async def test_null_optional_arguments_are_absent(daemon: Daemon) -> None:
    """Some models send null for every optional argument."""
    async with mcp_session(daemon.socket, as_agent="alice") as client:
        await call_ok(client, "storage_write", {"path": "notes/n.md", "content": "x\n",
                                                "sed": None, "append": None, "force": None})
        await call_ok(client, "storage_read", {"path": "notes/n.md", "offset": None,
                                               "limit": None})
        await call_ok(client, "storage_list", {"pattern": None})
        await call_ok(client, "storage_search", {"pattern": "x", "args": None, "flags": None,
                                                 "paths": None})


async def test_server_reconnects_after_daemon_restart(daemon: Daemon) -> None:
    async with mcp_session(daemon.socket, uid=UID_A) as client:
        await call_ok(client, "storage_write", {"path": "notes/r.md", "content": "one\n"})
        daemon.stop()
        down = await call_error(client, "storage_read", {"path": "notes/r.md"})
        assert "unreachable" in down
        daemon.start()
        assert "one" in await call_ok(client, "storage_read", {"path": "notes/r.md"})
        # seen-state survived the restart: replacing needs no new read
        await call_ok(client, "storage_write", {"path": "notes/r.md", "content": "two\n"})
        daemon.stop()
        daemon.start()
        await call_ok(client, "storage_write", {"path": "notes/r.md", "content": "three\n"})


def test_http_flag_is_gone_and_says_where() -> None:
    """The unauthenticated listener of `memfs mcp --http` is gone: MCP over HTTP is the
    daemon's /mcp, with a bearer token (tests/control/http/test_http_mcp.py)."""
    proc = subprocess.run([*MEMFS, "--socket", "/nonexistent", "mcp", "--http",
                           "127.0.0.1:8080"], cwd=REPO, capture_output=True, timeout=30)
    assert proc.returncode == 2
    assert b"/mcp" in proc.stderr and b"memfs token create" in proc.stderr
