"""The control-socket wire protocol: JSON lines, one request and one reply per line.

Pure data and parsing, no I/O (the trio loop is in control/socket/, the client in
control/client/). A request is a JSON object with an ``op`` field, decoded into the
request model that op declares (control/ops/: every op's model, handler and access);
the reply is
``{"id": ..., "ok": true, "result": {...}}`` or
``{"id": ..., "ok": false, "error": {"code": CODE, "message": TEXT, "details": {...}}}``.

Content travels as UTF-8 text (``content``) or base64 (``content_b64``) so that
binary files round-trip byte for byte (in process, without a line, as bytes).

What a request line may hold is bounded at decode time, so that no line can make the
decoder, the dispatcher or the reply encoder fail: integer literals of at most
``MAX_INT_DIGITS`` digits (never Python's own int-parsing limit), number literals of
at most ``MAX_NUMBER_CHARS`` characters, no ``NaN``/``Infinity``, no string (key or
value) holding a lone surrogate (``"\\ud800"``: it has no UTF-8 form and could not be
echoed back), nesting at most ``MAX_NESTING`` levels deep. Each is refused as
``invalid``.
"""

from __future__ import annotations

import functools
import json
import operator
import re
import typing
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from memfs.control.protocol.base import MAX_ID_CHARS, WIRE, BaseRequest
from memfs.errors import ERRORS

# The codes an error reply may carry: the daemon's rows of memfs/errors.py, which says
# what each code means and what every edge makes of it.
ERROR_CODES = tuple(code for code, kind in ERRORS.items() if kind.raised_by == "daemon")

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


class Codec:
    """Decodes request lines into the models of a set of ops (each model's ``op`` is a
    Literal naming its op; control/ops/registry.py gives every declared one)."""

    def __init__(self, models: Sequence[type[BaseRequest]]) -> None:
        self.ops = tuple(op_of(model) for model in models)
        union = functools.reduce(operator.or_, models)
        self._adapter: TypeAdapter[BaseRequest] = TypeAdapter(
            Annotated[union, Field(discriminator="op")])  # type: ignore[arg-type]

    def decode_request(self, line: bytes) -> BaseRequest:
        """Parse one line (without its newline) into a request model.

        Raises ProtocolError (code ``invalid``) with a message naming the problem and,
        when the line carried a usable one, the request id; never raises anything else,
        whatever the bytes. A returned request holds only encodable values: echoing any
        of its strings in a reply cannot fail.
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
        if not isinstance(op, str) or op not in self.ops:
            shown = _short(repr(op))
            raise ProtocolError("invalid", f"unknown op {shown}; known: {', '.join(self.ops)}",
                                request_id)
        try:
            return self._adapter.validate_python(raw, context=WIRE)
        except ValidationError as error:
            raise ProtocolError(
                "invalid", f"bad {op} request: {_short(problems(error, skip=1), 2000)}",
                request_id) from None


def problems(error: ValidationError, noun: str = "field", *, skip: int = 0) -> str:
    """The errors of a validation as one line in human words, each naming its field
    (``offset must be at least 1; unknown field "x"``; ``noun``: what a field is
    called, e.g. "argument"; ``skip``: leading parts of each error's location that
    name no field, e.g. a tagged union's tag): no validator's own jargon. At most 10."""
    return "; ".join(dict.fromkeys(problem({**item, "loc": item["loc"][skip:]}, noun)
                                   for item in error.errors()[:10]))


_KINDS = {"string": "text", "int": "an integer", "bool": "true or false", "list": "a list",
          "dict": "an object", "float": "a number", "bytes": "text"}


def problem(item: Any, noun: str = "field") -> str:
    """One error of a validation in human words, naming its field."""
    loc = [part for part in item["loc"] if part not in ("function-after", "list[str]",
                                                        "str", "int", "bool")]
    name = "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                   for part in loc).lstrip(".") or "request"
    kind, ctx = item["type"], item.get("ctx") or {}
    if kind == "missing":
        return f"{name} is required"
    if kind == "extra_forbidden":
        return f"unknown {noun} {json.dumps(name[:100])}"  # the caller's: maybe long
    if kind.endswith("_type"):
        expected = _KINDS.get(kind.removesuffix("_type"), kind.removesuffix("_type"))
        if kind == "union_type" or kind == "model_type":
            expected = "of another type"
        return f"{name} must be {expected}, not {_kind_of(item.get('input'))}"
    if kind == "string_too_short":
        return f"{name} must not be empty"
    if kind == "too_short":
        return f"{name} must hold at least {ctx.get('min_length')} item(s)"
    if kind == "string_too_long":
        return f"{name} is too long (at most {ctx.get('max_length')} characters)"
    if kind == "too_long":
        return f"{name} holds too many items (at most {ctx.get('max_length')})"
    if kind in ("greater_than_equal", "greater_than"):
        return f"{name} must be at least {ctx.get('ge', ctx.get('gt'))}"
    if kind in ("less_than_equal", "less_than"):
        return f"{name} must be at most {ctx.get('le', ctx.get('lt'))}"
    if kind == "literal_error":
        return f"{name} must be one of {ctx.get('expected')}"
    if kind == "string_pattern_mismatch":
        return f"{name} does not match {ctx.get('pattern')}"
    if kind in ("value_error", "assertion_error"):
        message = str(ctx.get("error") or item["msg"].removeprefix("Value error, "))
        return message if loc == [] else f"{name}: {message}"
    return f"{name}: {item['msg']}"


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__



def op_of(model: type[BaseRequest]) -> str:
    """The op a request model is for: its ``op`` field's one Literal value."""
    (op,) = typing.get_args(model.model_fields["op"].annotation)
    return str(op)


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
