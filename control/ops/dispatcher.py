"""Carry out one decoded request for a kernel-identified uid; no socket I/O here.

``handle`` is the edge where engine and jail exceptions become protocol error codes.
It is synchronous (the server runs it in a worker thread) and never raises: every
failure becomes an error reply, an unexpected one ``internal``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from typing import Any

from control import protocol as p
from control.ops.history import HistoryRequests
from control.ops.memory import MemoryRequests
from control.ops.tokens import TokenRequests
from control.protocol import memory as pm
from control.protocol.memory import MEMORY_OPS
from control.protocol.tokens import TOKEN_REQUESTS
from control.ratelimit import RateLimitedLog
from jail import Jail
from jail.errors import StoreNotReadable
from memfs.memory.errors import AlreadyExists, LeaseHeld, LeaseLost
from memfs.memory.model import Memory
from memfs.store.engine import Engine
from memfs.store.errors import (
    ABSENT,
    AgentRequired,
    Conflict,
    InvalidInput,
    MemfsError,
    NoSpace,
    NotFound,
    PermissionDenied,
    TooLarge,
)
from memfs.store.history import delegated
from memfs.store.paths import MemPath, parse_path
from memfs.store.versions import Pinned

log = logging.getLogger("memfs.control")


_CODES: list[tuple[type[BaseException], str]] = [
    (Conflict, "conflict"),
    (AlreadyExists, "conflict"),
    (LeaseHeld, "lease_held"),
    (LeaseLost, "lease_lost"),
    (PermissionDenied, "permission_denied"),
    (NotFound, "not_found"),
    (TooLarge, "too_large"),
    (InvalidInput, "invalid"),
    (NoSpace, "no_space"),
]


def _jail_codes() -> list[tuple[type[BaseException], str]]:
    try:
        from jail import errors
    except ImportError:  # pragma: no cover - the jail ships with memfs
        return []
    return [
        (errors.JailBusy, "busy"),
        (errors.BadArguments, "invalid"),
        (errors.JailLimit, "invalid"),
        (errors.ToolFailed, "invalid"),
        (errors.JailUnavailable, "internal"),
    ]


CODES = _CODES + _jail_codes()


def describe(error: BaseException) -> tuple[str, str, dict[str, Any]] | None:
    """(protocol code, message, details) of an error a request may end with; None for
    an unexpected one (an ``internal`` error the caller logs). One table for every
    transport: the socket, HTTP and MCP report the same codes."""
    if isinstance(error, p.ProtocolError):
        return error.code, error.message, {}
    for kind, code in CODES:
        if isinstance(error, kind):
            return code, str(error), _details(error)
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
    return {}


class Dispatcher(HistoryRequests, MemoryRequests, TokenRequests):
    def __init__(self, engine: Engine, tools: Jail | None = None,
                 memory: Memory | None = None) -> None:
        self.engine = engine
        self.tools = tools
        self.memory = memory or Memory(engine)
        self._disk_full = RateLimitedLog()
        self._ops: dict[str, Callable[[str, Any], dict[str, Any]]] = {
            "list": self._list, "read": self._read, "stat": self._stat, "write": self._write,
            "delete": self._delete, "search": self._search, "whoami": self._whoami,
            "log": self._log, "show": self._show, "diff": self._diff, "restore": self._restore,
        }
        for op in MEMORY_OPS:
            if op != "task_release":
                self._ops[op] = getattr(self, f"_{op}")

    def execute(self, agent: str, request: p.Request, *, delegate: bool = False
                ) -> dict[str, Any]:
        """Carry out ``request`` for ``agent`` (already identified by the transport;
        ``delegate``: the caller is a delegate uid); returns the result, raises the
        engine's, the memory model's and the jail's exceptions (see `describe`); a
        refusal for a full disk is also logged (a warning, at most every 10 s)."""
        try:
            self.engine.use_agent(agent)
            if isinstance(request, pm.TaskReleaseRequest):
                return self._release(agent, request, delegate)
            return self._ops[request.op](agent, request)
        except NoSpace as error:
            self._disk_full.log("refused %s by %s: %s", request.op, agent, error)
            raise

    def handle(self, uid: int, request: p.Request) -> bytes:
        """The encoded reply to ``request`` from ``uid``; never raises."""
        try:
            if isinstance(request, TOKEN_REQUESTS):  # delegates only, for no agent in particular
                return p.encode_ok(request.id, self.execute_token_op(uid, request))
            config = self.engine.config
            agent = self.engine.agent_for(uid, request.as_agent)
            # A delegate acting for another agent: each change it makes says so. (In
            # personal mode, naming the agent is who one is, not delegation.)
            via = uid if config.personal is None and request.as_agent is not None and \
                config.agent_for_uid(uid) != agent else None
            with delegated(via):
                result = self.execute(agent, request, delegate=config.is_delegate(uid))
            return p.encode_ok(request.id, result)
        except Exception as error:
            described = describe(error)
            if described is None:
                log.exception("internal error on %s", request.op)
                return p.encode_error(request.id, "internal", f"internal error: {error!r}")
            return p.encode_error(request.id, *described)

    def _path(self, raw: str) -> MemPath:
        return parse_path(raw, mount=str(self.engine.config.mount))

    def _store_or_path(self, raw: str) -> MemPath:
        return parse_path(raw, allow_store_only=True, mount=str(self.engine.config.mount))

    # -- operations ---------------------------------------------------------------

    def _whoami(self, agent: str, _: p.WhoamiRequest) -> dict[str, Any]:
        config = self.engine.config
        return {"agent": agent,
                "stores": {store: config.access(agent, store)
                           for store in self.engine.readable_stores(agent)}}

    def _list(self, agent: str, request: p.ListRequest) -> dict[str, Any]:
        return {"paths": self.engine.list(agent, request.patterns)}

    def _read(self, agent: str, request: p.ReadRequest) -> dict[str, Any]:
        path = self._path(request.path)
        if request.encoding == "base64":
            if request.offset != 1 or request.limit is not None:
                raise InvalidInput("offset and limit page through text; not with base64")
            data, pinned = self.engine.read_bytes(agent, path)
            result = _version_fields(path, pinned)
            result["content_b64"] = base64.b64encode(data).decode("ascii")
            return result
        page, pinned = self.engine.read_page(agent, path, request.offset, request.limit)
        result = _version_fields(path, pinned)
        result.update(text=page.text, offset=page.offset, lines=page.lines,
                      total_lines=page.total_lines, next_offset=page.next_offset)
        return result

    def _stat(self, agent: str, request: p.StatRequest) -> dict[str, Any]:
        info = self.engine.info(agent, self._path(request.path))
        return {
            "path": str(info.path), "digest": info.digest, "size": info.size,
            "seen": info.seen, "changed_since_last_read": info.seen not in (None, info.digest),
            "last_writer": info.last_writer, "last_written_at": info.last_written_at,
        }

    def _write(self, agent: str, request: p.WriteRequest) -> dict[str, Any]:
        path = self._path(request.path)
        if request.sed is not None:
            tools = self._require_tools()
            scripts = request.sed
            committed = self.engine.edit(
                agent, path, lambda data: tools.sed(scripts, data, caller=agent),
                force=request.force, expected=request.expect,
            )
        else:
            committed = self.engine.write(
                agent, path, request.data(), append=request.append, force=request.force,
                expected=request.expect,
            )
        return {"path": str(committed.path), "digest": committed.digest,
                "size": committed.size, "created": committed.created,
                "previous_digest": committed.previous, "commit": committed.commit}

    def _delete(self, agent: str, request: p.DeleteRequest) -> dict[str, Any]:
        path = self._path(request.path)
        committed = self.engine.delete(agent, path, force=request.force, expected=request.expect)
        return {"path": str(path), "deleted": True, "commit": committed.commit}

    def _search(self, agent: str, request: p.SearchRequest) -> dict[str, Any]:
        tools = self._require_tools()
        stores = {name: self.engine.store_dir(name) for name in self.engine.readable_stores(agent)}
        try:
            outcome = tools.search(stores, request.args, known=self.engine.config.stores,
                                   hidden=self.engine.planted,
                                   mount=str(self.engine.config.mount), caller=agent)
        except StoreNotReadable as error:
            # A search naming a store the agent cannot read is permission_denied (the
            # jail, which sees only the readable stores, would call it invalid).
            self.engine.check_access(agent, error.store)
            raise
        return {
            "output": outcome.output.decode("utf-8", "replace"),
            "exit_code": outcome.exit_code,
            "truncated": outcome.truncated,
            "stderr": outcome.stderr,
        }

    def _require_tools(self) -> Jail:
        if self.tools is None:
            raise MemfsError("search and sed edits are unavailable: the jail is not running")
        return self.tools


def _version_fields(path: MemPath, pinned: Pinned) -> dict[str, Any]:
    version = pinned.version
    return {
        "path": str(path),
        "digest": version.digest,
        "size": version.size,
        "changed_since_last_read": pinned.changed_since_seen,
        "previous_digest": pinned.previous,
        "last_writer": version.last_write.agent,
        "last_written_at": version.last_write.at,
    }
