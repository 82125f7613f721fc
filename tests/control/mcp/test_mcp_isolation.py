"""Two (three) MCP servers for different agents against one daemon: each sees and
touches only its own stores, with its own access, because each server's socket is
attributed by the kernel to its own uid."""

from __future__ import annotations

from tests.control.mcp.conftest import call_error, call_ok, mcp_session
from tests.support import UID_A, UID_C, Daemon, connect_as


async def test_each_agent_sees_only_its_stores(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/shared.md", "shared marker-42\n")
        alice.write("ops/private.md", "ops marker-42\n")

    async with (mcp_session(daemon.socket, uid=UID_A) as a_client,
                mcp_session(daemon.socket, uid=UID_C) as c_client,
                mcp_session(daemon.socket, as_agent="bob") as b_client):
        assert c_client.instructions is not None
        assert "You are agent carol" in c_client.instructions
        assert "ops" not in c_client.instructions.split("your stores:")[1]

        assert (await call_ok(a_client, "storage_list", {})).splitlines() == [
            "notes/shared.md", "ops/private.md"]
        assert (await call_ok(c_client, "storage_list", {})).splitlines() == ["notes/shared.md"]
        assert (await call_ok(b_client, "storage_list", {})).splitlines() == [
            "notes/shared.md", "ops/private.md"]

        # carol: no ops at all (it does not exist for her), and notes read-only
        denied = await call_error(c_client, "storage_read", {"path": "ops/private.md"})
        assert denied.startswith('Not found: no store named "ops"'), denied
        await call_error(c_client, "storage_list", {"patterns": ["ops/**"]})
        assert "marker-42" in await call_ok(c_client, "storage_read", {"path": "notes/shared.md"})
        ro = await call_error(c_client, "storage_write",
                              {"path": "notes/shared.md", "content": "carol\n", "append": True})
        assert ro.startswith("Permission denied")
        await call_error(c_client, "storage_write", {"path": "notes/new.md", "content": "x"})

        # search across "all stores" means all of *this agent's* stores
        a_hits = await call_ok(a_client, "storage_search", {"pattern": "marker-42"})
        assert "ops/private.md" in a_hits and "notes/shared.md" in a_hits
        c_hits = await call_ok(c_client, "storage_search", {"pattern": "marker-42"})
        assert "notes/shared.md" in c_hits and "ops" not in c_hits
        await call_error(c_client, "storage_search", {"pattern": "marker", "paths": ["ops"]})
        await call_error(c_client, "storage_search", {"args": ["marker", "/memory/ops"]})

        # bob reads ops but may not write it; he may write notes
        await call_ok(b_client, "storage_read", {"path": "ops/private.md"})
        denied = await call_error(b_client, "storage_write",
                                  {"path": "ops/private.md", "content": "bob\n"})
        assert denied.startswith("Permission denied")
        await call_ok(b_client, "storage_write",
                      {"path": "notes/shared.md", "content": "bob was here\n", "append": True})

        # nobody reaches the store no agent here is attached to
        for client in (a_client, b_client, c_client):
            await call_error(client, "storage_read", {"path": "secret/x.md"})
            await call_error(client, "storage_write", {"path": "secret/x.md", "content": "x"})

        # alice sees bob's append as a change since her last read
        text = await call_ok(a_client, "storage_read", {"path": "notes/shared.md"})
        assert 'changed since you last read it; last written by "bob"' in text
        assert text.splitlines()[-1] == "     2\tbob was here"


async def test_unmapped_uid_is_refused_at_startup(daemon: Daemon) -> None:
    import subprocess

    from tests.control.mcp.conftest import server_params

    params = server_params(daemon.socket, uid=2999)
    proc = subprocess.run([params.command, *params.args], input=b"", capture_output=True,
                          timeout=30, cwd=params.cwd, env=params.env)
    assert proc.returncode == 4
    assert b"not mapped" in proc.stderr
    # a non-delegate uid may not act for someone else
    params = server_params(daemon.socket, uid=UID_C, as_agent="alice")
    proc = subprocess.run([params.command, *params.args], input=b"", capture_output=True,
                          timeout=30, cwd=params.cwd, env=params.env)
    assert proc.returncode == 4, proc.stderr
