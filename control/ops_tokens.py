"""The token operations of the protocol: token_create, token_list, token_revoke.

A mixin of `control.dispatch.Dispatcher`. Unlike every other op these act for no
agent: the caller must be a delegate uid (identified by the kernel), whatever
``as_agent`` says, and names the agent a new token is for.
"""

from __future__ import annotations

import functools
from typing import Any

from control import protocol_tokens as pt
from memfs.store.engine import Engine
from memfs.store.errors import NotFound, PermissionDenied
from memfs.tokens import Tokens


class TokenRequests:
    engine: Engine

    @functools.cached_property
    def tokens(self) -> Tokens:
        """The root's token file (shared by every daemon on the root)."""
        return Tokens(self.engine.root / "state")

    def execute_token_op(self, uid: int, request: pt.TOKEN_REQUESTS) -> dict[str, Any]:
        """Carry out a token request from ``uid``; raises PermissionDenied unless it is
        a delegate, NotFound for an unknown agent or token id, InvalidInput."""
        if uid not in self.engine.config.delegates:
            raise PermissionDenied(f"uid {uid} is not a delegate: only delegate uids manage "
                                   "HTTP tokens")
        if isinstance(request, pt.TokenCreateRequest):
            if request.agent not in self.engine.config.agents:
                known = ", ".join(sorted(self.engine.config.agents)) or "none"
                raise NotFound(f"no agent named {request.agent!r} (configured: {known})")
            token, record = self.tokens.create(request.agent, request.label,
                                               request.expires_days)
            return {"token": token, **record.public()}
        if isinstance(request, pt.TokenListRequest):
            return {"tokens": [record.public() for record in self.tokens.list()]}
        return self.tokens.revoke(request.token).public()
