"""A whole agent session through the official MCP SDK client, over stdio, against a
real daemon: the server runs truly as uid 2001 (alice), another agent (bob) writes
through its own socket connection in between."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp_types import CallToolResult

from tests.control.mcp.conftest import call_error, call_ok, mcp_session, text_of
from tests.support import UID_A, UID_B, Daemon, connect_as

TOOLS = {"storage_list", "storage_read", "storage_search", "storage_write",
         "storage_download", "storage_upload", "storage_history", "storage_restore"}


async def test_tool_list_and_schemas(daemon: Daemon) -> None:
    async with mcp_session(daemon.socket, uid=UID_A) as client:
        assert client.instructions is not None
        assert "You are agent alice" in client.instructions
        assert "notes (read-write)" in client.instructions
        listing = await client.list_tools()
        tools = {tool.name: tool for tool in listing.tools}
        assert set(tools) >= TOOLS
        schemas: dict[str, dict[str, Any]] = {n: t.input_schema for n, t in tools.items()}

        def props(name: str) -> set[str]:
            return set(schemas[name]["properties"])

        assert props("storage_list") == {"patterns"}
        assert schemas["storage_list"].get("required", []) == []
        assert props("storage_read") == {"path", "offset", "limit"}
        assert schemas["storage_read"]["required"] == ["path"]
        assert props("storage_search") == {"pattern", "flags", "paths", "args"}
        assert schemas["storage_search"].get("required", []) == []
        assert props("storage_write") == {"path", "content", "append", "sed", "force"}
        assert schemas["storage_write"]["required"] == ["path"]
        assert schemas["storage_write"]["properties"]["content"]["type"] == "string"
        assert schemas["storage_write"]["properties"]["append"]["type"] == "boolean"
        assert props("storage_download") == {"path", "dest"}
        assert sorted(schemas["storage_download"]["required"]) == ["dest", "path"]
        assert props("storage_upload") == {"src", "path", "force"}
        assert sorted(schemas["storage_upload"]["required"]) == ["path", "src"]
        for name, tool in tools.items():
            assert tool.description and len(tool.description) > 200
            # storage_search's results carry its matches too (tests/control/mcp/test_mcp_search),
            # memory_summary's its counts (tests/control/http/test_summary.py)
            assert (tool.output_schema is None) is (
                name not in ("storage_search", "memory_summary")), name
        assert "CONFLICT" in (tools["storage_write"].description or "")
        assert "offset=2001" in (tools["storage_read"].description or "")
        assert tools["storage_read"].annotations is not None
        assert tools["storage_read"].annotations.read_only_hint is True
        assert tools["storage_write"].annotations is not None
        assert tools["storage_write"].annotations.read_only_hint is False


async def test_full_session(daemon: Daemon, workdir: Path) -> None:
    bob = connect_as(UID_B, daemon.socket)
    log = "".join(f"line {n}\n" for n in range(1, 2501))
    bob.write("notes/log.md", log)
    bob.write("notes/incidents/checkout.md", "checkout timeouts: queue-a saturated\n")
    with connect_as(UID_A, daemon.socket) as alice_direct:
        alice_direct.write("ops/runbook.md", "restart queue-a\nTimeout budget: 30s\n")

    async with mcp_session(daemon.socket, uid=UID_A) as client:
        # -- list
        listing = await call_ok(client, "storage_list", {})
        assert listing.splitlines() == ["notes/incidents/checkout.md", "notes/log.md",
                                        "ops/runbook.md"]
        md = await call_ok(client, "storage_list", {"patterns": ["notes/*/*.md"]})
        assert md.splitlines() == ["notes/incidents/checkout.md"]
        md = await call_ok(client, "storage_list", {"patterns": ["/memory/notes/**/*.md"]})
        assert md.splitlines() == ["notes/incidents/checkout.md", "notes/log.md"]
        both = await call_ok(client, "storage_list", {"patterns": ["ops/*", "**/checkout.md"]})
        assert both.splitlines() == ["notes/incidents/checkout.md", "ops/runbook.md"]
        assert "No files match" in await call_ok(client, "storage_list", {"patterns": ["**/*.csv"]})
        assert 'Not found: no store named "secret"' in await call_error(
            client, "storage_list", {"patterns": ["secret/**"]})

        # -- read with paging
        page = await call_ok(client, "storage_read", {"path": "notes/log.md"})
        lines = page.splitlines()
        assert lines[0] == "     1\tline 1"
        assert lines[1999] == "  2000\tline 2000"
        assert "storage_read(path=\"notes/log.md\", offset=2001)" in lines[-1]
        assert "of 2500" in lines[-1]
        rest = await call_ok(client, "storage_read", {"path": "notes/log.md", "offset": 2001})
        assert rest.splitlines()[0] == "  2001\tline 2001"
        assert rest.splitlines()[-2] == "  2500\tline 2500"
        assert "end of file" in rest.splitlines()[-1]
        window = await call_ok(client, "storage_read",
                               {"path": "/memory/notes/log.md", "offset": 5, "limit": 3})
        assert window.splitlines()[:3] == ["     5\tline 5", "     6\tline 6", "     7\tline 7"]
        assert "offset=8" in window
        past = await call_ok(client, "storage_read", {"path": "notes/log.md", "offset": 9999})
        assert "past the end" in past

        # -- search across stores in one call
        hits = await call_ok(client, "storage_search", {"pattern": "queue-a"})
        assert "notes/incidents/checkout.md:1:checkout timeouts: queue-a saturated" in hits
        assert "ops/runbook.md:1:restart queue-a" in hits
        ci = await call_ok(client, "storage_search",
                           {"pattern": "timeout budget", "flags": ["-i"], "paths": ["ops"]})
        assert ci.strip() == "ops/runbook.md:2:Timeout budget: 30s"
        raw = await call_ok(client, "storage_search", {"args": ["-c", "line 2[0-9]{3}", "notes"]})
        assert "notes/log.md:501" in raw
        assert (await call_ok(client, "storage_search", {"pattern": "no-such-thing"})
                ) == "No matches."

        # -- write, append, sed
        created = await call_ok(client, "storage_write",
                                {"path": "notes/todo.md", "content": "- fix queue-a\n"})
        assert 'Created "notes/todo.md"' in created
        appended = await call_ok(client, "storage_write",
                                 {"path": "notes/todo.md", "content": "- page bob\n",
                                  "append": True})
        assert "Appended" in appended
        edited = await call_ok(client, "storage_write",
                               {"path": "notes/todo.md", "sed": "s/queue-a/queue-b/"})
        assert 'Edited "notes/todo.md"' in edited
        edited = await call_ok(client, "storage_write",
                               {"path": "notes/todo.md", "sed": ["/page bob/d", "1a\\- done"]})
        assert "Edited" in edited
        unchanged = await call_ok(client, "storage_write",
                                  {"path": "notes/todo.md", "sed": "s/nothing-here/x/"})
        assert "unchanged" in unchanged
        assert bob.read("notes/todo.md")["text"] == "- fix queue-b\n- done\n"
        json_text = '{"a": [1, 2], "b": null}'
        await call_ok(client, "storage_write", {"path": "notes/data.json", "content": json_text})
        assert bob.read_bytes("notes/data.json")[0] == json_text.encode()

        # -- conflict: bob changes the note after alice's last read
        bob.write("notes/todo.md", "- fix queue-b\n- done\n- bob: restarted queue-b\n")
        conflict = await client.call_tool(
            "storage_write", {"path": "notes/todo.md", "content": "- alice rewrite\n"})
        assert isinstance(conflict, CallToolResult) and conflict.is_error
        message = text_of(conflict)
        assert message.startswith("CONFLICT")
        assert "NOT applied" in message and "bob" in message and "storage_read" in message
        assert "force=true" in message
        assert conflict.meta is not None
        assert conflict.meta["memfs"]["conflict"]["last_writer"] == "bob"
        assert "bob: restarted" in bob.read("notes/todo.md")["text"]
        sed_conflict = await call_error(client, "storage_write",
                                        {"path": "notes/todo.md", "sed": "s/a/b/"})
        assert sed_conflict.startswith("CONFLICT")

        reread = await call_ok(client, "storage_read", {"path": "notes/todo.md"})
        first, *body = reread.splitlines()
        assert "changed since you last read it" in first and "bob" in first
        assert body[-1] == "     3\t- bob: restarted queue-b"
        again = await call_ok(client, "storage_read", {"path": "notes/todo.md"})
        assert "changed since" not in again
        retry = await call_ok(client, "storage_write",
                              {"path": "notes/todo.md",
                               "content": "- fix queue-b\n- done\n- bob: restarted queue-b\n"
                                          "- alice: confirmed\n"})
        assert 'Wrote "notes/todo.md"' in retry

        # -- a file alice never read: writing it whole is a conflict; appending is fine
        never = await call_error(client, "storage_write",
                                 {"path": "notes/incidents/checkout.md", "content": "oops\n"})
        assert "CONFLICT" in never and "have not read it" in never
        await call_ok(client, "storage_write",
                      {"path": "notes/incidents/checkout.md", "content": "seen: alice\n",
                       "append": True})

        # -- download, edit locally, upload
        csv = "id,amount\n1,10\n2,20\n"
        with connect_as(UID_A, daemon.socket) as alice_direct:  # bob may only read ops
            alice_direct.write("ops/orders.csv", csv)
        local = workdir / "orders.csv"
        downloaded = await call_ok(client, "storage_download",
                                   {"path": "ops/orders.csv", "dest": str(local)})
        assert f'to "{local}"' in downloaded and "storage_upload" in downloaded
        assert local.read_text() == csv
        assert local.stat().st_uid == UID_A
        local.write_text(csv + "3,30\n")
        uploaded = await call_ok(client, "storage_upload",
                                 {"src": str(local), "path": "ops/orders.csv"})
        assert "Uploaded" in uploaded
        assert bob.read("ops/orders.csv")["text"] == csv + "3,30\n"

        # download into a directory keeps the name
        sub = workdir / "sub"
        text = await call_ok(client, "storage_download",
                             {"path": "notes/todo.md", "dest": f"{sub}/"})
        assert (sub / "todo.md").read_text().endswith("- alice: confirmed\n")
        assert str(sub / "todo.md") in text

        # -- stale upload: another agent adds a row after the download
        await call_ok(client, "storage_download", {"path": "notes/data.json", "dest": str(local)})
        bob.read("notes/data.json")
        bob.write("notes/data.json", '{"a": [1, 2, 3], "b": null}')
        local.write_text('{"a": [], "b": 1}')
        stale = await call_error(client, "storage_upload",
                                 {"src": str(local), "path": "notes/data.json"})
        assert stale.startswith("CONFLICT") and "bob" in stale
        assert "storage_download" in stale
        assert bob.read("notes/data.json")["text"] == '{"a": [1, 2, 3], "b": null}'
        # download the new version, redo the work, upload again
        await call_ok(client, "storage_download", {"path": "notes/data.json", "dest": str(local)})
        assert local.read_text() == '{"a": [1, 2, 3], "b": null}'
        local.write_text('{"a": [1, 2, 3], "b": 2}')
        await call_ok(client, "storage_upload", {"src": str(local), "path": "notes/data.json"})
        assert bob.read("notes/data.json")["text"] == '{"a": [1, 2, 3], "b": 2}'
        # force overwrites on purpose
        bob.write("notes/data.json", "bob again")
        await call_error(client, "storage_upload", {"src": str(local), "path": "notes/data.json"})
        await call_ok(client, "storage_upload",
                      {"src": str(local), "path": "notes/data.json", "force": True})
        assert bob.read("notes/data.json")["text"] == '{"a": [1, 2, 3], "b": 2}'
    bob.close()


async def test_delegate_session_as_alice(daemon: Daemon) -> None:
    """Root (a delegate) serving MCP for alice with --as: the daemon attributes the
    writes to alice, and alice's own record is what the version check uses."""
    async with mcp_session(daemon.socket, as_agent="alice") as client:
        assert client.instructions is not None and "You are agent alice" in client.instructions
        await call_ok(client, "storage_write", {"path": "ops/deleg.md", "content": "x\n"})
    with connect_as(UID_A, daemon.socket) as alice:
        info = alice.stat("ops/deleg.md")
        assert info["last_writer"] == "alice"
        assert info["seen"] == info["digest"]  # alice's record, written through the delegate


