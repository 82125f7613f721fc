"""Bad input on every tool, whatever tools/list holds (every tool is made from the op
registry, so a new op's tool is covered here without a line added): a missing
argument, each argument of the wrong type, an unknown argument, a malformed id, an id
that does not exist. Each is a tool error whose text is a row of memfs/errors.py in
plain words naming the argument (no validator's jargon), nothing changes in memory,
and the server and the daemon keep answering."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_types import CallToolResult

from memfs.control.client import Client
from memfs.errors import ERRORS
from tests.control.mcp.conftest import call_ok, mcp_session, text_of
from tests.memory.conftest import memory_config
from tests.support import UID_B, Daemon, connect_as, public_tmpdir

# A valid value for each argument name (the id arguments name records that do not
# exist: a call that gets past its arguments is then refused as not found).
VALID: dict[str, Any] = {
    "path": "team/every-tool.md", "dest": "/tmp/memfs-every-tool-x", "src": "/nonexistent",
    "query": "anything", "title": "A title", "reason": "Why", "note": "A note",
    "summary": "Done", "next": "Next", "goal": "A goal", "rev": "HEAD",
    "task": "no-such-task", "session": "2026-01-01-bob-0000",
}
DECISION_ID = "2026-01-01-no-such-decision"
# a wrong value for each JSON type an argument can have
WRONG = {"string": 12345, "integer": "many", "boolean": "maybe", "array": 42}
MALFORMED = {"task": "Not A Slug!", "session": "yesterday", "store": "bad/store",
             "decision": "no spaces allowed"}
JARGON = ("validation error", "pydantic", "Input should", "Field required",
          "Extra inputs", "Traceback")


@pytest.fixture(scope="module")
def team_daemon() -> Iterator[Daemon]:
    with Daemon(memory_config(public_tmpdir())) as daemon:
        yield daemon


def valid(tool: str, name: str) -> Any:
    if name == "decision":
        return DECISION_ID if tool == "decision_show" else "What was decided"
    return VALID.get(name, "x")


def kinds(schema: dict[str, Any]) -> set[str]:
    found = {schema["type"]} if "type" in schema else set()
    for option in schema.get("anyOf", []):
        found |= kinds(option)
    return found


def bad_calls(tool: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """(arguments, the argument the error must name) for ``tool`` from its schema."""
    schema = tool.input_schema
    properties: dict[str, Any] = schema.get("properties", {})
    required = schema.get("required", [])
    base = {name: valid(tool.name, name) for name in required}
    for name in required:
        yield {key: value for key, value in base.items() if key != name}, name
    yield {**base, "surely_not_an_argument": 1}, "surely_not_an_argument"
    for name, prop in properties.items():
        for kind in sorted(kinds(prop)):
            if kind in WRONG and not (kind == "string" and "array" in kinds(prop)):
                yield {**base, name: WRONG[kind]}, name
        if name in MALFORMED and (tool.name == "decision_show" or name != "decision"):
            yield {**base, name: MALFORMED[name]}, name


def snapshot(client: Client) -> tuple[Any, ...]:
    """What memory holds: every file with its bytes, and the history's length."""
    files = {path: client.read_bytes(path)[0] for path in client.list()}
    return files, len(client.log(None, limit=10_000))


def check_error(result: Any, name: str, arguments: dict[str, Any]) -> str | None:
    """What is wrong with ``result`` as the answer to a bad call, or None."""
    assert isinstance(result, CallToolResult)
    text = text_of(result)
    if not result.is_error:
        return "not an error"
    prefixes = [kind.model_text("\0").split("\0")[0] for kind in ERRORS.values()
                if kind.for_model]
    if not any(text.startswith(prefix) for prefix in prefixes):
        return "not a row of memfs/errors.py"
    if any(word in text for word in JARGON):
        return "validator jargon"
    if name not in text:
        return f"does not name {name!r}"
    return None


async def test_every_tool_refuses_bad_arguments_clearly(team_daemon: Daemon) -> None:
    daemon = team_daemon
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("team/every-tool.md", "kept\n")
        before = snapshot(bob)
    async with mcp_session(daemon.socket, uid=UID_B) as client:
        tools = (await client.list_tools()).tools
        assert len(tools) >= 20
        failures, count = [], 0
        for tool in tools:
            for arguments, name in bad_calls(tool):
                count += 1
                problem = check_error(await client.call_tool(tool.name, arguments), name,
                                      arguments)
                if problem:
                    result = await client.call_tool(tool.name, arguments)
                    failures.append(f"{tool.name}({arguments}): {problem}: "
                                    f"{text_of(result)!r}")
        assert not failures, "\n".join(failures)
        assert count > 100
        assert "team/every-tool.md" in await call_ok(client, "storage_list", {})
    with connect_as(UID_B, daemon.socket) as bob:
        assert snapshot(bob) == before


async def test_records_that_do_not_exist_are_not_found_by_their_id(team_daemon: Daemon
                                                                   ) -> None:
    """A missing task, decision or session: not found, the id a JSON string, and no
    word about file paths (STORE/PATH, storage_list): it is no file."""
    calls = [("task_show", {"task": "no-such-task"}), ("task_claim", {"task": "no-such-task"}),
             ("task_checkpoint", {"task": "no-such-task", "note": "n"}),
             ("task_complete", {"task": "no-such-task"}),
             ("task_release", {"task": "no-such-task"}),
             ("decision_show", {"decision": DECISION_ID}),
             ("decision_record", {"title": "t", "decision": "d", "reason": "r",
                                  "supersedes": DECISION_ID}),
             ("session_show", {"session": VALID["session"]}),
             ("session_checkpoint", {"session": VALID["session"], "note": "n"})]
    async with mcp_session(team_daemon.socket, uid=UID_B) as client:
        for tool, arguments in calls:
            result = await client.call_tool(tool, arguments)
            text = text_of(result)
            assert result.is_error and text.startswith("Not found: "), (tool, text)
            shown = next(value for key, value in arguments.items()
                         if key in ("task", "session", "supersedes")
                         or (key == "decision" and tool == "decision_show"))
            assert json.dumps(shown) in text, (tool, text)
            assert "STORE/PATH" not in text and "storage_list" not in text, (tool, text)
        missing = await client.call_tool("storage_read", {"path": "team/missing.md"})
        assert re.search(r"Not found: .*STORE/PATH", text_of(missing))  # a file: the hint
