"""The memory tools through the official SDK client, as a real uid: the instructions say
to call memory_brief first; the server remembers the session it started; lease errors
read as LEASE HELD / LEASE LOST."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.control.mcp.conftest import call_error, call_ok, mcp_session
from tests.memory.conftest import memory_config
from tests.support import UID_B, Daemon, connect_as, public_tmpdir

MEMORY_TOOLS = {"memory_brief", "session_start", "session_checkpoint", "session_handoff",
                "task_create", "task_list", "task_claim", "task_checkpoint", "task_complete",
                "task_release", "decision_record", "decision_list"}


@pytest.fixture(scope="module")
def team_daemon() -> Iterator[Daemon]:
    with Daemon(memory_config(public_tmpdir())) as daemon:
        yield daemon


async def test_a_session_through_mcp(team_daemon: Daemon) -> None:
    daemon = team_daemon
    async with mcp_session(daemon.socket, uid=UID_B) as client:
        assert client.instructions is not None and "memory_brief first" in client.instructions
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names >= MEMORY_TOOLS
        brief = await call_ok(client, "memory_brief", {})
        assert brief.startswith("# Brief for bob")
        started = await call_ok(client, "session_start", {"goal": "Add rate limiting"})
        sid = json.loads(started.split()[1])  # ids are JSON strings
        await call_ok(client, "session_checkpoint", {"note": "middleware added"})
        await call_ok(client, "task_create", {"task": "rate-limit", "title": "Add rate limits"})
        claimed = await call_ok(client, "task_claim", {"task": "rate-limit", "ttl": "1s"})
        assert claimed.startswith('Claimed "rate-limit"')
        with connect_as(0, daemon.socket, as_agent="dave") as dave:
            held = dave.call("task_show", store="team", task="rate-limit")
            assert held["lease"]["session"] == sid  # the server's session, no id carried
            time.sleep(1.2)
            dave.call("task_claim", store="team", task="rate-limit")
        lost = await call_error(client, "task_checkpoint", {"task": "rate-limit", "note": "x"})
        assert lost.startswith("LEASE LOST") and "dave" in lost
        held_text = await call_error(client, "task_claim", {"task": "rate-limit"})
        assert held_text.startswith("LEASE HELD")
        listing = await call_ok(client, "task_list", {"status": "claimed"})
        assert '- "rate-limit" [claimed by "dave"' in listing and "> Add rate limits" in listing
        old = await call_ok(client, "decision_record", {
            "title": "Use a token bucket", "decision": "bucket", "reason": "bursts"})
        old_id = json.loads(old.split()[1])
        await call_ok(client, "decision_record", {
            "title": "Use a sliding window", "decision": "window", "reason": "fairness",
            "supersedes": old_id})
        decisions = await call_ok(client, "decision_list", {"status": "all"})
        assert f'"{old_id}" [superseded]' in decisions
        full = await call_ok(client, "decision_show", {"decision": old_id})
        assert "superseded by" in full and "bursts" in full
        await call_ok(client, "session_handoff", {"summary": "limits half done",
                                                  "next": "finish the window"})
        again = await call_error(client, "session_checkpoint", {"note": "after"})
        assert "session_start" in again
    with connect_as(UID_B, daemon.socket) as bob:
        shown = bob.call("session_show", store="team", session=sid)
        assert [e["kind"] for e in shown["entries"]] == ["checkpoint", "handoff"]
        assert shown["next"] == "finish the window"


async def test_task_show_is_a_tool_generated_from_its_declaration(team_daemon: Daemon) -> None:
    """task_show declares its tool with the op (control/ops/memory.py): the arguments
    come from the request model, the text from the declaration's render."""
    async with mcp_session(team_daemon.socket, uid=UID_B) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        shown = tools["task_show"]
        assert set(shown.input_schema["properties"]) == {"task", "store"}
        assert shown.input_schema["required"] == ["task"]
        assert shown.annotations is not None and shown.annotations.read_only_hint
        await call_ok(client, "task_create", {"task": "show-me", "title": "Look closer",
                                              "body": "all\u2028the details"})
        await call_ok(client, "task_claim", {"task": "show-me"})
        text = await call_ok(client, "task_show", {"task": "show-me"})
        assert text.startswith('Task "show-me" [claimed by "bob", ')
        assert "> Look closer" in text and "the details" in text  # quoted data
        assert "\u2028" not in text  # a line separator from memory is escaped
        missing = await call_error(client, "task_show", {"task": "no-such-task"})
        assert "no task" in missing


async def test_session_show_is_a_tool_generated_from_its_declaration(team_daemon: Daemon
                                                                      ) -> None:
    async with mcp_session(team_daemon.socket, uid=UID_B) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools["session_show"].input_schema["properties"]) == {"session", "store"}
        started = await call_ok(client, "session_start", {"goal": "Read\u2029me"})
        sid = json.loads(started.split()[1])
        await call_ok(client, "session_checkpoint", {"note": "half way"})
        text = await call_ok(client, "session_show", {"session": sid})
        assert "\u2029" not in text  # a paragraph separator from memory is escaped
        shown = json.loads(text)
        assert shown["id"] == sid and shown["agent"] == "bob" and shown["goal"] == "Read\u2029me"
        assert [entry["note"] for entry in shown["entries"]] == ["half way"]
        missing = await call_error(client, "session_show", {"session": "no-such-session"})
        assert "no-such-session" in missing or "no session" in missing
        listed = json.loads(await call_ok(client, "session_list", {"agent": "bob",
                                                                   "state": "open"}))
        assert sid in [session["id"] for session in listed["sessions"]]
        assert all("entries" not in session for session in listed["sessions"])
