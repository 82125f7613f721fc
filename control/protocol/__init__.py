"""The wire format of the control socket: one JSON object per line, a request in, a
reply out. Pure data and parsing, no I/O (as h11): `control.protocol.base` is what every
request model shares (`BaseRequest`, field types and bounds), `control.protocol.wire`
the line codec (a `Codec` decodes into the models of the ops it is given, the replies'
encoders, `ProtocolError`). The ops themselves, each with its request model, are
declared in control/ops/."""

from memfs.control.protocol.wire import (
    ERROR_CODES,
    MAX_INT_DIGITS,
    MAX_NESTING,
    MAX_NUMBER_CHARS,
    Codec,
    EncodeError,
    ProtocolError,
    encode_error,
    encode_ok,
    fallback_line,
    op_of,
)

__all__ = [
    "ERROR_CODES",
    "MAX_INT_DIGITS",
    "MAX_NESTING",
    "MAX_NUMBER_CHARS",
    "Codec",
    "EncodeError",
    "ProtocolError",
    "encode_error",
    "encode_ok",
    "fallback_line",
    "op_of",
]