async def test_local_dir_confines_download_and_upload(daemon: Daemon, workdir: Path) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/c.md", "confined\n")
    (workdir / "escape").symlink_to("/etc")
    async with mcp_session(daemon.socket, uid=UID_A,
                           extra=["--local-dir", str(workdir)]) as client:
        text = await call_ok(client, "storage_download", {"path": "notes/c.md", "dest": "c.md"})
        assert f'to "{workdir}/c.md"' in text
        assert (workdir / "c.md").read_text() == "confined\n"
        await call_ok(client, "storage_download", {"path": "notes/c.md", "dest": "in/"})
        assert (workdir / "in" / "c.md").read_text() == "confined\n"
        (workdir / "c.md").write_text("confined, edited\n")
        await call_ok(client, "storage_upload", {"src": "c.md", "path": "notes/c.md"})
        for tool, arguments in [
            ("storage_download", {"path": "notes/c.md", "dest": "/tmp/c.md"}),
            ("storage_download", {"path": "notes/c.md", "dest": "../c.md"}),
            ("storage_download", {"path": "notes/c.md", "dest": "escape/c.md"}),
            ("storage_upload", {"src": "/etc/hostname", "path": "notes/c.md"}),
            ("storage_upload", {"src": "escape/hostname", "path": "notes/c.md"}),
        ]:
            assert "outside" in await call_error(client, tool, arguments)
    with connect_as(UID_A, daemon.socket) as alice:
        assert alice.read("notes/c.md")["text"] == "confined, edited\n"
