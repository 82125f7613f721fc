"""``GET /v1/openapi.json``: the OpenAPI 3.1 document, generated.

Parameters and bodies come from the ops' request models (their JSON schemas) and
their declared endpoints (control/ops/registry.py, control/http/op_routes.py); every
request model is a component schema, and each operation names its protocol op (``x-memfs-op``). Only
the file endpoints' HTTP-level parts (raw bodies, ETag headers) are described here.
"""

from __future__ import annotations

import functools
from typing import Any

from control.http import preconditions
from control.http.op_routes import Operation, operations
from control.http.problems import STATUS
from control.ops import registry

PROBLEM = {"$ref": "#/components/schemas/Problem"}
_PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details with memfs's error code",
    "properties": {
        "type": {"type": "string"}, "title": {"type": "string"},
        "status": {"type": "integer"}, "detail": {"type": "string"},
        "code": {"type": "string", "enum": list(STATUS)},
        "details": {"type": "object"},
    },
    "required": ["type", "title", "status", "detail", "code", "details"],
}
_ERRORS = {
    "400": "invalid", "401": "no valid bearer token", "403": "permission_denied",
    "404": "not_found", "409": "conflict, lease_held or lease_lost", "413": "too_large",
    "503": "busy: retry shortly", "507": "no_space: the memory's disk is full",
}


def _errors(*extra: tuple[str, str]) -> dict[str, Any]:
    described = {**_ERRORS, **dict(extra)}
    return {status: {"description": text,
                     "content": {"application/problem+json": {"schema": PROBLEM}}}
            for status, text in sorted(described.items())}


def _model_name(op: str) -> str:
    return registry.op(op).request.__name__


def _property(op: str, field: str) -> dict[str, Any]:
    schema = registry.op(op).request.model_json_schema()
    return dict(schema.get("properties", {}).get(field, {}))


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _openapi_path(path: str) -> str:
    return path.replace(":path}", "}")


def _operation(operation: Operation) -> dict[str, Any]:
    model = registry.op(operation.op).request
    required = set(model.model_json_schema().get("required", []))
    inputs = {}
    for name in operation.inputs():
        field = operation.renames.get(name, name)
        if field == "file":  # joined with the store into the model's path
            field = "path"
            prop = {"type": "string", "description": "a file or folder within the store"}
        else:
            prop = _property(operation.op, field)
        inputs[name] = (prop, field in required)
    spec: dict[str, Any] = {
        "summary": operation.summary,
        "operationId": operation.op,
        "x-memfs-op": operation.op,
        "x-memfs-request": {"$ref": f"#/components/schemas/{_model_name(operation.op)}"},
        "parameters": [_path_param(name) for name in operation.params()],
        "responses": {str(operation.status): {
            "description": f"the result of the {operation.op} op",
            "content": {"application/json": {"schema": {"type": "object"}}}},
            **_errors()},
    }
    if operation.source == "query":
        spec["parameters"] += [{"name": name, "in": "query", "required": needed,
                                "schema": prop} for name, (prop, needed) in inputs.items()]
    else:
        spec["requestBody"] = {"required": any(needed for _, needed in inputs.values()),
                               "content": {"application/json": {"schema": {
                                   "type": "object", "additionalProperties": False,
                                   "properties": {n: prop for n, (prop, _) in inputs.items()},
                                   "required": [n for n, (_, need) in inputs.items() if need],
                               }}}}
    if operation.conditional:
        spec["parameters"] += _conditions()
    return spec


def _header(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description,
            "schema": {"type": "string", "pattern": preconditions.PATTERN}}


def _conditions() -> list[dict[str, Any]]:
    """If-Match and If-None-Match of a change (control/http/preconditions.py)."""
    return [_header("If-Match", IF_MATCH), _header("If-None-Match", IF_NONE_MATCH)]


IF_MATCH = ('"DIGEST" (the ETag you read; several, comma-separated: any of them) or *: '
            "change the file only if it is at that version (*: if it exists), else 412. "
            "Compared strongly: a weak tag (W/...) never matches. It is checked together "
            "with your agent's own record of what it last read, which *, or a tag you did "
            "not read, does not replace (force skips only that record)")
IF_NONE_MATCH = ("*: change the file only if it does not exist (create only), else 412; "
                 "or tags: only if it is at none of those versions (weak comparison)")


