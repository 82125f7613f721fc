"""What every request model of the wire protocol shares: the fields each carries
(`BaseRequest`) and the field types and bounds ops declare theirs with
(control/ops/); pure data, no I/O."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

from memfs.config import NAME_RE
from memfs.memory import records
from memfs.store.history import revs

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


def matching(pattern: str, name: str, hint: str) -> tuple[Any, ...]:
    """The metadata of a str field that must match ``pattern`` (a JSON Schema pattern,
    ``^...$``): the pattern in the model's JSON schema, and the same pattern checked
    (re.fullmatch), refused as "bad NAME 'value': HINT". Whoever reads the schema knows
    exactly what passes."""
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"bad {name} {json.dumps(value[:80])}: {hint}")
        return value

    return Field(json_schema_extra={"pattern": pattern}), AfterValidator(check)


# A revision: a commit id (4-40 hex digits), HEAD~N, or a time (memfs/store/history/revs.py).
Rev = Annotated[str, Field(max_length=64), *matching(
    revs.REV_PATTERN, "revision", "use a commit id (4-40 hex digits), HEAD~N, or a time "
    "such as 2026-11-30T10:00")]
Time = Annotated[str, Field(max_length=64), *matching(
    revs.TIME_PATTERN, "time", "use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS][Z|+HH:MM] (a date "
    "and time that exist)")]
StoreName = Annotated[str, Field(max_length=64), *matching(
    NAME_RE.pattern, "store name", "use 1-64 letters, digits, '.', '_' or '-', starting "
    "with a letter or digit")]
# Agents' texts (memfs/memory/records.py): a required one holds more than white space;
# none holds NUL; a line no line break.
TEXT_MAX = records.MAX_TEXT
Text = Annotated[str, Field(max_length=TEXT_MAX), *matching(
    records.TEXT_PATTERN, "text", "it must not be empty or white space only, nor hold NUL")]
OptionalText = Annotated[str, Field(max_length=TEXT_MAX), *matching(
    records.OPTIONAL_TEXT_PATTERN, "text", "it must not hold NUL")]
Line = Annotated[str, Field(max_length=1000), *matching(
    records.LINE_PATTERN, "line", "it must be one line, not empty or white space only, "
    "without NUL")]


class BaseRequest(BaseModel):
    # strict: "yes" is not a bool and "3" is not an int on this wire
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    op: str  # each op's model narrows it to a Literal naming the op
    id: int | Annotated[str, Field(max_length=MAX_ID_CHARS)] | None = None
    # Act for this agent; only delegate uids may set it.
    as_agent: str | None = Field(default=None, max_length=64)
