"""Every operation, declared once, and carrying them out. `control.ops.registry` is the
one list: each op's request model, handler, access, summary and optional REST endpoint
and MCP tool, declared in `control.ops.storage`, `history`, `memory` and `tokens`; the
socket's codec, the in-process requests, the REST routes, the OpenAPI document and the
generated MCP tools derive from it. The `Dispatcher` carries out a request with the
collaborators it is given (engine, jail, memory model) and is the edge where their
exceptions become protocol error codes."""

from __future__ import annotations

from memfs.control import lazy

# each public name and the module defining it, imported on first use: the dispatcher
# pulls in the engine, the jail and the memory model, which a process that only reads
# the declarations (`memfs mcp`) should not pay for
_WHERE = {
    **dict.fromkeys(("Dispatcher", "describe"), "memfs.control.ops.dispatcher"),
    **dict.fromkeys(("Call", "Op", "Rest", "Tool", "agent_ops", "build_request",
                     "decode_request", "op", "operation", "ops"), "memfs.control.ops.registry"),
}
__all__ = sorted(_WHERE)

__getattr__ = lazy.exports(__name__, _WHERE)