def _query(name: str, op: str, field: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": _property(op, field)}


def _file_operations() -> dict[str, dict[str, Any]]:
    raw = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
    json_result = {"application/json": {"schema": {"type": "object"}}}
    etag = {"ETag": {"description": "the blake3 digest, quoted", "schema": {"type": "string"}}}
    params = [_path_param("store"), _path_param("path")]
    force = _query("force", "write", "force")

    def ref(op: str) -> dict[str, Any]:
        return {"x-memfs-op": op,
                "x-memfs-request": {"$ref": f"#/components/schemas/{_model_name(op)}"}}

    return {
        "get": {"summary": "The file's bytes; records the version as seen (like a read)",
                "operationId": "read", **ref("read"),
                "parameters": [*params, _query("at", "show", "rev"),
                               _header("If-None-Match", "the ETag you have (or *): 304 "
                                       "when the file is at that version")],
                "responses": {"200": {"description": "the bytes", "content": raw,
                                      "headers": etag},
                              "304": {"description": "not modified"}, **_errors()}},
        "head": {"summary": "The file's ETag and size (a stat: records nothing)",
                 "operationId": "stat", **ref("stat"), "parameters": params,
                 "responses": {"200": {"description": "headers only", "headers": etag},
                               **_errors()}},
        "put": {"summary": "Replace or create the file (version-checked)",
                "operationId": "write", **ref("write"),
                "parameters": [*params, force, *_conditions()],
                "requestBody": {"required": True, "content": raw},
                "responses": {"200": {"description": "replaced", "content": json_result,
                                      "headers": etag},
                              "201": {"description": "created", "content": json_result,
                                      "headers": etag},
                              **_errors(("412", "If-Match or If-None-Match failed"))}},
        "patch": {"summary": "Append to the file, or edit it with GNU sed (jailed)",
                  "operationId": "write_edit", **ref("write"),
                  "parameters": [*params, *_conditions()],
                  "requestBody": {"required": True, "content": {"application/json": {
                      "schema": {"type": "object", "additionalProperties": False,
                                 "properties": {"append": {"type": "string"},
                                                "sed": {"oneOf": [
                                                    {"type": "string"},
                                                    {"type": "array",
                                                     "items": {"type": "string"}}]},
                                                "force": {"type": "boolean"}}}}}},
                  "responses": {"200": {"description": "written", "content": json_result},
                                **_errors(("412", "If-Match failed"))}},
        "delete": {"summary": "Delete the file (version-checked)", "operationId": "delete",
                   **ref("delete"), "parameters": [*params, force, *_conditions()],
                   "responses": {"200": {"description": "deleted", "content": json_result},
                                 **_errors(("412", "If-Match failed"))}},
    }


@functools.cache
def document() -> dict[str, Any]:
    """The whole OpenAPI document (built once)."""
    paths: dict[str, dict[str, Any]] = {
        "/v1/stores": {"get": {"summary": "Your stores, with your access",
                               "operationId": "stores", "x-memfs-op": "whoami",
                               "responses": {"200": {"description": "stores"}, **_errors()}}},
        "/v1/stores/{store}/files": {"get": {
            "summary": "Files of the store (STORE/PATH), by glob", "operationId": "list",
            "x-memfs-op": "list",
            "parameters": [_path_param("store"),
                           {"name": "glob", "in": "query", "required": False,
                            "schema": {"type": "array", "items": {"type": "string"}},
                            "description": "relative to the store; ** spans folders"}],
            "responses": {"200": {"description": "paths"}, **_errors()}}},
        "/v1/stores/{store}/files/{path}": _file_operations(),
        "/v1/search": {"get": {
            "summary": "Search with jailed ripgrep", "operationId": "search",
            "x-memfs-op": "search",
            "x-memfs-request": {"$ref": f"#/components/schemas/{_model_name('search')}"},
            "parameters": [
                {"name": "pattern", "in": "query", "schema": {"type": "string"}},
                *({"name": name, "in": "query", "schema": {"type": "array",
                                                           "items": {"type": "string"}},
                   "description": text} for name, text in (
                    ("flag", "an rg flag (repeat)"), ("path", "STORE[/PATH] (repeat)"),
                    ("arg", "instead of pattern: a whole rg command line (repeat)")))],
            "responses": {"200": {"description": "output, exit_code, truncated, stderr"},
                          **_errors()}}},
    }
    for operation in operations():
        paths.setdefault(_openapi_path(operation.path), {})[operation.method.lower()] = \
            _operation(operation)
    schemas: dict[str, Any] = {"Problem": _PROBLEM_SCHEMA}
    for op in sorted(registry.agent_ops()):
        model = registry.op(op).request
        schema = model.model_json_schema(
            ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return {
        "openapi": "3.1.0",
        "info": {"title": "memfs", "version": "1",
                 "description": "Shared memory for agents: version-checked files, history, "
                                "sessions, tasks and decisions. Identity: Authorization: "
                                "Bearer TOKEN (memfs token create)."},
        "components": {"schemas": schemas, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
