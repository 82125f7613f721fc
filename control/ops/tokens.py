"""The operations made for no agent in particular: token_create, token_list,
token_revoke and agent_list.

A mixin of `control.ops.dispatcher.Dispatcher`. Unlike every other op these act for no
agent: the caller must be a delegate uid (identified by the kernel), whatever
``as_agent`` says, and deals only with the agents it may act for; in personal mode
the owner deals with all of its agents (a token for a new name registers it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from control.protocol import tokens as pt
from memfs.store.agents import AgentRegistry
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
        """Carry out an operator request from ``uid``; raises PermissionDenied unless
        it is a delegate (in personal mode: the owner) that may act for the agents
        concerned, NotFound for an unknown agent or token id, InvalidInput."""
        config = self.engine.config
        personal = config.personal is not None
        if not (uid == config.personal.owner if config.personal else config.is_delegate(uid)):
            raise PermissionDenied(
                f"uid {uid} is not a delegate: only delegate uids manage HTTP tokens and list "
                "agents" + (" (in personal mode: the owner)" if personal else ""))

        def ours(agent: str) -> bool:
            return personal or config.may_act_for(uid, agent)

        if isinstance(request, pt.AgentListRequest):
            return {"agents": self._agents(ours)}
        if isinstance(request, pt.TokenCreateRequest):
            if personal:
                self.engine.use_agent(request.agent)  # a token for a new name registers it
            elif request.agent not in config.agents:
                known = ", ".join(sorted(config.agents)) or "none"
                raise NotFound(f"no agent named {request.agent!r} (configured: {known})")
            else:
                self.engine.check_delegation(uid, request.agent)
            token, record = self.tokens.create(request.agent, request.label,
                                               request.expires_days)
            return {"token": token, **record.public()}
        if isinstance(request, pt.TokenListRequest):
            return {"tokens": [record.public() for record in self.tokens.list()
                               if ours(record.agent)]}
        found = {record.id: record for record in self.tokens.list()}.get(request.token)
        if found is not None and not personal:
            self.engine.check_delegation(uid, found.agent)
        return self.tokens.revoke(request.token).public()

    def _agents(self, ours: Callable[[str], bool]) -> list[dict[str, Any]]:
        registry = self.engine.agents
        if isinstance(registry, AgentRegistry):
            return [{"agent": r.name, "first_seen": r.first_seen, "last_seen": r.last_seen}
                    for r in registry.list()]
        config = self.engine.config
        return [{"agent": name, "uid": spec.uid, "stores": dict(spec.stores)}
                for name, spec in sorted(config.agents.items()) if ours(name)]
