"""memory_recall through the official SDK client, as a real uid: generated from the
recall op's declaration, its description tells a model when to use it instead of
storage_search, and its text keeps memory as data (paths as JSON strings, lines quoted
and escaped)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.control.mcp.conftest import call_ok, mcp_session
from tests.support import UID_A, UID_B, Daemon, connect_as, public_tmpdir, standard_config


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(standard_config(public_tmpdir())) as running:
        yield running


async def test_memory_recall(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/incidents/retry.md",
                    "# Retry queue stuck\n\nA poison message\u2028stopped the consumers.\n")
        alice.write("notes/other.md", "nothing to see\n")
    async with mcp_session(daemon.socket, uid=UID_B) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        recall = tools["memory_recall"]
        assert "storage_search" in (recall.description or "")
        assert set(recall.input_schema["properties"]) == {"query", "store", "limit", "page"}
        assert recall.input_schema["required"] == ["query"]
        assert recall.annotations is not None and recall.annotations.read_only_hint
        text = await call_ok(client, "memory_recall", {"query": "consumers stopping"})
        lines = text.splitlines()
        assert lines[0].startswith('Files matching "consumers stopping", best first')
        assert lines[1].startswith('1. "notes/incidents/retry.md" (score ')
        assert 'last written by "alice"' in lines[1]
        assert lines[2] == "   > 3: A poison message\\u2028stopped the consumers."
        assert "\u2028" not in text
        none = await call_ok(client, "memory_recall", {"query": "xylophone"})
        assert none == 'No file matches "xylophone".'
        punctuation = await call_ok(client, "memory_recall", {"query": "?!"})
        assert punctuation == 'No file matches "?!": it has no word to look for.'


async def test_the_instructions_name_memory_recall(daemon: Daemon) -> None:
    async with mcp_session(daemon.socket, uid=UID_B) as client:
        assert client.instructions is not None
        assert "memory_recall to find the notes about a topic" in client.instructions
