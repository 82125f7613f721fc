"""MCP tools generated from the ops' declarations (control/ops/registry.py): every op
that declares a `Tool` gets one, whose arguments are its request model's fields (each
field's ``description`` is what the model reads), carried out through the client like
every tool, its result rendered by the declaration. No ``from __future__ import
annotations``: the SDK reads the signatures built here."""

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field
from pydantic.fields import FieldInfo

from control.mcp.memory import AgentTools
from control.mcp.types import OptionalFlag, OptionalText, result_of
from control.ops import registry

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def as_json(result: dict[str, Any]) -> str:
    """A result for a model: JSON, every string escaped (memory text stays data)."""
    return json.dumps(result, indent=2, ensure_ascii=True)


def _argument(info: FieldInfo) -> Any:
    """The tool argument's type for a model field: optional text and flags as the SDK
    must see them (control/mcp/types.py), anything else as the model declares it, with
    the field's description and bounds."""
    kind: Any = info.annotation
    if kind in (str | None, str) and not info.is_required():
        kind = OptionalText
    elif kind is bool:
        kind = OptionalFlag
    return Annotated[kind, Field(description=info.description), *info.metadata]


def tool_function(declared: registry.Op, tools: AgentTools,
                  run: "Callable[..., Awaitable[Any]]") -> Callable[..., Awaitable[Any]]:
    """An async function the SDK can add as ``declared``'s tool: its signature is the
    request model's fields (the transport's own fields left out)."""
    from mcp_types import CallToolResult

    assert declared.tool is not None
    render = declared.tool.render or as_json
    idempotent = declared.access == "read"
    parameters = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=_argument(info),
                          default=inspect.Parameter.empty if info.is_required() else None)
        for name, info in declared.request.model_fields.items()
        if name not in registry.RESERVED_FIELDS]

    async def tool(**given: Any) -> CallToolResult:
        fields = {name: value for name, value in given.items() if value is not None}
        return result_of(await run(tools.declared, declared.name, fields, render, idempotent))

    tool.__name__ = declared.tool.name
    tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=CallToolResult)
    return tool


def add_declared_tools(server: "MCPServer[Any]", tools: AgentTools,
                       run: "Callable[..., Awaitable[Any]]") -> None:
    """Add the tool of every op that declares one, each run in a worker thread by
    ``run``."""
    from mcp_types import ToolAnnotations

    for declared in registry.ops().values():
        if declared.tool is None or declared.access == "operator":
            continue
        reads = declared.access == "read"
        annotations = (ToolAnnotations(read_only_hint=True, open_world_hint=False) if reads
                       else ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                            open_world_hint=False))
        server.add_tool(tool_function(declared, tools, run), name=declared.tool.name,
                        title=declared.summary, description=declared.tool.description,
                        annotations=annotations, structured_output=False)
