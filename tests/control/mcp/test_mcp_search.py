"""storage_search's structured content through the official MCP SDK client (which
checks it against the tool's outputSchema), against a real daemon and the real jailed
rg: the model's text stays rg's text, and the matches come beside it."""

from __future__ import annotations

from typing import Any

from mcp import Client as McpClient
from mcp_types import CallToolResult

from tests.control.mcp.conftest import mcp_session, text_of
from tests.support import UID_A, Daemon, connect_as

RUNBOOK = "step one\nstep two\nrestart the payments worker\nstep four\nstep five\n"


async def search(client: McpClient, **arguments: Any) -> tuple[str, dict[str, Any] | None]:
    result = await client.call_tool("storage_search", arguments)
    assert isinstance(result, CallToolResult) and not result.is_error, text_of(result)
    return text_of(result), result.structured_content


def rg_text(daemon: Daemon, *args: str) -> str:
    """What the text search the tool used to run prints for ``args``."""
    with connect_as(UID_A, daemon.socket) as alice:
        output: str = alice.search(["--line-number", "--with-filename", "--sort=path",
                                    *args])["output"]
    return output.rstrip("\n")


async def test_matches_beside_the_same_text(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/runbook.md", RUNBOOK)
        alice.write("notes/café.md", "Café payments\n")
        alice.write("ops/deploy.md", "deploy payments on friday\n")
    async with mcp_session(daemon.socket, uid=UID_A) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        schema = tools["storage_search"].output_schema
        assert schema is not None and schema["required"] == ["exit_code", "truncated"]
        assert {"matches", "output"} <= set(schema["properties"])
        assert all(tool.output_schema is None for name, tool in tools.items()
                   if name not in ("storage_search", "memory_summary"))

        text, structured = await search(client, pattern="payments", flags=["-C1"])
        assert text == rg_text(daemon, "-C1", "payments")  # what the model read before
        assert structured is not None and structured["exit_code"] == 0
        assert not structured["truncated"]
        by_path = {match["path"]: match for match in structured["matches"]}
        assert set(by_path) == {"notes/café.md", "notes/runbook.md", "ops/deploy.md"}
        assert by_path["notes/runbook.md"] == {
            "path": "notes/runbook.md", "line": 3, "text": "restart the payments worker",
            "submatches": [{"start": 12, "end": 20, "match": "payments"}],
            "before": [{"line": 2, "text": "step two"}],
            "after": [{"line": 4, "text": "step four"}]}
        assert by_path["notes/café.md"]["submatches"] == [
            {"start": 5, "end": 13, "match": "payments"}]  # characters, not bytes

        text, structured = await search(client, args=["-w", "-i", "STEP", "notes"])
        assert text == rg_text(daemon, "-w", "-i", "STEP", "notes")
        assert structured is not None
        assert [m["line"] for m in structured["matches"]] == [1, 2, 4, 5]


async def test_flags_that_print_something_else_give_rgs_text(daemon: Daemon) -> None:
    """-l, -c, -o...: the text is rg's own, and so is the structured ``output``."""
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/runbook.md", RUNBOOK)
    async with mcp_session(daemon.socket, uid=UID_A) as client:
        for flags in (["-l"], ["-c"], ["-o"], ["-N"]):
            text, structured = await search(client, pattern="step", flags=flags)
            assert text == rg_text(daemon, *flags, "step"), flags
            assert structured == {"output": text + "\n", "exit_code": 0, "truncated": False}
        text, structured = await search(client, pattern="no-such-text")
        assert text == "No matches."
        assert structured == {"matches": [], "exit_code": 1, "truncated": False}
        failed = await client.call_tool("storage_search", {"pattern": "(unclosed"})
        assert failed.is_error and failed.structured_content is None
