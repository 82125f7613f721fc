"""``GET /v1/openapi.json``: the OpenAPI 3.1 document, generated.

Parameters and bodies come from the ops' request models (their JSON schemas, whose
patterns the models also check: control/protocol/base.py) and their declared endpoints
(control/ops/registry.py, control/http/op_routes.py); every request model is a
component schema, and each operation names its protocol op (``x-memfs-op``). The file
and search endpoints' HTTP-level parts (raw bodies, paths within a store, globs,
headers, the rg flags) are described here from the rules that enforce them
(memfs/store/fs/paths.py, memfs/store/fs/globs.py, control/http/preconditions.py,
jail/rg_args.py). Every status an operation can answer is declared, each error with the
problem+json schema whose ``code`` lists memfs/errors.py's codes.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter

from memfs.control.http import preconditions
from memfs.control.http.files import GLOB_CHARS
from memfs.control.http.op_routes import Operation, operations
from memfs.control.http.problems import STATUS
from memfs.control.http.recall import openapi_parameters as recall_parameters
from memfs.control.ops import registry
from memfs.control.ops.storage import SED_PATTERN
from memfs.control.protocol.base import MAX_ARG_LEN, MAX_ARGS, StoreName
from memfs.jail import rg_args, rg_json
from memfs.store.fs.paths import (
    REL_PATH_CHARS,
    glob_pattern,
    printable_class,
    rel_path_pattern,
)

PROBLEM = {"$ref": "#/components/schemas/Problem"}
MATCH = {"$ref": "#/components/schemas/Match"}
FILE_PATH = {"$ref": "#/components/schemas/FilePath"}
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
    "404": "not_found", "409": "conflict, lease_held, lease_lost or closed",
    "413": "too_large",
    "431": "head_too_large: the request line and headers are longer than the listener "
           "takes (max_head_bytes)",
    "500": "internal: a failure of memfs itself (logged)", "503": "busy: retry shortly",
    "501": "unavailable: search and sed edits, where the kernel lacks what the jail needs",
    "507": "no_space: the memory's disk is full",
}
ETAG = {"ETag": {"description": "the blake3 digest, quoted", "required": True,
                 "schema": {"type": "string", "pattern": '^"[0-9a-f]{64}"$'}}}
SEEN = {"X-Memfs-Seen": {"description": "the digest your agent last read or wrote "
                                        "(empty: none)", "required": True,
                         "schema": {"type": "string", "pattern": "^([0-9a-f]{64})?$"}}}
RECORD = {"name": "record", "in": "query", "required": False, "schema": {"type": "boolean"},
          "description": "false: the current version's bytes, recorded as nothing (a "
                         "remote mount's scan); a HEAD or ?at= records nothing anyway"}
_TIMES = {"mtime_ns": {"type": "integer"}, "ctime_ns": {"type": "integer"}}
_ENTRY = {"type": "object", "required": ["name", "dir", "size", "mtime_ns", "ctime_ns"],
          "properties": {"name": {"type": "string"}, "dir": {"type": "boolean"},
                         "size": {"type": "integer", "minimum": 0}, **_TIMES}}
JSON_RESULT = {"application/json": {"schema": {"type": "object"}}}
IF_MATCH = ('"DIGEST" (the ETag you read; several, comma-separated: any of them) or *: '
            "change the file only if it is at that version (*: if it exists), else 412. "
            "Compared strongly: a weak tag (W/...) never matches. It is checked together "
            "with your agent's own record of what it last read, which *, or a tag you did "
            "not read, does not replace (force skips only that record)")
IF_NONE_MATCH = ("*: change the file only if it does not exist (create only), else 412; "
                 "or tags: only if it is at none of those versions (weak comparison)")


def _codes(status: str) -> list[str]:
    """The codes (problem types) an answer of ``status`` carries: its rows of
    memfs/errors.py; 412 is a conflict with the request's own If-Match or
    If-None-Match."""
    if status == "412":
        return ["conflict"]
    return [code for code, number in STATUS.items() if str(number) == status]


def _errors(*extra: tuple[str, str], conditional: bool = False, head: bool = False
            ) -> dict[str, Any]:
    """The error answers of an operation: each status with the problem types it
    carries (``head``: a HEAD's, which have no body)."""
    described = {**_ERRORS, **dict(extra)}
    if conditional:
        described["412"] = "If-Match or If-None-Match does not hold: nothing was changed"
    answers: dict[str, Any] = {}
    for status, text in sorted(described.items()):
        codes = _codes(status)
        answers[status] = {"description": text}
        if not head:
            answers[status]["content"] = {"application/problem+json": {"schema": {
                "allOf": [PROBLEM, {"properties": {
                    "status": {"const": int(status)}, "code": {"enum": codes},
                    "type": {"enum": [f"urn:memfs:problem:{code}" for code in codes]}}}]}}}
    return answers


def _model_name(op: str) -> str:
    return registry.op(op).request.__name__


def _property(op: str, field: str) -> dict[str, Any]:
    schema = registry.op(op).request.model_json_schema()
    return dict(schema.get("properties", {}).get(field, {}))


def _present(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema for a value that is given (a parameter cannot be null)."""
    branches = [b for b in schema.get("anyOf", []) if b.get("type") != "null"]
    if len(branches) == 1:
        kept = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        return {**kept, **branches[0]}
    return schema


def _path_param(name: str, op: str | None = None) -> dict[str, Any]:
    if name == "store":
        schema = TypeAdapter(StoreName).json_schema()
    elif name == "path":
        schema = FILE_PATH
    else:  # a field of the op's model: a task, session or decision id
        assert op is not None
        schema = _present(_property(op, name))
    return {"name": name, "in": "path", "required": True, "schema": schema}


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
            prop: dict[str, Any] = {**FILE_PATH}
            if field not in required:  # empty or left out: the whole store
                prop = {"anyOf": [FILE_PATH, {"type": "string", "maxLength": 0}],
                        "description": "a file or folder of the store (empty or left "
                                       "out: the whole store)"}
        else:
            prop = _property(operation.op, field)
        inputs[name] = (prop, field in required)
    spec: dict[str, Any] = {
        "summary": operation.summary,
        "operationId": operation.op,
        "x-memfs-op": operation.op,
        "x-memfs-request": {"$ref": f"#/components/schemas/{_model_name(operation.op)}"},
        "parameters": [_path_param(name, operation.op) for name in operation.params()],
        "responses": {str(operation.status): {
            "description": f"the result of the {operation.op} op",
            "content": JSON_RESULT},
            **_errors(*_own_errors(operation.op), conditional=operation.conditional)},
    }
    if operation.source == "query":
        spec["parameters"] += [{"name": name, "in": "query", "required": needed,
                                "schema": _present(prop)}
                               for name, (prop, needed) in inputs.items()]
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


def _own_errors(op: str) -> tuple[tuple[str, str], ...]:
    """The error answers only ``op`` gives."""
    if op == "mirror_push":
        return (("502", "mirror_failed: a mirror is not up to date after the push (its "
                 "state and last error in details)"),)
    return ()


def _header(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description,
            "schema": {"type": "string", "pattern": preconditions.PATTERN}}


def _conditions() -> list[dict[str, Any]]:
    """If-Match and If-None-Match of a change (control/http/preconditions.py)."""
    return [_header("If-Match", IF_MATCH), _header("If-None-Match", IF_NONE_MATCH)]


def _query(name: str, op: str, field: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False,
            "schema": _present(_property(op, field))}


def _file_path_schema() -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": REL_PATH_CHARS,
            "pattern": rel_path_pattern(),
            "description": "a path within the store: at most 63 names deep (64 with the "
                           "store), names of printable characters, none empty, '.' or "
                           "'..', joined by '/' (the server counts UTF-8 bytes: 255 a "
                           "name, 4096 with the store; these bounds in characters always "
                           "fit)"}


def _glob_schema() -> dict[str, Any]:
    # what the files endpoint checks (control/http/files.py, `glob_pattern`): no range
    # inside a bracket expression ([z-a] is refused, which no pattern can see)
    return {"type": "string", "maxLength": GLOB_CHARS, "pattern": glob_pattern(),
            "description": "relative to the store: names (1-63 characters, not '.' or "
                           "'..') joined by '/', with *, ?, [...] (without ranges here) "
                           "and ** across folders"}


def _search_parameter() -> dict[str, Any]:
    """The search's query parameters as one form-exploded object: ``pattern`` (with
    optional ``flag`` and ``path``) or ``arg`` (a whole rg command line), or ``q`` (ranked
    recall, with optional ``store``, ``limit`` and ``page``): one of the three."""
    printable = printable_class()
    # STORE[/PATH] as jail/rg_args.py takes it after "--": relative, no '..', a store
    where = r"(?!/)(?!(?:.*/)?\.\.(?:/|$))(?!(?:\.?/)*\.?$)"
    path = {"type": "string", "maxLength": MAX_ARG_LEN, "pattern": f"^{where}[{printable}]+$"}
    # the switches rg_args allows (flags with a value are taken too, as --name=VALUE,
    # but each value has rules of its own: the schema leaves them out)
    switches = sorted({*rg_args.SWITCHES,
                       *(f"-{short}" for short, name in rg_args.SHORT.items()
                         if name in rg_args.SWITCHES)} - set(rg_args.REFUSED))
    flag = {"type": "string", "enum": switches}
    positional = {"type": "string", "maxLength": MAX_ARG_LEN,
                  "pattern": f"^(?!-){where}[{printable}]+$"}
    many = {"type": "array", "maxItems": MAX_ARGS}
    # ranked recall (?q=, control/http/recall.py) takes its own parameters, and only them
    recall = {p["name"]: {**p["schema"], "description": p["description"]}
              for p in recall_parameters()}
    schema: dict[str, Any] = {
        "type": "object", "additionalProperties": False,
        "properties": {
            **recall,
            "pattern": {"type": "string", "maxLength": MAX_ARG_LEN, "pattern": "^[^\\u0000]*$",
                        "description": "a ripgrep regex"},
            "flag": {**many, "items": flag, "description": "an rg flag (repeat)"},
            "path": {**many, "items": path, "description": "STORE[/PATH] (repeat)"},
            "arg": {**many, "minItems": 1, "items": {"anyOf": [flag, positional]},
                    "contains": positional,
                    "description": "instead of pattern: a whole rg command line (repeat): "
                                   "flags, the pattern, then STORE[/PATH]s"},
            "format": _present(_property("search", "format")),
        },
    }
    def none_of(*names: str) -> dict[str, Any]:
        return {"not": {"anyOf": [{"required": [name]} for name in names]}}

    schema["oneOf"] = [
        {"required": ["pattern"], **none_of("arg", *recall)},
        {"required": ["arg"], **none_of("pattern", "flag", "path", *recall)},
        {"required": ["q"], **none_of("pattern", "arg", "flag", "path", "format")},
    ]
    return {"name": "search", "in": "query", "required": True, "style": "form",
            "explode": True, "schema": schema}


def _search_results() -> dict[str, Any]:
    """What a 200 of /v1/search holds: rg's text (format text), its matches (format
    json: the Match schema, jail/rg_json.py) or recall's hits (q)."""
    ripgrep = {"exit_code": {"type": "integer", "enum": [0, 1, 2],
                             "description": "rg's: 0 matches, 1 none, 2 errors (stderr)"},
               "truncated": {"type": "boolean", "description": "the output limit was "
                             "reached: some of the output or matches are left out"},
               "stderr": {"type": "string"}}
    text = {"type": "object", "properties": {"output": {"type": "string"}, **ripgrep},
            "required": ["output", *ripgrep]}
    matches = {"type": "object",
               "properties": {"matches": {"type": "array", "items": MATCH}, **ripgrep},
               "required": ["matches", *ripgrep]}
    recalled = {"type": "object", "properties": {"hits": {"type": "array"}},
                "required": ["hits", "next_page"]}
    return {"anyOf": [text, matches, recalled]}


