"""``memfs mcp config CLIENT``: the snippet that plugs ``memfs mcp`` into an MCP client
(Claude Code, Codex, Gemini CLI, Cursor, VS Code), in the form that client reads,
with the absolute path of this ``memfs``, the daemon's socket and the agent's name
baked in: nothing left for the client's environment to supply.

`snippet` makes it (the snippets of README.md and docs/operate/personal.md are its
output for /usr/local/bin/memfs and uid 1000's socket: tests/cli/test_mcp_config.py
checks that); `cmd_mcp_config` is
the command, registered by memfs/cli/__init__.py.
"""

from __future__ import annotations

import json
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

# client -> where its snippet goes (said on stderr, so stdout is the snippet alone)
CLIENTS = {
    "claude": "run it (Claude Code; --scope user: for every project)",
    "codex": "add it to ~/.codex/config.toml",
    "gemini": "merge it into ~/.gemini/settings.json",
    "cursor": "merge it into ~/.cursor/mcp.json",
    "vscode": "merge it into .vscode/mcp.json (or the user profile's mcp.json)",
}


def server_argv(socket: str, agent: str | None) -> list[str]:
    """The arguments of ``memfs`` that serve MCP over stdio against ``socket``, as
    ``agent`` (None: the uid's own agent, against a system daemon)."""
    return ["mcp", "--socket", socket, *([] if agent is None else ["--agent", agent])]


def snippet(client: str, memfs: str, socket: str, agent: str | None) -> str:
    """The config snippet of ``client`` (a key of CLIENTS) that runs ``memfs`` (an
    absolute path) as an MCP stdio server against ``socket`` as ``agent``."""
    args = server_argv(socket, agent)
    if client == "claude":
        import shlex

        return shlex.join(["claude", "mcp", "add", "--scope", "user", "memfs", "--",
                           memfs, *args])
    if client == "codex":
        return "\n".join(["[mcp_servers.memfs]", f"command = {json.dumps(memfs)}",
                          f"args = {json.dumps(args)}"])
    if client == "vscode":
        server = {"type": "stdio", "command": memfs, "args": args}
        return _json({"servers": {"memfs": server}})
    return _json({"mcpServers": {"memfs": {"command": memfs, "args": args}}})


def _json(value: object) -> str:
    """``value`` as indented JSON with each list of strings on one line."""
    import re

    text = json.dumps(value, indent=2)
    return re.sub(r"\[\n\s*([^\[\]{}]*?)\n\s*\]",
                  lambda m: "[" + ", ".join(item.strip() for item in m[1].split(",\n")) + "]",
                  text)


def this_memfs() -> str:
    """The absolute path of the ``memfs`` command of this installation: the script
    beside this Python (a virtualenv's bin), else the one on PATH."""
    import shutil

    beside = os.path.join(os.path.dirname(sys.executable), "memfs")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("memfs")
    return os.path.abspath(found) if found else beside


def cmd_mcp_config(args: argparse.Namespace) -> int:
    """Print the snippet of ``args.client``: the socket is ``--socket``, else the one
    memfs finds now (memfs/places.py), else this user's personal one; the agent is
    ``--agent``, else the client's name (none against the system daemon)."""
    from memfs import places

    try:
        socket = places.find_socket(args.socket)
    except places.NoDaemon:
        socket = places.socket_path()
        print(f"memfs: note: no daemon is running yet: {socket} is where `memfs serve "
              "--personal` will listen", file=sys.stderr)
    personal = socket != places.SYSTEM_SOCKET
    agent = (args.agent or args.client) if personal else None
    print(snippet(args.client, this_memfs(), socket, agent))
    print(f"memfs: {CLIENTS[args.client]}", file=sys.stderr)
    return 0
