"""The control-socket wire protocol: JSON lines, one request and one reply per line.

Pure data and parsing, no I/O (the trio loop is in server.py, the client in
client.py). A request is a JSON object with an ``op`` field; the reply is
``{"id": ..., "ok": true, "result": {...}}`` or
``{"id": ..., "ok": false, "error": {"code": CODE, "message": TEXT, "details": {...}}}``.

Content travels as UTF-8 text (``content``) or base64 (``content_b64``) so that
binary files round-trip byte for byte.

What a request line may hold is bounded at decode time, so that no line can make the
decoder, the dispatcher or the reply encoder fail: integer literals of at most
``MAX_INT_DIGITS`` digits (never Python's own int-parsing limit), number literals of
at most ``MAX_NUMBER_CHARS`` characters, no ``NaN``/``Infinity``, no string (key or
value) holding a lone surrogate (``"\\ud800"``: it has no UTF-8 form and could not be
echoed back), nesting at most ``MAX_NESTING`` levels deep. Each is refused as
``invalid``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from control.protocol.base import MAX_ID_CHARS, BaseRequest
from control.protocol.memory import MEMORY_OPS, MEMORY_REQUESTS
from control.protocol.tokens import TOKEN_OPS, TOKEN_REQUESTS
from memfs.errors import ERRORS

# The codes an error reply may carry: the daemon's rows of memfs/errors.py, which says
# what each code means and what every edge makes of it.
ERROR_CODES = tuple(code for code, kind in ERRORS.items() if kind.raised_by == "daemon")

DIGEST_PATTERN = r"^[0-9a-f]{64}$"
# what a connection last saw of a path: a digest, or "absent" (it saw no file there)
EXPECT_PATTERN = r"^(?:[0-9a-f]{64}|absent)$"
MAX_ARGS = 256
MAX_ARG_LEN = 4096
MAX_INT_DIGITS = 20  # up to 10**20: more than any offset, limit or id needs
MAX_NUMBER_CHARS = 64  # a float literal (no field takes one; bounded all the same)
MAX_NESTING = 32  # a request is an object of scalars and lists of strings: depth 2
_SURROGATE = re.compile("[\ud800-\udfff]")


class ProtocolError(Exception):
    """A line that is not a valid request: carries the error code and a message."""

    def __init__(self, code: str, message: str, request_id: int | str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


class EncodeError(Exception):
    """A reply could not be encoded (a value with no JSON or UTF-8 form). The caller
    sends ``fallback_line`` instead, which cannot fail."""


_Request = BaseRequest


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
            try:
                return self.content.encode("utf-8")
            except UnicodeEncodeError:  # decode_request refuses these; kept for safety
                raise ProtocolError("invalid", "content is not valid Unicode text",
                                    self.id) from None
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
    until: Rev | None = None  # a time: only changes at or before it
    # start at this revision instead of the newest (inclusive; needs a store or path):
    # paging, with the revision of the entry after the last one shown
    rev: Rev | None = None
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


class _Refused(ValueError):
    """A number literal or constant refused while parsing; the message says why."""


def _parse_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer has more than {MAX_INT_DIGITS} digits")
    return int(literal)


def _parse_float(literal: str) -> float:
    if len(literal) > MAX_NUMBER_CHARS:
        raise _Refused(f"a number is longer than {MAX_NUMBER_CHARS} characters")
    return float(literal)


def _parse_constant(name: str) -> float:
    raise _Refused(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(
    parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
)


def _check_tree(raw: object) -> str | None:
    """Why the parsed value cannot be a request (too deep, a lone surrogate in a key
    or a string), or None. Iterative: no recursion however the value nests."""
    stack: list[tuple[object, int]] = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                return "a string holds a lone surrogate (not valid Unicode)"
        elif isinstance(value, dict | list):
            if depth > MAX_NESTING:
                return f"request nests deeper than {MAX_NESTING} levels"
            if isinstance(value, dict):
                stack.extend((key, depth) for key in value)
                stack.extend((item, depth + 1) for item in value.values())
            else:
                stack.extend((item, depth + 1) for item in value)
    return None


def _echo_id(value: object) -> int | str | None:
    """The request id to put in an error reply: ``value`` if a valid request could
    carry it (so the reply can always be encoded), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and len(value) <= MAX_ID_CHARS):
        return value
    return None


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def decode_request(line: bytes) -> Request:
    """Parse one line (without its newline) into a request model.

    Raises ProtocolError (code ``invalid``) with a message naming the problem and,
    when the line carried a usable one, the request id; never raises anything else,
    whatever the bytes. A returned request holds only encodable values: echoing any of
    its strings in a reply cannot fail.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("invalid", "request is not valid UTF-8") from None
    try:
        raw = _DECODER.decode(text)
    except _Refused as error:
        raise ProtocolError("invalid", f"request refused: {error}") from None
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise ProtocolError("invalid", "request is not valid JSON") from None
    if not isinstance(raw, dict):
        raise ProtocolError("invalid", "request must be a JSON object")
    problem = _check_tree(raw)
    if problem is not None:
        raise ProtocolError("invalid", f"request refused: {problem}")
    request_id = _echo_id(raw.get("id"))
    op = raw.get("op")
    if not isinstance(op, str) or op not in OPS:
        shown = _short(repr(op))
        raise ProtocolError("invalid", f"unknown op {shown}; known: {', '.join(OPS)}", request_id)
    try:
        return _REQUEST.validate_python(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{_short('.'.join(str(p) for p in item['loc'][1:])) or 'request'}: "
            f"{item['msg'].removeprefix('Value error, ')}"
            for item in error.errors()[:10]
        )
        raise ProtocolError("invalid", f"bad {op} request: {_short(problems, 2000)}",
                            request_id) from None


def encode_ok(request_id: int | str | None, result: dict[str, Any]) -> bytes:
    """One reply line; raises EncodeError (only) if ``result`` has no JSON/UTF-8 form."""
    return _line({"id": request_id, "ok": True, "result": result})


def encode_error(
    request_id: int | str | None, code: str, message: str, details: dict[str, Any] | None = None
) -> bytes:
    """One error reply line; raises EncodeError (only) if a value has no JSON/UTF-8 form
    (never for a request id taken from a decoded request and a plain message)."""
    if code not in ERROR_CODES:
        raise EncodeError(f"unknown error code {code!r}")
    return _line(
        {"id": request_id, "ok": False,
         "error": {"code": code, "message": message, "details": details or {}}}
    )


def fallback_line(request_id: int | str | None = None) -> bytes:
    """A fixed ``internal`` error reply for when a reply could not be encoded; never
    fails (an id that cannot be encoded is replaced by null)."""
    try:
        return _line({"id": _echo_id(request_id), "ok": False, "error": _FALLBACK_ERROR})
    except EncodeError:
        return _FALLBACK_LINE


_FALLBACK_ERROR = {"code": "internal", "message": "the reply could not be encoded",
                   "details": {}}
_FALLBACK_LINE = (
    b'{"id":null,"ok":false,"error":{"code":"internal",'
    b'"message":"the reply could not be encoded","details":{}}}\n'
)


def _line(obj: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\n"
    except (TypeError, ValueError, RecursionError) as error:  # UnicodeEncodeError too
        raise EncodeError(f"reply cannot be encoded: {type(error).__name__}") from None