def _file_operations() -> dict[str, dict[str, Any]]:
    raw_in = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
    raw_out = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
    location = {"Location": {"description": "the file's URL, percent-encoded",
                             "required": True, "schema": {"type": "string"}}}
    params = [_path_param("store"), _path_param("path")]
    force = _query("force", "write", "force")
    not_modified = {"description": "not modified: If-None-Match names this version",
                    "headers": ETAG}

    def ref(op: str) -> dict[str, Any]:
        return {"x-memfs-op": op,
                "x-memfs-request": {"$ref": f"#/components/schemas/{_model_name(op)}"}}

    def written(what: str) -> dict[str, Any]:
        return {"description": what, "content": JSON_RESULT, "headers": ETAG}

    script = {"type": "string", "maxLength": 65536, "pattern": SED_PATTERN,
              "description": "a GNU sed script (no control characters but tab and "
                             "newline: write them as sed escapes)"}
    sed = {"type": "array", "minItems": 1, "maxItems": MAX_ARGS, "items": script}
    return {
        "get": {"summary": "The file's bytes; records the version as seen (like a read)",
                "operationId": "read", **ref("read"),
                "parameters": [*params, _query("at", "show", "rev"), RECORD,
                               _header("If-None-Match", "the ETag you have (or *): 304 "
                                       "when the file is at that version")],
                "responses": {"200": {"description": "the bytes", "content": raw_out,
                                      "headers": {**ETAG, **SEEN}},
                              "304": not_modified, **_errors()}},
        "head": {"summary": "The file's headers, as GET (a stat: records nothing)",
                 "operationId": "stat", **ref("stat"),
                 "parameters": [*params, _query("at", "show", "rev"), RECORD,
                                _header("If-None-Match", "as for GET")],
                 "responses": {"200": {"description": "headers only",
                                       "headers": {**ETAG, **SEEN}},
                               "304": not_modified, **_errors(head=True)}},
        "put": {"summary": "Replace or create the file (version-checked)",
                "operationId": "write", **ref("write"),
                "parameters": [*params, force, *_conditions()],
                # no body is no bytes: an empty file (as Content-Length: 0)
                "requestBody": {"required": False, "content": raw_in,
                                "description": "the file's bytes (none: an empty file)"},
                "responses": {"200": written("replaced (or unchanged: it held this already)"),
                              "201": {**written("created"),
                                      "headers": {**ETAG, **location}},
                              **_errors(conditional=True)}},
        "patch": {"summary": "Append to the file, or edit it with GNU sed (jailed)",
                  "operationId": "write_edit", **ref("write"),
                  "parameters": [*params, *_conditions()],
                  "requestBody": {"required": True, "content": {"application/json": {
                      "schema": {"type": "object", "additionalProperties": False,
                                 "properties": {"append": {"type": "string"},
                                                "sed": {"oneOf": [script, sed]},
                                                "force": {"type": "boolean"}},
                                 "oneOf": [{"required": ["append"]},
                                           {"required": ["sed"]}]}}}},
                  "responses": {"200": written("written (or unchanged)"),
                                "201": written("created by an append"),
                                **_errors(conditional=True)}},
        "delete": {"summary": "Delete the file (version-checked)", "operationId": "delete",
                   **ref("delete"), "parameters": [*params, force, *_conditions()],
                   "responses": {"200": {"description": "deleted", "content": JSON_RESULT},
                                 **_errors(conditional=True)}},
    }


