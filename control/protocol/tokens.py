"""The requests made for no agent in particular: the tokens (``memfs token
create|list|revoke``) and the agents (``memfs agent list``); pydantic models with no
I/O, part of the one request union in control/protocol/wire.py.

They are made by delegate uids only (each for the agents it may act for), and in
personal mode by the owner; the daemon checks the caller's uid itself (SO_PEERCRED),
not ``as_agent``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: int | str | None = None
    as_agent: str | None = Field(default=None, max_length=64)


class TokenCreateRequest(_TokenRequest):
    """A new bearer token for ``agent``; the reply carries it, once."""

    op: Literal["token_create"]
    agent: str = Field(min_length=1, max_length=64)
    label: str = Field(default="", max_length=200)
    expires_days: float | None = Field(default=None, gt=0, le=3650)


class TokenListRequest(_TokenRequest):
    """Every token's id, agent, label, times and state; never the token."""

    op: Literal["token_list"]


class TokenRevokeRequest(_TokenRequest):
    op: Literal["token_revoke"]
    token: str = Field(min_length=1, max_length=64)  # the id from token_list


class AgentListRequest(_TokenRequest):
    """The agents: in personal mode those registered, with when each was first and
    last seen; else the configured ones, with their uid and stores."""

    op: Literal["agent_list"]


TOKEN_REQUESTS = TokenCreateRequest | TokenListRequest | TokenRevokeRequest | AgentListRequest
TOKEN_OPS = ("token_create", "token_list", "token_revoke", "agent_list")
