"""JSON for the client's start-up path, without importing the ``json`` package.

``json`` imports ``re`` and ``enum``, which cost more than the rest of ``memfs cat``
together; this module drives the same C accelerator (``_json``) that ``json`` uses,
so the output and the parsing are the stdlib's. Falls back to ``json`` where the
accelerator is missing (e.g. PyPy).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_json: Any
try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None


def _unsupported(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class _ScanContext:
    """The settings object the C scanner reads: plain strict JSON."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not valid JSON")


if _json is not None:
    _encoder = _json.make_encoder(
        None, _unsupported, _json.encode_basestring, None, ":", ",", False, False, False
    )
    _scanner = _json.make_scanner(_ScanContext())

    def dumps(value: Any) -> str:
        """Compact JSON, non-ASCII kept as is (like ``json.dumps(ensure_ascii=False)``)."""
        return "".join(_encoder(value, 0))

    def string_length(text: str) -> int:
        """Characters of ``text`` as a JSON string by `dumps` (quotes included)."""
        return len(_json.encode_basestring(text))

    def loads(text: str) -> Any:
        """Parse one JSON document; raises ValueError when it is not valid JSON."""
        try:
            value, end = _scanner(text, 0)
        except StopIteration:
            raise ValueError("not valid JSON") from None
        if text[end:].strip(" \t\r\n"):
            raise ValueError("extra data after the JSON value")
        return value

else:  # pragma: no cover
    import json

    def dumps(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    def string_length(text: str) -> int:
        return len(json.dumps(text, ensure_ascii=False))

    def loads(text: str) -> Any:
        return json.loads(text)
