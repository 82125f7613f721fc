"""The operator ops, made for no agent in particular: the tokens (``memfs token
create|list|revoke``) and the agents (``memfs agent list|rename|retire``), each
declared with its request model and handler (control/ops/registry.py).

Only a delegate uid may make them (each for the agents it may act for), and in personal
mode the owner: the dispatcher checks the caller's uid itself (SO_PEERCRED), whatever
``as_agent`` says (access "operator"); over HTTP and MCP they are not offered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from memfs.control.ops.registry import Call, operation
from memfs.control.protocol.base import BaseRequest
from memfs.memory.errors import LeaseLost
from memfs.store.access.agents import AgentRegistry
from memfs.store.errors import InvalidInput, NotFound


class TokenCreateRequest(BaseRequest):
    """A new bearer token for ``agent``; the reply carries it, once."""

    op: Literal["token_create"]
    agent: str = Field(min_length=1, max_length=64)
    label: str = Field(default="", max_length=200)
    expires_days: float | None = Field(default=None, gt=0, le=3650)


class TokenListRequest(BaseRequest):
    """Every token's id, agent, label, times and state; never the token."""

    op: Literal["token_list"]


class TokenRevokeRequest(BaseRequest):
    op: Literal["token_revoke"]
    token: str = Field(min_length=1, max_length=64)  # the id from token_list


class AgentListRequest(BaseRequest):
    """The agents: in personal mode those registered, with when each was first and
    last seen; else the configured ones, with their uid and stores."""

    op: Literal["agent_list"]


class AgentRenameRequest(BaseRequest):
    """Personal mode: agent ``agent`` goes by ``new`` from now on; its seen records and
    leases go with it (each lease moved in a commit by ``new``), its history keeps the
    old name; the old name is refused from now on, with the new one as the hint."""

    op: Literal["agent_rename"]
    agent: str = Field(min_length=1, max_length=64)
    new: str = Field(min_length=1, max_length=64)


class AgentRetireRequest(BaseRequest):
    """Personal mode: retire agent ``agent``: its leases released (each in a commit that
    says so), its name refused until reused on purpose (``undo``: active again)."""

    op: Literal["agent_retire"]
    agent: str = Field(min_length=1, max_length=64)
    undo: bool = False


def _ours(call: Call) -> Callable[[str], bool]:
    """Whether the caller may deal with an agent (in personal mode: every one)."""
    config = call.engine.config
    return lambda agent: (config.personal is not None
                          or config.may_act_for(call.uid or 0, agent))


@operation(TokenCreateRequest, summary="A new bearer token for an agent (shown once)",
           access="operator")
def token_create(call: Call, request: TokenCreateRequest) -> dict[str, Any]:
    engine, config = call.engine, call.engine.config
    if config.personal is not None:
        engine.use_agent(request.agent)  # a token for a new name registers it
    elif request.agent not in config.agents:
        known = ", ".join(sorted(config.agents)) or "none"
        raise NotFound(f"no agent named {request.agent!r} (configured: {known})")
    else:
        engine.check_delegation(call.uid or 0, request.agent)
    token, record = call.parts.tokens().create(request.agent, request.label,
                                               request.expires_days)
    return {"token": token, **record.public()}


@operation(TokenListRequest, summary="The HTTP tokens (never the token itself)",
           access="operator")
def token_list(call: Call, _: TokenListRequest) -> dict[str, Any]:
    ours = _ours(call)
    return {"tokens": [record.public() for record in call.parts.tokens().list()
                       if ours(record.agent)]}


@operation(TokenRevokeRequest, summary="Revoke an HTTP token", access="operator")
def token_revoke(call: Call, request: TokenRevokeRequest) -> dict[str, Any]:
    tokens = call.parts.tokens()
    found = {record.id: record for record in tokens.list()}.get(request.token)
    if found is not None and call.engine.config.personal is None:
        call.engine.check_delegation(call.uid or 0, found.agent)
    return tokens.revoke(request.token).public()


@operation(AgentListRequest, summary="The agents", access="operator")
def agent_list(call: Call, _: AgentListRequest) -> dict[str, Any]:
    registry = call.engine.agents
    if isinstance(registry, AgentRegistry):
        return {"agents": [{"agent": r.name, "state": r.state, "first_seen": r.first_seen,
                            "last_seen": r.last_seen,
                            **({"renamed_to": r.renamed_to} if r.renamed_to else {})}
                           for r in registry.list()]}
    config, ours = call.engine.config, _ours(call)
    return {"agents": [{"agent": name, "uid": spec.uid, "stores": dict(spec.stores)}
                       for name, spec in sorted(config.agents.items()) if ours(name)]}


def _registry(call: Call) -> AgentRegistry:
    """The personal memory's agents; InvalidInput for configured ones."""
    registry = call.engine.agents
    if not isinstance(registry, AgentRegistry):
        raise InvalidInput("this daemon's agents are configured ([agents.NAME] in its "
                           "config): rename or remove one there, then restart it")
    return registry


def _hand_over(call: Call, holder: str, to: str | None) -> list[dict[str, Any]]:
    """Every lease ``holder`` holds, moved to ``to`` or released (None): the commits."""
    moved = []
    for store, task_id in call.memory.leases_held(holder):
        try:
            done = call.memory.lease_handed_over(store, task_id, holder, to)
        except LeaseLost:
            continue  # taken or finished meanwhile: nothing of holder's to move
        moved.append({"store": store, "task": task_id, "commit": done["commit"]})
    return moved


@operation(AgentRenameRequest, summary="Rename an agent (personal mode)", access="operator")
def agent_rename(call: Call, request: AgentRenameRequest) -> dict[str, Any]:
    record = _registry(call).rename(request.agent, request.new)
    call.engine.seen.rename_agent(request.agent, request.new)
    return {"agent": record.name, "renamed_from": request.agent,
            "leases": _hand_over(call, request.agent, request.new)}


@operation(AgentRetireRequest, summary="Retire an agent, or reuse a retired name "
           "(personal mode)", access="operator")
def agent_retire(call: Call, request: AgentRetireRequest) -> dict[str, Any]:
    record = _registry(call).retire(request.agent, undo=request.undo)
    released = [] if request.undo else _hand_over(call, request.agent, None)
    return {"agent": record.name, "state": record.state, "leases_released": released}
