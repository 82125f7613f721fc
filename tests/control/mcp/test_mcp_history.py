"""storage_history and storage_restore through the official SDK client, as alice's
uid: log, show and diff read the past; restore is a version-checked replace whose
conflict reads like any other."""

from __future__ import annotations

from tests.control.mcp.conftest import call_error, call_ok, mcp_session
from tests.support import UID_A, UID_B, UID_C, Daemon, connect_as


async def test_history_and_restore(daemon: Daemon) -> None:
    path = "notes/mcp-history.md"
    with connect_as(UID_B, daemon.socket) as bob:
        first = bob.write(path, "retry: 3\n", force=True)["commit"]
        bob.write(path, "retry: 0\n", force=True)
    async with mcp_session(daemon.socket, uid=UID_A) as client:
        log = await call_ok(client, "storage_history", {"path": path})
        lines = log.splitlines()
        assert len(lines) == 2 and "bob" in lines[0] and lines[1].startswith(first[:7])
        shown = await call_ok(client, "storage_history",
                              {"path": path, "action": "show", "rev": first[:7]})
        assert "retry: 3" in shown and "as of" in shown
        diff = await call_ok(client, "storage_history",
                             {"path": path, "action": "diff", "rev": first[:7]})
        assert "-retry: 3" in diff and "+retry: 0" in diff
        refused = await call_error(client, "storage_restore", {"path": path, "rev": first})
        assert refused.startswith("CONFLICT") and "read it again" in refused
        await call_ok(client, "storage_read", {"path": path})
        with connect_as(UID_B, daemon.socket) as bob:
            bob.write(path, "retry: 5\n", force=True)
        since = await call_ok(client, "storage_history", {"path": path, "action": "diff"})
        assert "-retry: 0" in since and "+retry: 5" in since
        await call_error(client, "storage_restore", {"path": path, "rev": first})
        await call_ok(client, "storage_read", {"path": path})
        done = await call_ok(client, "storage_restore", {"path": path, "rev": first[:7]})
        assert done.startswith("Restored")
        bad = await call_error(client, "storage_history",
                               {"path": path, "action": "show", "rev": "HEAD^{tree}"})
        assert bad.startswith("Invalid request")
    with connect_as(UID_B, daemon.socket) as bob:
        assert bob.read(path)["text"] == "retry: 3\n"
    async with mcp_session(daemon.socket, uid=UID_C) as carol:
        denied = await call_error(carol, "storage_restore", {"path": path, "rev": first})
        assert denied.startswith("Permission denied")
