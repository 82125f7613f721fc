"""HTTP errors as RFC 9457 problem details, and the small request helpers every
endpoint shares (bounded bodies, checked query parameters, the per-request guard).

A problem is ``application/problem+json``: ``type``, ``title``, ``status``,
``detail``, plus memfs's ``code`` (the protocol error code) and ``details`` (what
control.ops.dispatcher's `describe` gives every transport). Each code's status and
title are its row of memfs/errors.py (no_space: 507 Insufficient Storage, RFC 4918);
a conflict is 412 instead when the request's own If-Match or If-None-Match failed
(the engine's ConditionFailed), and busy carries Retry-After.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from memfs.control import protocol as p
from memfs.control.ops.dispatcher import describe
from memfs.errors import ERRORS
from memfs.store.errors import ConditionFailed, TooLarge

log = logging.getLogger("memfs.http")

PROBLEM_JSON = "application/problem+json"
# each code's status and title: its row of memfs/errors.py
STATUS = {code: kind.status for code, kind in ERRORS.items() if kind.status is not None}
TITLES = {code: kind.title for code, kind in ERRORS.items() if kind.title is not None}


class Problem(Exception):
    """An error answer decided by the HTTP layer itself (code, message, status)."""

    def __init__(self, code: str, message: str, status: int | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or STATUS.get(code, 500)
        self.headers = dict(headers or {})


def problem(code: str, message: str, details: Mapping[str, Any] | None = None, *,
            status: int | None = None, headers: Mapping[str, str] | None = None) -> Response:
    """The problem+json response for a memfs error code."""
    status = status or STATUS.get(code, 500)
    body = {
        "type": f"urn:memfs:problem:{code}",
        "title": "Precondition failed" if status == 412 else TITLES.get(code, code),
        "status": status,
        "detail": message,
        "code": code,
        "details": dict(details or {}),
    }
    extra = dict(headers or {})
    if code == "busy":
        extra.setdefault("Retry-After", "1")
    return Response(json.dumps(body, ensure_ascii=False), status, extra,
                    media_type=PROBLEM_JSON)


def problem_for(error: BaseException) -> Response:
    """The response for an exception an operation raised (an unexpected one is
    logged and answered 500; a client that went away is raised again); a failed
    If-Match / If-None-Match (ConditionFailed) is 412."""
    if isinstance(error, Problem):
        return problem(error.code, error.message, status=error.status, headers=error.headers)
    if isinstance(error, ClientDisconnect):
        raise error  # no one to answer: not an internal error (control/http/server.py)
    described = describe(error)
    if described is None:
        log.error("internal error answering an HTTP request", exc_info=error)
        return problem("internal", f"internal error: {type(error).__name__}")
    code, message, details = described
    status = 412 if isinstance(error, ConditionFailed) else None
    return problem(code, message, details, status=status)


Endpoint = Callable[[Request], Awaitable[Response]]


def guarded(endpoint: Endpoint) -> Endpoint:
    """Every exception of ``endpoint`` becomes a problem response: one request can
    never take the listener down."""

    @functools.wraps(endpoint)
    async def wrapper(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as error:
            return problem_for(error)

    return wrapper


DRAIN_LIMIT = 64 * 1024 * 1024  # an oversized body is read and dropped up to this


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with TooLarge (413) past ``limit`` bytes; nothing
    past the limit is kept. The rest of an oversized body is read and dropped (up to
    DRAIN_LIMIT) so that a client still sending it gets the 413 instead of a reset."""
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise Problem("invalid", "Content-Length is not a number")
    if declared is not None and int(declared) > DRAIN_LIMIT:
        raise TooLarge(f"the body is {declared} bytes; the limit is {limit}")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total <= limit:
            chunks.append(chunk)
        elif total > DRAIN_LIMIT:
            break
    if total > limit:
        raise TooLarge(f"the body is {'more than ' if total > DRAIN_LIMIT else ''}{total} "
                       f"bytes; the limit is {limit}")
    return b"".join(chunks)


async def json_object(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object ({} for an empty body); 400 otherwise."""
    body = await read_body(request, limit)
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise p.ProtocolError("invalid", "the body is not valid JSON") from None
    if not isinstance(value, dict):
        raise p.ProtocolError("invalid", "the body must be a JSON object")
    return value


def query(request: Request, allowed: Mapping[str, str], *, repeated: frozenset[str] = frozenset()
          ) -> dict[str, Any]:
    """The query parameters renamed by ``allowed`` (REST name -> field name); names in
    ``repeated`` give lists. Unknown or repeated single parameters are 400."""
    fields: dict[str, Any] = {}
    for name in request.query_params:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise p.ProtocolError("invalid", f"unknown query parameter {name!r} (known: "
                                  f"{known})")
        values = request.query_params.getlist(name)
        if name in repeated:
            fields[allowed[name]] = values
        elif len(values) > 1:
            raise p.ProtocolError("invalid", f"query parameter {name!r} given more than once")
        else:
            fields[allowed[name]] = values[0]
    return fields


def flag(value: str | None, name: str) -> bool:
    """A boolean query parameter: true/false, 1/0, yes/no (absent: false)."""
    if value is None:
        return False
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise p.ProtocolError("invalid", f"{name} must be true or false, got {value!r}")
