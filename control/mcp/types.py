"""The MCP result of a tool's outcome (control/mcp/tools.py)."""

from typing import TYPE_CHECKING

from memfs.control.mcp.storage import ToolOutcome

if TYPE_CHECKING:
    from mcp_types import CallToolResult


def result_of(outcome: ToolOutcome) -> "CallToolResult":
    from mcp_types import CallToolResult, TextContent

    meta = {"memfs": outcome.meta} if outcome.meta else None
    return CallToolResult(content=[TextContent(type="text", text=outcome.text)],
                          structured_content=outcome.structured,
                          is_error=outcome.is_error, _meta=meta)
