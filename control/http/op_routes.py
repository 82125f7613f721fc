"""The REST endpoints that mirror protocol ops one to one: those of the ops that declare
a `Rest` endpoint in the registry (control/ops/registry.py), e.g. the history, sessions,
the brief, tasks and decisions of ``/v1/stores/{store}/...``.

Each `Operation` names its op; its request is the op's pydantic model built from the
path parameters, then the query string (lax: text to int or bool) or the JSON body
(strict, like the socket), and carried out by ``Dispatcher.execute``
(control/http/files.py's `Api`). The same list generates the OpenAPI document
(control/http/openapi.py): one set of models, two transports.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memfs.control import protocol as p
from memfs.control.http.files import Api, agent_of
from memfs.control.http.problems import Problem, guarded, json_object, query
from memfs.control.ops import registry
from memfs.control.ops.memory import MemoryRequest
from memfs.control.ops.registry import RESERVED_FIELDS, Adjust


@dataclass(frozen=True)
class Operation:
    method: Literal["GET", "POST"]
    path: str  # a Starlette path; its parameters are model fields (or see `adjust`)
    op: str
    summary: str
    status: int = 200
    renames: dict[str, str] = field(default_factory=dict)  # REST name -> model field
    adjust: Adjust | None = None  # turns the gathered fields into the model's
    conditional: bool = False  # If-Match / If-None-Match hold for the path's file

    @property
    def source(self) -> Literal["query", "body"]:
        return "query" if self.method == "GET" else "body"

    def params(self) -> list[str]:
        return [part[1:-1].split(":")[0] for part in self.path.split("/")
                if part.startswith("{")]

    def inputs(self) -> list[str]:
        """The model fields a caller gives in the query or the body (REST names)."""
        hidden = RESERVED_FIELDS | {"expect", "encoding"} | set(self.params())
        if self.adjust is not None:
            hidden |= {"path"}
        inverse = {v: k for k, v in self.renames.items()}
        names = [inverse.get(name, name) for name in registry.op(self.op).request.model_fields
                 if name not in hidden]
        return names + ([k for k in self.renames if k not in names])


def operations() -> list[Operation]:
    """An endpoint per op that declares one (its `Rest`), in declaration order."""
    return [Operation(declared.rest.method, declared.rest.path, name, declared.summary,
                      declared.rest.status, dict(declared.rest.renames), declared.rest.adjust,
                      declared.rest.conditional)
            for name, declared in registry.ops().items() if declared.rest is not None]


def _gather(operation: Operation, request: Request, given: dict[str, Any]) -> dict[str, Any]:
    """Path parameters plus the caller's fields, renamed; refuses reserved fields
    and fields that would override a path parameter."""
    params = operation.params()
    fields: dict[str, Any] = {}
    for name, value in given.items():
        if name in RESERVED_FIELDS or name in params or name == "expect":
            raise p.ProtocolError("invalid", f"{name!r} cannot be given here")
        fields[operation.renames.get(name, name)] = value
    fields.update(request.path_params)
    return operation.adjust(fields) if operation.adjust else fields


@functools.cache
def _param_check(op: str, name: str) -> TypeAdapter[Any] | None:
    """The rules of the model field a path parameter fills (None: it fills none)."""
    info = registry.op(op).request.model_fields.get(name)
    if info is None or info.annotation is None:
        return None
    if not info.metadata:
        return TypeAdapter(info.annotation)
    return TypeAdapter(Annotated[info.annotation, *info.metadata])  # type: ignore[arg-type]


def _named_resources(operation: Operation, request: Request) -> None:
    """A path parameter that no id, name or store can be names no resource: 404 (the
    same value in a body or on the socket is a bad request)."""
    for name in operation.params():
        check = _param_check(operation.op, name)
        value = request.path_params.get(name)
        if check is None or value is None:
            continue
        try:
            check.validate_python(value)
        except ValidationError as error:
            reason = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise Problem("not_found", f"no {name} {value!r} ({reason})") from None


def _structured(api: Api, request: Request) -> None:
    """The sessions, tasks, decisions and brief of a store that keeps none are no
    resource: 404 (over the socket the same request is invalid: it names no URL)."""
    name = str(request.path_params.get("store"))
    spec = api.config.stores.get(name)
    if spec is not None and not spec.structured:
        api.dispatcher.engine.check_access(agent_of(request), name)  # 403 comes first
        raise Problem("not_found", f"store {name} is not structured: it keeps no sessions, "
                      "tasks or decisions")


def routes(api: Api) -> list[Route]:
    """A route per operation of the table."""

    def endpoint(operation: Operation) -> Callable[[Request], Any]:
        allowed = {name: name for name in operation.inputs()}
        memory = issubclass(registry.op(operation.op).request, MemoryRequest)

        @guarded
        async def handle(request: Request) -> Response:
            _named_resources(operation, request)
            if memory:
                _structured(api, request)
            if operation.source == "query":
                fields = _gather(operation, request, query(request, allowed))
                result = await api.execute(request, operation.op, fields, lax=True)
            else:
                query(request, {})
                fields = _gather(operation, request, await json_object(request, api.max_json))
                result = await api.execute(request, operation.op, fields,
                                           conditional=operation.conditional)
            return JSONResponse(result, operation.status)

        return handle

    return [Route(op.path, endpoint(op), methods=[op.method]) for op in operations()]
