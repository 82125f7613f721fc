"""What every request model of the wire protocol shares: the fields each carries
(`BaseRequest`) and the field types and bounds ops declare theirs with
(control/ops/); pure data, no I/O."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_ID_CHARS = 256  # a string request id is echoed back in the reply
MAX_ARGS = 256
MAX_ARG_LEN = 4096
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
# what a connection last saw of a path: a digest, or "absent" (it saw no file there)
EXPECT_PATTERN = r"^(?:[0-9a-f]{64}|absent)$"

Arg = Annotated[str, Field(max_length=MAX_ARG_LEN)]  # a path, a glob, an rg argument
# A revision: a commit id (4-40 hex digits), HEAD~N, or a time; checked by the history.
Rev = Annotated[str, Field(min_length=1, max_length=64)]


class BaseRequest(BaseModel):
    # strict: "yes" is not a bool and "3" is not an int on this wire
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    op: str  # each op's model narrows it to a Literal naming the op
    id: int | Annotated[str, Field(max_length=MAX_ID_CHARS)] | None = None
    # Act for this agent; only delegate uids may set it.
    as_agent: str | None = Field(default=None, max_length=64)
