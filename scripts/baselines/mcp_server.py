"""The least an MCP server made with the official SDK does: one tool that answers from
memory, over stdio. The ceiling ``memfs mcp``'s storage_read is measured against
(scripts/bench_mcp.py). Not part of memfs.

    python mcp_server.py TEXT_FILE

serves the tool ``read(path)``, which returns TEXT_FILE's text (read once at start)
whatever the path, as a text result. It is built and run as the SDK's documentation
shows (``MCPServer``, ``add_tool``, ``run("stdio")``): no socket, no daemon, no
formatting of the text.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        text = handle.read()
    server: MCPServer = MCPServer("baseline", log_level="WARNING")

    def read(path: str) -> str:
        """The file's text (always the same, from memory)."""
        return text

    server.add_tool(read, structured_output=False)
    server.run("stdio")


if __name__ == "__main__":
    main()
