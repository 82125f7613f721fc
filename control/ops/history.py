"""The history operations of the protocol: log, show, diff, restore.

A mixin of `control.ops.dispatcher.Dispatcher` (which provides ``engine``, ``_path`` and
``_store_or_path``); like every op, each method takes the agent and the request
model and returns the result dict, raising the engine's exceptions.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from control import protocol as p
from memfs.store.engine import Engine
from memfs.store.errors import InvalidInput
from memfs.store.history import Entry, parse_time
from memfs.store.pages import page_of_bytes
from memfs.store.paths import MemPath


def iso(at: float) -> str:
    """UTC ISO-8601 with seconds, e.g. 2026-11-30T13:22:59Z."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry_fields(store: str, entry: Entry) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "store": store, "rev": entry.rev, "short": entry.short, "at": entry.at,
        "time": iso(entry.at), "author": entry.author, "op": entry.op,
        "summary": entry.summary, "forced": entry.forced, "digest": entry.digest,
        "delegate": entry.delegate,
    }
    if entry.patch is not None:
        fields["patch"] = entry.patch
    return fields


class HistoryRequests:
    engine: Engine

    def _path(self, raw: str) -> MemPath:
        raise NotImplementedError

    def _store_or_path(self, raw: str) -> MemPath:
        raise NotImplementedError

    def _log(self, agent: str, request: p.LogRequest) -> dict[str, Any]:
        target = None if request.path is None else self._store_or_path(request.path)
        since = None if request.since is None else parse_time(request.since)
        until = None if request.until is None else parse_time(request.until)
        entries = self.engine.history.log(agent, target, limit=request.limit, since=since,
                                  until=until, start=request.rev, author=request.author,
                                  patch=request.patch)
        return {"entries": [entry_fields(store, entry) for store, entry in entries]}

    def _show(self, agent: str, request: p.ShowRequest) -> dict[str, Any]:
        path = self._path(request.path)
        commit, data = self.engine.history.version_at(agent, path, request.rev)
        result: dict[str, Any] = {"path": str(path), "rev": commit, "short": commit[:7],
                                  "size": len(data)}
        if request.encoding == "base64":
            if request.offset != 1 or request.limit is not None:
                raise InvalidInput("offset and limit page through text; not with base64")
            result["content_b64"] = base64.b64encode(data).decode("ascii")
            return result
        page = page_of_bytes(data, request.offset, request.limit)
        result.update(text=page.text, offset=page.offset, lines=page.lines,
                      total_lines=page.total_lines, next_offset=page.next_offset)
        return result

    def _diff(self, agent: str, request: p.DiffRequest) -> dict[str, Any]:
        path = self._path(request.path)
        old = new = None
        if request.rev is not None:
            old, dots, rest = request.rev.partition("..")
            if dots:
                new = rest
            if not old or (dots and not rest):
                raise InvalidInput(f"bad range {request.rev!r}: use REV or REV..REV")
        diff = self.engine.history.diff(agent, path, old, new)
        return {"path": str(path), "old": diff.old, "new": diff.new, "diff": diff.text}

    def _restore(self, agent: str, request: p.RestoreRequest) -> dict[str, Any]:
        path = self._path(request.path)
        committed = self.engine.restore(agent, path, request.rev, force=request.force,
                                        expected=request.expect)
        return {"path": str(committed.path), "digest": committed.digest,
                "size": committed.size, "created": committed.created,
                "previous_digest": committed.previous, "commit": committed.commit}
