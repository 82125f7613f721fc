"""``memfs mcp`` against a personal memory: each MCP client is its own agent, named
by ``--agent`` or by its ``initialize`` ``clientInfo.name``; a client that names
nothing is refused, never merged with another (control/mcp/identity.py). Real stdio
servers started by the official SDK client as the owner's uid."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client as McpClient
from mcp_types import Implementation

from memfs.control.mcp.identity import agent_from_client
from tests.control.mcp.conftest import call_error, call_ok, server_params
from tests.daemon.test_personal import personal_config
from tests.store.history.gitcheck import commits
from tests.support import UID_A, Daemon, public_tmpdir, scaled


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(personal_config(public_tmpdir("memfs-mcp-personal-"))) as running:
        yield running


@asynccontextmanager
async def client(daemon: Daemon, *, name: str | None = None, extra: Sequence[str] = (),
                 mode: str = "auto") -> AsyncIterator[McpClient]:
    """An SDK client (as ``name``: its clientInfo; None: the SDK's default) of a fresh
    ``memfs mcp`` run as the owner's uid."""
    info = None if name is None else Implementation(name=name, version="1.0")
    params = server_params(daemon.socket, uid=UID_A, extra=extra)
    async with McpClient(params, client_info=info, mode=mode,  # type: ignore[arg-type]
                         read_timeout_seconds=scaled(60)) as connected:
        yield connected


def refusal(error: BaseException) -> str:
    """The text of an error the SDK raised (within exception groups)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return str(error)


@pytest.mark.parametrize(("name", "agent"), [
    ("claude-code", "claude-code"), ("Codex CLI", "codex-cli"), ("Cursor", "cursor"),
    ("Gemini CLI (v2)", "gemini-cli-v2"), ("  spaced  out  ", "spaced-out"),
    ("__x__", "x"), ("Ünïcode agent", "n-code-agent"), ("y" * 80, "y" * 64),
    ("mcp", None), ("MCP", None), ("", None), ("---", None), (None, None), (7, None),
])
def test_a_client_name_becomes_an_agent_name(name: object, agent: str | None) -> None:
    assert agent_from_client(name) == agent


async def test_three_clients_are_three_agents(daemon: Daemon) -> None:
    root = Path(daemon.config["root"])
    async with client(daemon, name="claude-code") as claude, \
            client(daemon, name="Codex CLI", mode="legacy") as codex, \
            client(daemon, extra=["--agent", "gemini"]) as gemini:
        assert "You are agent claude-code in memfs" in (claude.instructions or "")
        assert "You are agent codex-cli in memfs" in (codex.instructions or "")
        assert "You are agent gemini in memfs" in (gemini.instructions or "")
        await call_ok(claude, "storage_write", {"path": "notes/plan.md", "content": "A\n"})
        stale = await call_error(codex, "storage_write",
                                 {"path": "notes/plan.md", "content": "blind\n"})
        assert "CONFLICT" in stale and '"claude-code"' in stale, stale
        await call_ok(codex, "storage_read", {"path": "notes/plan.md"})
        await call_ok(codex, "storage_write", {"path": "notes/plan.md", "content": "B\n"})
        stale = await call_error(gemini, "storage_write",
                                 {"path": "notes/plan.md", "content": "blind\n"})
        assert "CONFLICT" in stale and '"codex-cli"' in stale, stale

        await call_ok(claude, "task_create", {"task": "fix-login", "title": "Fix the login"})
        await call_ok(claude, "task_claim", {"task": "fix-login"})
        for other in (codex, gemini):
            held = await call_error(other, "task_claim", {"task": "fix-login"})
            assert held.startswith("LEASE HELD") and '"claude-code"' in held, held

        await call_ok(codex, "session_start", {"goal": "review the plan"})
        briefs = {name: await call_ok(c, "memory_brief", {})
                  for name, c in (("claude-code", claude), ("codex-cli", codex),
                                  ("gemini", gemini))}
    for name, text in briefs.items():
        assert text.startswith(f"# Brief for {name} "), text
    assert "Your open session" in briefs["codex-cli"]
    assert "Your open session" not in briefs["claude-code"] + briefs["gemini"]
    authors = [c.author.name for c in commits(root, "notes")]
    assert {"claude-code", "codex-cli"} <= set(authors)
    assert "mcp" not in authors


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_clients_that_name_nothing_are_refused_never_merged(daemon: Daemon,
                                                                  mode: str) -> None:
    """Three clients with no name of their own (the SDK then says "mcp"): each is
    refused with what to add to its config; nothing is done as one shared agent."""
    root = Path(daemon.config["root"])
    before = len(commits(root, "notes"))
    for _ in range(3):
        with pytest.raises(BaseException) as refused:
            async with client(daemon, mode=mode) as unnamed:
                await unnamed.call_tool("storage_write", {"path": "notes/u.md", "content": "u"})
        text = refusal(refused.value)
        assert "did not name itself" in text and "--agent" in text, text
    assert len(commits(root, "notes")) == before
    agents_file = root / "state" / "agents.json"
    registered = json.loads(agents_file.read_text())["agents"] if agents_file.exists() else {}
    assert "mcp" not in registered
