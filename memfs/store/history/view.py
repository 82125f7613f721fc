"""Reading a store's history on an agent's behalf: log, an old version, a diff.

The engine's ``history`` (`HistoryReads`): every operation needs read access to the
store, like a read of its files. Revisions are parsed by memfs/store/history/reader.py: ids,
``HEAD~N``, times; anything else is refused.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import blake3
import pygit2

from memfs.store.errors import ABSENT, InvalidInput, NotFound
from memfs.store.fs.paths import MemPath
from memfs.store.history.repo import Entry
from memfs.store.history.store_history import StoreHistory
from memfs.store.read.seen import SeenRecords


class Kept(Protocol):
    """What these reads need of a store (memfs/store/write/store.py's `Store`): its
    history, if it keeps one. A protocol, so that reading history does not import the
    write side."""

    @property
    def history(self) -> StoreHistory | None: ...


MAX_VERSIONS_SEARCHED = 1000  # how far back `diff` looks for the version an agent saw


@dataclass(frozen=True)
class Diff:
    """A unified diff of one file between two versions (``old``/``new`` describe
    them: a short commit id, "seen", "now" or "absent")."""

    path: MemPath
    old: str
    new: str
    text: str


class HistoryReads:
    """log, version_at and diff for agents with read access. Built by the engine from
    its stores, its seen records, its access checks and its read of a file now."""

    def __init__(self, stores: Mapping[str, Kept], seen: SeenRecords, *,
                 check_access: Callable[[str, str], None],
                 readable_stores: Callable[[str], list[str]],
                 current_bytes: Callable[[MemPath], bytes | None],
                 missing: Callable[[MemPath], NotFound | None]) -> None:
        self._stores = stores
        self._missing = missing
        self._seen = seen
        self._check_access = check_access
        self._readable_stores = readable_stores
        self._current_bytes = current_bytes

    def _history(self, agent: str, store: str) -> StoreHistory:
        self._check_access(agent, store)
        history = self._stores[store].history
        if history is None:
            raise NotFound(f"store {store} keeps no history (history = false)")
        return history

    def log(self, agent: str, target: MemPath | None, *, limit: int = 20,
            since: float | None = None, until: float | None = None,
            start: str | None = None, author: str | None = None,
            patch: bool = False) -> list[tuple[str, Entry]]:
        """(store, entry) newest first: of one file or folder (``target`` with parts),
        one store (no parts), or every readable store with history (None). ``since`` /
        ``until``: times bounding the changes; ``start``: a revision of the target's
        store to begin at (inclusive) instead of the newest, for paging. Raises
        PermissionDenied, NotFound (also for a target that exists neither now nor in
        the history: with near names), InvalidInput (``start`` without a target)."""
        if target is not None:
            history = self._history(agent, target.store)
            rel = target.rel or None
            entries = history.log(rel, limit=limit, since=since, until=until, start=start,
                                  author=author, patch=patch)
            if not entries and rel is not None:
                error = self._missing(target)
                filtered = any(given is not None for given in (since, until, start, author))
                if error is not None and not (filtered and history.log(rel, limit=1)):
                    raise error
            return [(target.store, entry) for entry in entries]
        if start is not None:
            raise InvalidInput("a starting revision belongs to one store: name the store "
                               "(or a path in it)")
        logs = []
        for store in self._readable_stores(agent):
            kept = self._stores[store].history
            if kept is not None:
                logs.append([(store, entry) for entry in kept.log(
                    None, limit=limit, since=since, until=until, author=author,
                    patch=patch)])
        merged = heapq.merge(*logs, key=lambda item: -item[1].at)
        return [item for _, item in zip(range(limit), merged, strict=False)]

    def version_at(self, agent: str, path: MemPath, rev: str) -> tuple[str, bytes]:
        """(commit id, content) of ``path`` at ``rev``; also of a file deleted since.
        Raises PermissionDenied, NotFound, InvalidInput."""
        history = self._history(agent, path.store)
        commit = history.resolve(rev)
        return str(commit.id), history.content(commit, path.rel)

    def diff(self, agent: str, path: MemPath, old: str | None = None,
             new: str | None = None) -> Diff:
        """The unified diff of ``path`` from ``old`` to ``new`` (revisions; ``new``
        None: the file now). ``old`` None: the version this agent last saw ("what
        changed since I read it"). Raises PermissionDenied, NotFound, InvalidInput."""
        history = self._history(agent, path.store)
        if old is None:
            before, old_label = self._seen_version(agent, path, history)
        else:
            commit = history.resolve(old)
            before, old_label = _content_or_none(history, commit, path.rel), str(commit.id)[:7]
        if new is None:
            after, new_label = self._current_bytes(path), "now"
        else:
            commit = history.resolve(new)
            after, new_label = _content_or_none(history, commit, path.rel), str(commit.id)[:7]
        if before is None and after is None:
            raise NotFound(f"{path} exists in neither version")
        name = str(path)
        patch = pygit2.Patch.create_from(before, after, old_as_path=name, new_as_path=name)
        return Diff(path, old_label if before is not None else "absent",
                    new_label if after is not None else "absent", patch.text or "")

    def _seen_version(self, agent: str, path: MemPath,
                      history: StoreHistory) -> tuple[bytes | None, str]:
        seen = self._seen.get(agent, path)
        if seen is None:
            if self._current_bytes(path) is None:  # nothing there, and nothing seen
                raise NotFound(f"{path} does not exist and you have not read it")
            raise InvalidInput(f"you have not read {path}: name a revision to compare with "
                               "(memfs log shows them)")
        if seen == ABSENT:
            return None, "absent"
        for count, (commit, content) in enumerate(history.versions(path.rel)):
            if content is not None and blake3.blake3(content).hexdigest() == seen:
                return content, f"{str(commit.id)[:7]} (last seen)"
            if count >= MAX_VERSIONS_SEARCHED:
                break
        raise NotFound(f"the version of {path} you last saw is not in its history: name a "
                       "revision to compare with")


def _content_or_none(history: StoreHistory, commit: pygit2.Commit, rel: str) -> bytes | None:
    try:
        return history.content(commit, rel)
    except NotFound:
        return None

