"""The ``summary`` op, added as the registry says a memory op is added (its module
control/ops/summary.py, its entry in registry.DECLARATIONS, its CLI command): its REST
route, its OpenAPI path, its MCP tool (over HTTP and stdio) and its CLI command appear
with nothing else written, and agree."""

from __future__ import annotations

import json
import subprocess

import httpx

from tests.control.http.conftest import problem
from tests.control.http.test_http_mcp import mcp_http
from tests.control.mcp.conftest import call_ok, mcp_session
from tests.support import MEMFS, REPO, Daemon


async def test_summary_everywhere(daemon: Daemon, tokens: dict[str, str],
                                  alice: httpx.Client) -> None:
    before = alice.get("/v1/stores/team/summary")
    assert before.status_code == 200, before.text
    alice.post("/v1/stores/team/tasks", json={"task": "count-me", "title": "Count me"})
    alice.post("/v1/stores/team/decisions", json={"title": "Count", "decision": "d",
                                                  "reason": "r"})
    alice.put("/v1/stores/team/files/notes/summary.md", content=b"a note\n")
    after = alice.get("/v1/stores/team/summary").json()
    old = before.json()
    assert after["store"] == "team"
    assert after["notes"] == old["notes"] + 1
    assert after["tasks"]["open"] == old["tasks"]["open"] + 1
    assert after["tasks"]["total"] == old["tasks"]["total"] + 1
    assert after["decisions"]["accepted"] == old["decisions"]["accepted"] + 1
    assert set(after["sessions"]) == {"open", "closed", "total"}
    problem(alice.get("/v1/stores/secret/summary"), 404, "not_found")

    spec = alice.get("/v1/openapi.json").json()
    assert "get" in spec["paths"]["/v1/stores/{store}/summary"]

    expected = (f"Store \"team\": {after['notes']} notes.\nTasks: {after['tasks']['open']} "
                "open")
    async with mcp_http(daemon, tokens["alice"]) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["memory_summary"].annotations.read_only_hint is True  # type: ignore[union-attr]
        assert (await call_ok(client, "memory_summary", {"store": "team"})).startswith(expected)
        result = await client.call_tool("memory_summary", {"store": "team"})
        assert result.structured_content == after  # what its outputSchema says, checked
        assert tools["memory_summary"].output_schema is not None
    async with mcp_session(daemon.socket, as_agent="alice") as stdio:
        assert (await call_ok(stdio, "memory_summary", {"store": "team"})).startswith(expected)

    shown = subprocess.run([*MEMFS, "--socket", str(daemon.socket), "--as", "alice", "--json",
                            "summary", "team"], cwd=REPO, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == after
