"""Carry out one decoded request for a kernel-identified uid; no socket I/O here.

The `Dispatcher` finds the op's handler in the registry (control/ops/registry.py) and
calls it with the collaborators it was given. ``handle`` is the edge where engine and
jail exceptions become protocol error codes.
It is synchronous (the server runs it in a worker thread) and never raises: every
failure becomes an error reply, an unexpected one ``internal``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memfs.control import protocol as p
from memfs.control.ops import registry
from memfs.control.ops.registry import Call, Parts
from memfs.control.protocol.base import BaseRequest
from memfs.control.ratelimit import RateLimitedLog
from memfs.errors import MemfsError
from memfs.jail import Jail
from memfs.jail.errors import JailError
from memfs.memory.errors import LeaseHeld, LeaseLost
from memfs.memory.model import Memory
from memfs.store.engine import Engine, Precondition
from memfs.store.errors import (
    ABSENT,
    AgentRequired,
    Conflict,
    NoSpace,
    NotFound,
    PermissionDenied,
    TooLarge,
)
from memfs.store.history.mirror import MirrorFailed, Mirrors
from memfs.store.history.repo import delegated
from memfs.tokens import Tokens

if TYPE_CHECKING:
    from memfs.recall import Recall

log = logging.getLogger("memfs.control")


def describe(error: BaseException) -> tuple[str, str, dict[str, Any]] | None:
    """(error code, message, details) of an error a request may end with: the code an
    engine, memory or jail exception names (memfs/errors.py); None for an unexpected one
    (an ``internal`` error the caller logs). One answer for every transport: the
    socket, HTTP and MCP report the same codes."""
    if isinstance(error, p.ProtocolError):
        return error.code, error.message, {}
    if isinstance(error, MemfsError | JailError) and error.code is not None:
        return error.code, str(error), _details(error)
    return None


def _details(error: BaseException) -> dict[str, Any]:
    if isinstance(error, Conflict):
        last = error.last_write
        return {"path": error.path, "current_digest": error.current,
                "seen_digest": None if error.seen == ABSENT else error.seen,
                "seen_absent": error.seen == ABSENT,
                "last_writer": last.agent if last else None,
                "last_written_at": last.at if last else None}
    if isinstance(error, LeaseHeld):
        return {"task": error.task, "holder": error.holder, "expires_at": error.expires_at}
    if isinstance(error, LeaseLost):
        return {"task": error.task, "holder": error.holder}
    if isinstance(error, AgentRequired):  # memfs mcp then takes the MCP client's name
        return {"agent_required": True}
    if isinstance(error, MirrorFailed):
        return {"mirrors": [status.fields() for status in error.mirrors]}
    if isinstance(error, NotFound) and error.near:  # what the caller may have meant
        return {"did_you_mean": error.near}
    if isinstance(error, TooLarge) and error.limit is not None:
        return {"size": error.size, "max_file_size": error.limit}
    return {}


class Dispatcher:
    """Carries out requests with the collaborators it is given: the engine, the jail
    (None: search and sed edits are refused as ``unavailable``, with ``tools_off``: why,
    and what to enable), the memory model, the stores' mirrors (default:
    their records, with no pusher running) and ranked recall (None: no recall); each
    op's handler comes from the registry (control/ops/registry.py)."""

    def __init__(self, engine: Engine, tools: Jail | None = None,
                 memory: Memory | None = None, mirrors: Mirrors | None = None,
                 recall: Recall | None = None, *, tools_off: str | None = None) -> None:
        self.engine = engine
        self.tools = tools
        self.memory = memory or Memory(engine)
        self.mirrors = mirrors or Mirrors(engine.config)
        self.parts = Parts(engine, self.memory, tools, self._tokens, self.mirrors, recall,
                           *([tools_off] if tools_off else []))
        self._disk_full = RateLimitedLog()

    @functools.cached_property
    def tokens(self) -> Tokens:
        """The root's token file (shared by every daemon on the root)."""
        return Tokens(self.engine.root / "state")

    def _tokens(self) -> Tokens:
        return self.tokens

    def execute(self, agent: str, request: BaseRequest, *, delegate: bool = False,
                uid: int | None = None, precondition: Precondition | None = None
                ) -> dict[str, Any]:
        """Carry out ``request`` for ``agent`` (already identified by the transport;
        ``delegate``: the caller is a delegate uid; ``uid``: the caller's, where the
        transport knows it; ``precondition``: the caller's condition on the current
        version of the file a write, delete or restore changes, see
        `Engine.write`); returns the result, raises the engine's, the memory
        model's and the jail's exceptions (see `describe`); a refusal for a full disk
        is also logged (a warning, at most every 10 s)."""
        declared = registry.op(request.op)
        try:
            if declared.access == "operator":
                self._check_operator(uid)
            else:
                self.engine.use_agent(agent)
            return declared.handler(Call(agent, uid, delegate, self.parts, precondition),
                                    request)
        except NoSpace as error:
            self._disk_full.log("refused %s by %s: %s", request.op, agent, error)
            raise

    def run(self, agent: str, op: str, fields: Mapping[str, Any], *, lax: bool = False,
            precondition: Precondition | None = None) -> dict[str, Any]:
        """`execute` the request of ``op`` built from ``fields`` (``lax``: text such as
        query parameters converted), for ``agent``, never as a delegate: how the
        in-process transports (HTTP, MCP over HTTP, the web view) call an op. Raises
        ProtocolError for bad fields, and what `execute` raises."""
        return self.execute(agent, registry.build_request(op, fields, lax=lax),
                            precondition=precondition)

    def _check_operator(self, uid: int | None) -> None:
        """Operator ops: a delegate uid's, in personal mode the owner's; raises
        PermissionDenied for anyone else (or a transport that cannot tell)."""
        config = self.engine.config
        personal = config.personal
        if uid is None or not (uid == personal.owner if personal else config.is_delegate(uid)):
            raise PermissionDenied(
                f"uid {uid} is not a delegate: only delegate uids manage HTTP tokens and list "
                "agents" + (" (in personal mode: the owner)" if personal else ""))

    def handle(self, uid: int, request: BaseRequest) -> bytes:
        """The encoded reply to ``request`` from ``uid``; never raises."""
        try:
            config = self.engine.config
            if registry.op(request.op).access == "operator":  # for no agent in particular
                return p.encode_ok(request.id, self.execute("", request, uid=uid))
            agent = self.engine.agent_for(uid, request.as_agent)
            # A delegate acting for another agent: each change it makes says so. (In
            # personal mode, naming the agent is who one is, not delegation.)
            via = uid if config.personal is None and request.as_agent is not None and \
                config.agent_for_uid(uid) != agent else None
            if via is None:
                result = self.execute(agent, request, delegate=config.is_delegate(uid),
                                      uid=uid)
            else:
                with delegated(via):
                    result = self.execute(agent, request, delegate=config.is_delegate(uid),
                                          uid=uid)
            return p.encode_ok(request.id, result)
        except Exception as error:
            described = describe(error)
            if described is None:
                log.exception("internal error on %s", request.op)
                return p.encode_error(request.id, "internal", f"internal error: {error!r}")
            return p.encode_error(request.id, *described)
