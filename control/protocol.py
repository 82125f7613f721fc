"""The control-socket wire protocol: JSON lines, one request and one reply per line.

Pure data and parsing, no I/O (the trio loop is in server.py, the client in
client.py). A request is a JSON object with an ``op`` field; the reply is
``{"id": ..., "ok": true, "result": {...}}`` or
``{"id": ..., "ok": false, "error": {"code": CODE, "message": TEXT, "details": {...}}}``.

Content travels as UTF-8 text (``content``) or base64 (``content_b64``) so that
binary files round-trip byte for byte.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from control.protocol_memory import MEMORY_OPS, MEMORY_REQUESTS
from control.protocol_tokens import TOKEN_OPS, TOKEN_REQUESTS

# Error codes, each mapped to a CLI exit code by the client.
ERROR_CODES = ("conflict", "lease_held", "lease_lost", "permission_denied", "not_found",
               "invalid", "too_large", "internal")

DIGEST_PATTERN = r"^[0-9a-f]{64}$"
# what a connection last saw of a path: a digest, or "absent" (it saw no file there)
EXPECT_PATTERN = r"^(?:[0-9a-f]{64}|absent)$"
MAX_ARGS = 256
MAX_ARG_LEN = 4096


class ProtocolError(Exception):
    """A line that is not a valid request: carries the error code and a message."""

    def __init__(self, code: str, message: str, request_id: int | str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


class _Request(BaseModel):
    # strict: "yes" is not a bool and "3" is not an int on this wire
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: int | str | None = None
    # Act for this agent; only delegate uids may set it.
    as_agent: str | None = Field(default=None, max_length=64)


class ListRequest(_Request):
    op: Literal["list"]
    patterns: list[Annotated[str, Field(max_length=MAX_ARG_LEN)]] = Field(
        default_factory=list, max_length=MAX_ARGS
    )


class ReadRequest(_Request):
    op: Literal["read"]
    path: str = Field(max_length=MAX_ARG_LEN)
    offset: int = Field(default=1, ge=1)  # first line to return, 1-based
    limit: int | None = Field(default=None, ge=1)  # number of lines; None: to the end
    # "text": decoded lines (invalid UTF-8 replaced); "base64": the exact bytes.
    encoding: Literal["text", "base64"] = "text"


class StatRequest(_Request):
    op: Literal["stat"]
    path: str = Field(max_length=MAX_ARG_LEN)


class WriteRequest(_Request):
    op: Literal["write"]
    path: str = Field(max_length=MAX_ARG_LEN)
    content: str | None = None
    content_b64: str | None = None
    sed: list[Annotated[str, Field(max_length=65536)]] | None = Field(
        default=None, min_length=1, max_length=MAX_ARGS
    )
    append: bool = False
    force: bool = False
    # The version this connection last read or wrote, or "absent" when it saw no file
    # there (clients fill it in, never the model): two processes of one agent share
    # its record, this tells them apart.
    expect: str | None = Field(default=None, pattern=EXPECT_PATTERN)

    @model_validator(mode="after")
    def _one_source(self) -> WriteRequest:
        given = [self.content is not None, self.content_b64 is not None, self.sed is not None]
        if sum(given) != 1:
            raise ValueError("give exactly one of content, content_b64, sed")
        if self.sed is not None and self.append:
            raise ValueError("append cannot be combined with a sed script")
        return self

    def data(self) -> bytes:
        """The content bytes (not for sed requests); raises ProtocolError on bad base64."""
        if self.content is not None:
            return self.content.encode("utf-8")
        try:
            return base64.b64decode(self.content_b64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("invalid", "content_b64 is not valid base64", self.id) from None


class DeleteRequest(_Request):
    op: Literal["delete"]
    path: str = Field(max_length=MAX_ARG_LEN)
    force: bool = False
    expect: str | None = Field(default=None, pattern=EXPECT_PATTERN)


class SearchRequest(_Request):
    op: Literal["search"]
    # ripgrep arguments as typed: flags, pattern, optional STORE[/PATH]s
    args: list[Annotated[str, Field(max_length=MAX_ARG_LEN)]] = Field(
        min_length=1, max_length=MAX_ARGS
    )


class WhoamiRequest(_Request):
    op: Literal["whoami"]


# A revision: a commit id (4-40 hex digits), HEAD~N, or a time; checked by the history.
Rev = Annotated[str, Field(min_length=1, max_length=64)]


class LogRequest(_Request):
    op: Literal["log"]
    # STORE or STORE/PATH (a file or folder); None: every readable store with history
    path: str | None = Field(default=None, max_length=MAX_ARG_LEN)
    limit: int = Field(default=20, ge=1, le=10_000)
    since: Rev | None = None  # a time: only changes at or after it
    author: str | None = Field(default=None, max_length=64)
    patch: bool = False  # each entry with its diff


class ShowRequest(_Request):
    """An old version of a file (also of one deleted since), paged like ``read``."""

    op: Literal["show"]
    path: str = Field(max_length=MAX_ARG_LEN)
    rev: Rev
    offset: int = Field(default=1, ge=1)
    limit: int | None = Field(default=None, ge=1)
    encoding: Literal["text", "base64"] = "text"


class DiffRequest(_Request):
    """A unified diff of one file: ``rev`` None = from the version this agent last saw
    to now; ``REV`` = from REV to now; ``REV..REV`` = between two revisions."""

    op: Literal["diff"]
    path: str = Field(max_length=MAX_ARG_LEN)
    rev: str | None = Field(default=None, min_length=1, max_length=130)


class RestoreRequest(_Request):
    """Write the content the file had at ``rev`` back: a version-checked replace."""

    op: Literal["restore"]
    path: str = Field(max_length=MAX_ARG_LEN)
    rev: Rev
    force: bool = False
    expect: str | None = Field(default=None, pattern=EXPECT_PATTERN)


Request = Annotated[
    ListRequest | ReadRequest | StatRequest | WriteRequest | DeleteRequest | SearchRequest
    | WhoamiRequest | LogRequest | ShowRequest | DiffRequest | RestoreRequest
    | MEMORY_REQUESTS | TOKEN_REQUESTS,
    Field(discriminator="op"),
]
_REQUEST = TypeAdapter(Request)
OPS = ("list", "read", "stat", "write", "delete", "search", "whoami", "log", "show", "diff",
       "restore", *MEMORY_OPS, *TOKEN_OPS)


def decode_request(line: bytes) -> Request:
    """Parse one line into a request model; raises ProtocolError (code ``invalid``)
    with a message naming the bad field. Never raises anything else."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("invalid", "request is not valid UTF-8") from None
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ProtocolError("invalid", "request is not valid JSON") from None
    if not isinstance(raw, dict):
        raise ProtocolError("invalid", "request must be a JSON object")
    request_id = raw.get("id") if isinstance(raw.get("id"), int | str) else None
    op = raw.get("op")
    if op not in OPS:
        raise ProtocolError("invalid", f"unknown op {op!r}; known: {', '.join(OPS)}", request_id)
    try:
        return _REQUEST.validate_python(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc'][1:]) or 'request'}: "
            f"{item['msg'].removeprefix('Value error, ')}"
            for item in error.errors()
        )
        raise ProtocolError("invalid", f"bad {op} request: {problems}", request_id) from None


def encode_ok(request_id: int | str | None, result: dict[str, Any]) -> bytes:
    return _line({"id": request_id, "ok": True, "result": result})


def encode_error(
    request_id: int | str | None, code: str, message: str, details: dict[str, Any] | None = None
) -> bytes:
    assert code in ERROR_CODES, code
    return _line(
        {"id": request_id, "ok": False,
         "error": {"code": code, "message": message, "details": details or {}}}
    )


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
