"""The fields every request of the wire protocol carries (control/protocol/wire.py,
control/protocol/memory.py): pure data, no I/O."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_ID_CHARS = 256  # a string request id is echoed back in the reply


class BaseRequest(BaseModel):
    # strict: "yes" is not a bool and "3" is not an int on this wire
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: int | Annotated[str, Field(max_length=MAX_ID_CHARS)] | None = None
    # Act for this agent; only delegate uids may set it.
    as_agent: str | None = Field(default=None, max_length=64)
