"""The one list of operations: each op is declared once, where its handler is
(control/ops/storage.py, history.py, memory.py, tokens.py, mirrors.py), with

* its request model (a `control.protocol.base.BaseRequest` whose ``op`` Literal names it),
* its handler, ``handler(call, request) -> result dict``, raising the engine's, the
  memory model's and the jail's exceptions,
* who may call it (`Access`: an agent reading, an agent changing something, or an
  operator: a delegate uid acting for no agent in particular),
* a summary for people (REST, OpenAPI, CLI help),
* optionally its REST endpoint (`Rest`: ops mirrored one to one under /v1; the
  hand-shaped file and search endpoints are in control/http/files.py) and its MCP tools
  (`Tool`: a description for models, its arguments, how a result reads as text).

Everything else derives from it: the socket's codec (`codec`), the dispatcher's table,
`build_request` for the in-process transports, the mirrored REST routes, the OpenAPI
document and every MCP tool (control/mcp/tools.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from memfs.control.protocol.base import BaseRequest
from memfs.control.protocol.wire import Codec, ProtocolError, op_of, problems
from memfs.errors import Unavailable
from memfs.recall.errors import RecallOff
from memfs.store.fs.paths import MemPath, parse_path

if TYPE_CHECKING:
    from memfs.jail import Jail
    from memfs.memory.model import Memory
    from memfs.recall import Recall
    from memfs.store.engine import Engine, Precondition
    from memfs.store.history.mirror import Mirrors
    from memfs.tokens import Tokens

# "read": an agent looks (the engine checks it may read the store); "write": an agent
# changes something (it checks read_write); "operator": a delegate uid (in personal mode
# the owner) acting for no agent in particular, checked before the handler runs.
Access = Literal["read", "write", "operator"]
# The modules that declare ops, imported once by `ops`.
DECLARATIONS = ("memfs.control.ops.storage", "memfs.control.ops.history",
                "memfs.control.ops.memory", "memfs.control.ops.recall",
                "memfs.control.ops.tokens", "memfs.control.ops.mirrors",
                "memfs.control.ops.summary")
# fields a transport fills in itself, never taken from a caller
RESERVED_FIELDS = frozenset({"op", "id", "as_agent"})

Adjust = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Rest:
    """An op's endpoint under /v1: its request is the op's model built from the path
    parameters, then the query string (GET, lax: text to int or bool) or the JSON body
    (POST, strict like the socket)."""

    method: Literal["GET", "POST"]
    path: str  # a Starlette path; its parameters are model fields (or see `adjust`)
    status: int = 200
    renames: Mapping[str, str] = field(default_factory=dict)  # REST name -> model field
    adjust: Adjust | None = None  # turns the gathered fields into the model's
    conditional: bool = False  # If-Match / If-None-Match hold for the path's file


@dataclass(frozen=True)
class Tool:
    """An op as an MCP tool (control/mcp/tools.py makes it; nothing about a tool is
    written anywhere else). ``description`` is what the model reads; ``title`` (default:
    the op's summary) what people see.

    Its arguments: the op's request fields (each ``Field(description=...)`` tells the
    model what to give), without the transport's own fields and ``omit``, the fields in
    ``optional`` made optional (the server fills them in, e.g. the session it started);
    or, for a tool that is not one request as such (a local file, a choice between
    requests), the ``arguments`` model declared beside the op. Either way the input
    schema is that model's JSON schema and the arguments are checked by it.

    Carried out by ``run``, the name of a method of control/mcp/memory.py's
    `AgentTools` called with the checked arguments (for what only the server can do:
    paging text, local files, its own session), else by sending the op with the
    arguments as its fields, the result rendered by ``render`` (default: as JSON).
    ``output``: the structured result's type (the tool's outputSchema); ``local``: it
    reads or writes files of the machine running the server (stdio only);
    ``destructive``: it may replace what is there (an MCP annotation)."""

    name: str
    description: str
    render: Callable[[dict[str, Any]], str] | None = None
    title: str | None = None
    arguments: type[BaseModel] | None = None
    omit: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    run: str | None = None
    output: Any = None
    local: bool = False
    destructive: bool = False


@dataclass(frozen=True)
class Parts:
    """What handlers work with: the engine, the memory model, the jail (None when it is
    not running), the HTTP tokens, the stores' mirrors and ranked recall (None when it
    is not running)."""

    engine: Engine
    memory: Memory
    jail: Jail | None
    tokens: Callable[[], Tokens]
    mirrors: Mirrors
    recall: Recall | None = None
    # why there is no jail (the kernel lacks what it needs: what to enable)
    jail_off: str = "search and sed edits are unavailable: the jail is not running"


@dataclass(frozen=True)
class Call:
    """One request being carried out: for whom, by whom, with what."""

    agent: str  # the agent it is for ("" for an operator op)
    uid: int | None  # the caller's uid, when a transport knows it (the socket does)
    delegate: bool  # the caller is a delegate uid (may force another agent's lease)
    parts: Parts
    # the caller's own condition on the file's current version (HTTP's If-Match /
    # If-None-Match), for the ops that change one file: in process only, never on a line
    precondition: Precondition | None = None

    @property
    def engine(self) -> Engine:
        return self.parts.engine

    @property
    def memory(self) -> Memory:
        return self.parts.memory

    def jail(self) -> Jail:
        """The jail; raises Unavailable (saying why) when it is not running."""
        if self.parts.jail is None:
            raise Unavailable(self.parts.jail_off)
        return self.parts.jail

    def recall(self) -> Recall:
        """Ranked recall; raises RecallOff when this daemon keeps no index."""
        if self.parts.recall is None:
            raise RecallOff()
        return self.parts.recall

    def path(self, raw: str) -> MemPath:
        """STORE/PATH (or MOUNT/STORE/PATH) of a file; raises InvalidInput."""
        return parse_path(raw, mount=str(self.engine.config.mount))

    def store_or_path(self, raw: str) -> MemPath:
        """As `path`, and a bare STORE too."""
        return parse_path(raw, allow_store_only=True, mount=str(self.engine.config.mount))


Handler = Callable[[Call, Any], dict[str, Any]]


@dataclass(frozen=True)
class Op:
    name: str
    request: type[BaseRequest]
    handler: Handler
    access: Access
    summary: str
    rest: Rest | None = None
    tools: tuple[Tool, ...] = ()


_DECLARED: dict[str, Op] = {}


def operation(request: type[BaseRequest], *, summary: str, access: Access = "read",
              rest: Rest | None = None, tool: Tool | tuple[Tool, ...] = ()
              ) -> Callable[[Handler], Handler]:
    """Declare the op of ``request`` with the decorated function as its handler, and
    its MCP tool(s) ``tool``."""

    def declare(handler: Handler) -> Handler:
        name = op_of(request)
        if name in _DECLARED:
            raise ValueError(f"op {name!r} is declared twice")
        tools = (tool,) if isinstance(tool, Tool) else tool
        _DECLARED[name] = Op(name, request, handler, access, summary, rest, tools)
        return handler

    return declare


@cache
def ops() -> Mapping[str, Op]:
    """Every op, by name, in declaration order."""
    for module in DECLARATIONS:
        importlib.import_module(module)
    return dict(_DECLARED)


def op(name: str) -> Op:
    """The op ``name``; raises ProtocolError (``invalid``) for an unknown one."""
    found = ops().get(name)
    if found is None:
        raise ProtocolError("invalid", f"unknown op {name!r}")
    return found


@cache
def codec() -> Codec:
    """The socket's codec: decodes a line into the model of any declared op."""
    return Codec([declared.request for declared in ops().values()])