def _links(created: Operation) -> dict[str, Any]:
    """What a record made by ``created`` (a POST answered 201 with the record's ``id``)
    leads to: every operation under its collection's path, the new record's id in the
    first parameter after it (so a client, or schemathesis, need not guess which
    field of the body names it)."""
    if created.method != "POST" or created.status != 201:
        return {}
    prefix = created.path + "/{"
    links = {}
    for other in operations():
        if not other.path.startswith(prefix):
            continue
        named = other.path[len(prefix):].split("}", 1)[0].split(":")[0]
        links[other.op] = {"operationId": other.op, "parameters": {
            name: "$response.body#/id" if name == named else f"$request.path.{name}"
            for name in other.params()}}
    return links


def _store_links(paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What GET /v1/stores leads to: every operation of one store (its path has no
    other parameter, or only the file's), with the first store listed."""
    links = {}
    for path, methods in paths.items():
        named = [part for part in path.split("/") if part.startswith("{")]
        if not named or named[0] != "{store}" or set(named) - {"{store}", "{path}"}:
            continue
        for spec in methods.values():
            links[spec["operationId"]] = {"operationId": spec["operationId"], "parameters": {
                "store": "$response.body#/stores/0/name"}}
    return links


@functools.cache
def document() -> dict[str, Any]:
    """The whole OpenAPI document (built once)."""
    paths: dict[str, dict[str, Any]] = {
        "/v1/stores": {"get": {"summary": "Your stores, with your access",
                               "operationId": "stores", "x-memfs-op": "whoami",
                               "responses": {"200": {"description": "stores",
                                                     "content": JSON_RESULT}, **_errors()}}},
        "/v1/stores/{store}/files": {"get": {
            "summary": "Files of the store (STORE/PATH), by glob", "operationId": "list",
            "x-memfs-op": "list",
            "parameters": [_path_param("store"),
                           {"name": "glob", "in": "query", "required": False,
                            "schema": {"type": "array", "maxItems": MAX_ARGS,
                                       "items": {"$ref": "#/components/schemas/Glob"}}}],
            "responses": {"200": {"description": "paths", "content": JSON_RESULT},
                          **_errors()}}},
        "/v1/stores/{store}/files/{path}": _file_operations(),
        "/v1/stores/{store}/dir": {"get": {
            "summary": "One folder as the mount lists it: files and folders with sizes "
                       "and times (records nothing; for remote mounts)",
            "operationId": "folder",
            "parameters": [_path_param("store"),
                           {"name": "path", "in": "query", "required": False,
                            "description": "the folder within the store (default: its top)",
                            "schema": FILE_PATH}],
            "responses": {"200": {"description": "the folder's times and entries",
                                  "content": {"application/json": {"schema": {
                                      "type": "object",
                                      "required": ["mtime_ns", "ctime_ns", "entries"],
                                      "properties": {**_TIMES, "entries": {
                                          "type": "array", "items": _ENTRY}}}}}},
                          **_errors()}}},
        "/v1/events": {"get": {
            "summary": "Your stores' changes as server-sent events (one stream per remote "
                       "mount): commit {store, path, file, folder}, resync, end",
            "operationId": "events",
            "responses": {"200": {"description": "an endless text/event-stream",
                                  "content": {"text/event-stream": {
                                      "schema": {"type": "string"}}}},
                          **_errors(("503", "busy: too many streams; retry shortly"))}}},
        "/v1/search": {"get": {
            "summary": "Search with jailed ripgrep; with q, ranked recall (the recall op: "
                       "files best first, a page at a time)", "operationId": "search",
            "x-memfs-op": "search",
            "x-memfs-request": {"$ref": f"#/components/schemas/{_model_name('search')}"},
            "parameters": [_search_parameter()],
            "responses": {"200": {"description": "ripgrep: output (format text) or matches "
                                                 "(format json), exit_code, truncated, "
                                                 "stderr; recall (q): hits, next_page",
                                  "content": {"application/json": {
                                      "schema": _search_results()}}},
                          **_errors()}}},
    }
    for operation in operations():
        spec = _operation(operation)
        links = _links(operation)
        if links:
            spec["responses"][str(operation.status)]["links"] = links
        paths.setdefault(_openapi_path(operation.path), {})[operation.method.lower()] = spec
    paths["/v1/stores"]["get"]["responses"]["200"]["links"] = _store_links(paths)
    match = TypeAdapter(rg_json.Match).json_schema(ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = {"Problem": _PROBLEM_SCHEMA, "FilePath": _file_path_schema(),
                               "Glob": _glob_schema(), **match.pop("$defs", {}), "Match": match}
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
                                "Bearer TOKEN (memfs token create). Changes take If-Match "
                                "and If-None-Match (RFC 9110): " + IF_MATCH + "."},
        "components": {"schemas": schemas, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
