"""The request models by op, and building one from plain fields: how the in-process
transports (the HTTP API, MCP over HTTP) make the very requests the socket decodes.

No I/O. `build_request` validates with the same pydantic models as
``control.protocol.decode_request`` and fails the same way: ProtocolError with code
``invalid`` and a message naming the bad field.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from control import protocol as p
from control.protocol.tokens import TOKEN_OPS


def _models() -> dict[str, type[BaseModel]]:
    union = typing.get_args(p.Request)[0]
    found = {}
    for model in typing.get_args(union):
        (op,) = typing.get_args(model.model_fields["op"].annotation)
        found[op] = model
    return found


REQUEST_MODELS: dict[str, type[BaseModel]] = _models()
# the ops an agent may send through an in-process transport (tokens: socket only)
AGENT_OPS = frozenset(op for op in REQUEST_MODELS if op not in TOKEN_OPS)
# fields a transport fills in itself, never taken from a caller
RESERVED_FIELDS = frozenset({"op", "id", "as_agent"})


def problems(error: ValidationError) -> str:
    """The errors of a validation as one line: ``field: message; ...``."""
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'request'}: "
        f"{item['msg'].removeprefix('Value error, ')}"
        for item in error.errors()
    )


def build_request(op: str, fields: Mapping[str, Any], *, lax: bool = False) -> p.Request:
    """The request model of ``op`` with ``fields`` (``op`` is set here); ``lax``
    converts text such as query parameters ("3", "true") to the field's type, as
    strict JSON on the socket would not. Raises ProtocolError (``invalid``)."""
    model = REQUEST_MODELS.get(op)
    if model is None:
        raise p.ProtocolError("invalid", f"unknown op {op!r}")
    try:
        request = model.model_validate({**fields, "op": op}, strict=False if lax else None)
    except ValidationError as error:
        raise p.ProtocolError("invalid", f"bad {op} request: {problems(error)}") from None
    return typing.cast(p.Request, request)
