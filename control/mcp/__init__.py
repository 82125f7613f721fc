"""The tools for models and `memfs mcp`: the storage, history and memory tools
(`storage`, `history`, `memory`) carry out each call through one `Client` and never
raise, turning every outcome into text a model can act on; `tools` makes every MCP
tool from the op registry, `server` builds the official SDK's server, `stdio` serves it over
stdin and stdout, `identity` tells which agent a stdio server acts as."""

from __future__ import annotations

from memfs.control import lazy

# each public name and the module defining it, imported on first use: they pull in
# heavy libraries that a process using one sibling module alone should not pay for
_WHERE = {
    "Connection": "memfs.control.mcp.storage",
    "StorageTools": "memfs.control.mcp.storage",
    "ToolOutcome": "memfs.control.mcp.storage",
    "HistoryTools": "memfs.control.mcp.history",
    "AgentTools": "memfs.control.mcp.memory",
    "build_server": "memfs.control.mcp.server",
    "main_mcp": "memfs.control.mcp.server",
}
__all__ = sorted(_WHERE)

__getattr__ = lazy.exports(__name__, _WHERE)
