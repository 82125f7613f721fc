"""``memfs mcp config CLIENT``: each client's snippet, the snippets of README.md
and docs/operate/personal.md its output,
and one snippet run as it is by the official Python SDK's stdio client in that SDK's
default (stripped) environment."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib

import pytest

from memfs.cli.mcpconfig import CLIENTS, server_argv, snippet
from tests.support import MEMFS, REPO

M, S = "/usr/local/bin/memfs", "/run/user/1000/memfs/control.sock"


def command_of(client: str, text: str) -> list[str]:
    """The argv a client runs from its snippet ``text``, read as that client does."""
    if client == "claude":
        words = shlex.split(text)
        return words[words.index("--") + 1:]
    if client == "codex":
        server = tomllib.loads(text)["mcp_servers"]["memfs"]
    else:
        servers = json.loads(text)["servers" if client == "vscode" else "mcpServers"]
        server = servers["memfs"]
        assert server.get("type", "stdio") == "stdio"
    return [server["command"], *server["args"]]


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_each_snippet_runs_memfs_mcp_with_socket_and_agent(client: str) -> None:
    assert command_of(client, snippet(client, M, S, "a-name")) == \
        [M, "mcp", "--socket", S, "--agent", "a-name"]
    assert command_of(client, snippet(client, M, S, None)) == [M, "mcp", "--socket", S]


PERSONAL = REPO / "docs" / "operate" / "personal.md"


def readme_block(after: str, fence: str) -> str:
    """The ``fence`` block after ``after`` in docs/operate/personal.md, as a list item's."""
    text = PERSONAL.read_text()
    start = text.index(f"```{fence}\n", text.index(after)) + len(fence) + 4
    block = text[start:text.index("```", start)]
    return "\n".join(line[2:] for line in block.rstrip().splitlines())  # a list item's


def test_the_documented_snippets_are_its_output() -> None:
    text = (REPO / "README.md").read_text()  # Claude Code's, on the first screen
    assert f"- Claude Code, run `{snippet('claude', M, S, 'claude')}`" in text
    assert readme_block("- Codex, in `~/.codex/config.toml`", "toml") == \
        snippet("codex", M, S, "codex")
    assert readme_block("- Gemini CLI, in `~/.gemini/settings.json`", "json") == \
        snippet("gemini", M, S, "gemini")


def test_the_command_bakes_in_this_memfs_the_socket_and_the_agent() -> None:
    for client, agent, extra in (("codex", "codex", []), ("cursor", "cur", ["--agent", "cur"])):
        done = subprocess.run([*MEMFS, "mcp", "config", client, "--socket", "/x/c.sock",
                               *extra], capture_output=True, text=True, cwd=REPO,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        argv = command_of(client, done.stdout)
        assert argv[0].startswith("/") and argv[0].endswith("/memfs"), argv
        assert argv[1:] == server_argv("/x/c.sock", agent)
        assert re.search(r"memfs: (add|merge) it", done.stderr), done.stderr
    folded = subprocess.run([*MEMFS, "mcp", "config", "codex", "--agent", "Codex"],
                            capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert folded.returncode == 2 and "use --agent codex" in folded.stderr