def decode_request(line: bytes) -> BaseRequest:
    """`Codec.decode_request` over every declared op."""
    return codec().decode_request(line)


def agent_ops() -> frozenset[str]:
    """The ops an agent may send through an in-process transport (operator ops: socket
    only, where the kernel names the caller's uid)."""
    return frozenset(name for name, declared in ops().items() if declared.access != "operator")


ARGUMENTS_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True)


@cache
def tool_arguments(name: str, tool_name: str) -> type[BaseModel]:
    """The model of the arguments of op ``name``'s tool ``tool_name`` (see `Tool`)."""
    declared = op(name)
    tool = next(tool for tool in declared.tools if tool.name == tool_name)
    if tool.arguments is not None:
        return tool.arguments
    fields: dict[str, Any] = {}
    for field_name, info in declared.request.model_fields.items():
        if field_name in RESERVED_FIELDS or field_name in tool.omit:
            continue
        if field_name in tool.optional:
            # the field's type with its constraints (Annotated[T, *metadata]); a tuple
            # subscript, since Python 3.13's Annotated has no __class_getitem__
            kind: Any = (Annotated[(info.annotation, *info.metadata)]
                         if info.metadata else info.annotation)
            fields[field_name] = (kind | None, Field(
                default=None, description=info.description,
                json_schema_extra=info.json_schema_extra))
        else:
            fields[field_name] = (info.annotation, info)
    return create_model(f"{tool_name}_arguments", __config__=ARGUMENTS_CONFIG, **fields)


def build_request(name: str, fields: Mapping[str, Any], *, lax: bool = False) -> BaseRequest:
    """The request model of op ``name`` with ``fields`` (``op`` is set here): how the
    in-process transports (HTTP, MCP over HTTP) make the very requests the socket
    decodes. ``lax`` converts text such as query parameters ("3", "true") to the
    field's type, as strict JSON on the socket would not. Raises ProtocolError
    (``invalid``) naming the bad field."""
    model = op(name).request
    try:
        return model.model_validate({**fields, "op": name}, strict=False if lax else None)
    except ValidationError as error:
        raise ProtocolError("invalid", f"bad {name} request: {problems(error)}") from None
