"""The REST endpoints that mirror protocol ops one to one, declared as a table: the
history, sessions, the brief, tasks and decisions of ``/v1/stores/{store}/...``.

Each `Operation` names its protocol op; its request is the op's pydantic model
(control/protocol/by_op.py) built from the path parameters, then the query string (lax: text
to int or bool) or the JSON body (strict, like the socket), and carried out by
``Dispatcher.execute`` (control/http/files.py's `Api`). The same table generates the
OpenAPI document (control/http/openapi.py): one set of models, two transports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from control import protocol as p
from control.http.files import Api, preconditions, versioned
from control.http.problems import guarded, json_object, query
from control.protocol.by_op import REQUEST_MODELS, RESERVED_FIELDS

Adjust = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Operation:
    method: Literal["GET", "POST"]
    path: str  # a Starlette path; its parameters are model fields (or see `adjust`)
    op: str
    summary: str
    status: int = 200
    renames: dict[str, str] = field(default_factory=dict)  # REST name -> model field
    adjust: Adjust | None = None  # turns the gathered fields into the model's
    if_match: bool = False  # If-Match becomes ``expect`` (a version-checked write)

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
        names = [inverse.get(name, name) for name in REQUEST_MODELS[self.op].model_fields
                 if name not in hidden]
        return names + ([k for k in self.renames if k not in names])


def _store_path(fields: dict[str, Any]) -> dict[str, Any]:
    """``store`` and an optional ``path`` within it -> the protocol's STORE[/PATH]."""
    store = fields.pop("store")
    rel = fields.pop("file", None)
    fields["path"] = store if rel in (None, "") else f"{store}/{str(rel).lstrip('/')}"
    return fields


S = "/v1/stores/{store}"
OPERATIONS: list[Operation] = [
    Operation("GET", "/v1/whoami", "whoami", "Who the token's agent is, and its stores"),
    Operation("GET", f"{S}/history", "log", "Changes of the store, a folder or a file, "
              "newest first", renames={"n": "limit", "path": "file"}, adjust=_store_path),
    Operation("GET", f"{S}/diff", "diff", "A unified diff of a file: since you last read "
              "it, from REV, or REV..REV", renames={"path": "file"}, adjust=_store_path),
    Operation("POST", f"{S}/restore", "restore", "Write a file back as it was at REV "
              "(version-checked; If-Match honoured)", renames={"path": "file"},
              adjust=_store_path, if_match=True),
    Operation("POST", f"{S}/sessions", "session_start", "Start a session", 201),
    Operation("GET", f"{S}/sessions", "session_list", "Sessions, most recent first"),
    Operation("GET", f"{S}/sessions/{{session}}", "session_show", "One session"),
    Operation("POST", f"{S}/sessions/{{session}}/checkpoints", "session_checkpoint",
              "Add a checkpoint to a session", 201),
    Operation("POST", f"{S}/sessions/{{session}}/handoff", "session_handoff",
              "Close a session with a handoff"),
    Operation("GET", f"{S}/brief", "brief", "The start-of-session brief"),
    Operation("GET", f"{S}/tasks", "task_list", "Tasks"),
    Operation("POST", f"{S}/tasks", "task_add", "Add a task", 201),
    Operation("GET", f"{S}/tasks/{{task}}", "task_show", "One task"),
    Operation("POST", f"{S}/tasks/{{task}}/claim", "task_claim", "Claim a task (a lease)"),
    Operation("POST", f"{S}/tasks/{{task}}/checkpoint", "task_checkpoint",
              "Note progress on a task you hold (extends the lease)"),
    Operation("POST", f"{S}/tasks/{{task}}/complete", "task_complete", "Complete a task"),
    Operation("POST", f"{S}/tasks/{{task}}/release", "task_release", "Give a task up"),
    Operation("GET", f"{S}/decisions", "decision_list", "Decision records"),
    Operation("POST", f"{S}/decisions", "decision_record", "Record a decision", 201),
    Operation("GET", f"{S}/decisions/{{decision}}", "decision_show", "One decision"),
]


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


def routes(api: Api) -> list[Route]:
    """A route per operation of the table."""

    def endpoint(operation: Operation) -> Callable[[Request], Any]:
        allowed = {name: name for name in operation.inputs()}

        @guarded
        async def handle(request: Request) -> Response:
            if operation.source == "query":
                fields = _gather(operation, request, query(request, allowed))
                result = await api.execute(request, operation.op, fields, lax=True)
            else:
                query(request, {})
                fields = _gather(operation, request, await json_object(request, api.max_json))
                if operation.if_match:
                    expect = preconditions(request, bool(fields.get("force")))
                    result = await versioned(api, request, operation.op, fields, expect)
                else:
                    result = await api.execute(request, operation.op, fields)
            return JSONResponse(result, operation.status)

        return handle

    return [Route(op.path, endpoint(op), methods=[op.method]) for op in OPERATIONS]
