"""Every MCP tool, made from the op registry (control/ops/registry.py): each `Tool` an
op declares is one tool here, its name, title, description, input schema (its
arguments' model), output schema and annotations all read from the declaration.

The tools are served by `install`, as the handlers of ``tools/list`` and ``tools/call``
on the SDK's low-level server: the arguments are checked by their model here, so a
bad call is a tool error from memfs/errors.py's table in plain words naming the
argument (never the validator's own text), and a call of a tool that does not exist
is the JSON-RPC error the spec names (-32602 invalid params).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from memfs.control.mcp.memory import AgentTools
from memfs.control.mcp.storage import ToolOutcome
from memfs.control.mcp.types import result_of
from memfs.control.ops import registry
from memfs.control.protocol.wire import problems
from memfs.errors import ERRORS

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult
    from mcp_types import Tool as McpTool

Run = Callable[..., Awaitable[Any]]


def as_json(result: dict[str, Any]) -> str:
    """A result for a model: JSON, every string escaped (memory text stays data)."""
    return json.dumps(result, indent=2, ensure_ascii=True)


class NullIsAbsent(GenerateJsonSchema):
    """An optional argument's schema is its value's (``"type": "string"``, not "a
    string or null"): null is taken as absent anyway (`Spec.check`), and a model
    reads the plainer schema better."""

    def nullable_schema(self, schema: Any) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])


@dataclass(frozen=True)
class Spec:
    """One tool: the op it belongs to, its declaration and its arguments' model."""

    op: registry.Op
    tool: registry.Tool
    arguments: type[BaseModel]

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        schema = self.arguments.model_json_schema(schema_generator=NullIsAbsent)
        schema.pop("title", None)
        return schema

    def listing(self) -> McpTool:
        """The tool as ``tools/list`` shows it."""
        from mcp_types import Tool as McpTool
        from mcp_types import ToolAnnotations

        reads = self.op.access == "read" and not self.tool.local
        annotations = (
            ToolAnnotations(read_only_hint=True, open_world_hint=False) if reads else
            ToolAnnotations(read_only_hint=False, destructive_hint=self.tool.destructive,
                            idempotent_hint=False, open_world_hint=False))
        output = None
        if self.tool.output is not None:
            output = TypeAdapter(self.tool.output).json_schema()
            output.pop("title", None)
        return McpTool(name=self.tool.name, title=self.tool.title or self.op.summary,
                       description=self.tool.description, input_schema=self.input_schema,
                       output_schema=output, annotations=annotations)

    def check(self, given: dict[str, Any]) -> dict[str, Any] | ToolOutcome:
        """The arguments, checked (an argument given as null is taken as absent, as
        some models send every optional one), or the error a model reads."""
        present = {name: value for name, value in given.items() if value is not None}
        try:
            checked = self.arguments.model_validate(present)
        except ValidationError as error:
            message = problems(error, noun="argument")
            known = ", ".join(self.arguments.model_fields)
            if "unknown argument" in message:
                message += f" ({self.tool.name} takes {known})"
            return ToolOutcome(ERRORS["invalid"].model_text(message), True)
        return checked.model_dump()

    async def call(self, tools: AgentTools, run: Run, given: dict[str, Any]) -> ToolOutcome:
        """Carry the call out (in a worker thread, by ``run``); never raises."""
        fields = self.check(given)
        if isinstance(fields, ToolOutcome):
            return fields
        if self.tool.run is not None:
            outcome: ToolOutcome = await run(
                functools.partial(getattr(tools, self.tool.run), **fields))
            return outcome
        fields = {name: value for name, value in fields.items() if value is not None}
        outcome = await run(tools.declared, self.op.name, fields, self.tool.render or as_json,
                            self.op.access == "read", self.tool.output is not None)
        return outcome


def specs(*, local_files: bool = True) -> dict[str, Spec]:
    """Every tool of the registry, by name (``local_files`` False: without those that
    read or write the server's own files: over HTTP)."""
    found: dict[str, Spec] = {}
    for op in registry.ops().values():
        if op.access == "operator":
            continue
        for tool in op.tools:
            if tool.local and not local_files:
                continue
            if tool.name in found:
                raise ValueError(f"tool {tool.name!r} is declared twice")
            found[tool.name] = Spec(op, tool, registry.tool_arguments(op.name, tool.name))
    return found


def unknown_tool(name: object) -> Exception:
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    return MCPError(INVALID_PARAMS, f"Unknown tool: {json.dumps(name)} (tools/list names the "
                    "tools of this server)")


def install(server: MCPServer[Any], tools: AgentTools, run: Run, *,
            local_files: bool = True) -> None:
    """Serve the registry's tools on ``server``, each call run by ``run``."""
    from mcp_types import (
        CallToolRequestParams,
        ListToolsResult,
        PaginatedRequestParams,
    )

    table = specs(local_files=local_files)
    listing = [spec.listing() for spec in table.values()]

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=listing)

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        spec = table.get(params.name)
        if spec is None:
            raise unknown_tool(params.name)
        return result_of(await spec.call(tools, run, dict(params.arguments or {})))

    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("tools/list", PaginatedRequestParams, list_tools)
    lowlevel.add_request_handler("tools/call", CallToolRequestParams, call_tool)
    lowlevel.get_tool_input_schema = (
        lambda name: None if name not in table else table[name].input_schema)
