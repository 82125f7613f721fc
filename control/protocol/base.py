"""What every request model of the wire protocol shares: the fields each carries
(`BaseRequest`) and the field types and bounds ops declare theirs with
(control/ops/); pure data, no I/O."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo

MAX_ID_CHARS = 256  # a string request id is echoed back in the reply
MAX_ARGS = 256
MAX_ARG_LEN = 4096
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
# what a connection last saw of a path: a digest, or "absent" (it saw no file there)
EXPECT_PATTERN = r"^(?:[0-9a-f]{64}|absent)$"

Arg = Annotated[str, Field(max_length=MAX_ARG_LEN)]  # a path, a glob, an rg argument
# How a read's content comes back: "text" (decoded lines, invalid UTF-8 replaced),
# "base64" (the exact bytes, as JSON can carry them), "bytes" (the exact bytes as
# such: for in-process transports only, refused on the wire, see `on_the_wire`).
Encoding = Literal["text", "base64", "bytes"]
WIRE = {"wire": True}  # the validation context of a request decoded from a line


def on_the_wire(info: ValidationInfo) -> bool:
    """Whether a request is being validated from a line (the socket), rather than built
    in this process (control/ops/registry.py's build_request)."""
    return bool(info.context and info.context.get("wire"))


def wire_encoding(value: str, info: ValidationInfo) -> str:
    """An `Encoding` field's check: "bytes" only in process."""
    if value == "bytes" and on_the_wire(info):
        raise ValueError("encoding bytes is for in-process callers; use base64")
    return value
# A revision: a commit id (4-40 hex digits), HEAD~N, or a time; checked by the history.
Rev = Annotated[str, Field(min_length=1, max_length=64)]


class BaseRequest(BaseModel):
    # strict: "yes" is not a bool and "3" is not an int on this wire
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    op: str  # each op's model narrows it to a Literal naming the op
    id: int | Annotated[str, Field(max_length=MAX_ID_CHARS)] | None = None
    # Act for this agent; only delegate uids may set it.
    as_agent: str | None = Field(default=None, max_length=64)
