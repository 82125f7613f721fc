"""Writing a store's history (`HistoryWriter`), under the store lock: blobs, commits
(one at a time, or a batch's as one pack), moving ``main``, committing what differs
from the files (`recover`), and making commits durable (`sync`). See repo.py for the
repository's layout and durability.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pygit2

from memfs.store import crashpoints
from memfs.store.fs.syscalls import syncfs
from memfs.store.history.gitobjects import temporary_name, write_pack, write_ref
from memfs.store.history.repo import (
    COMMITTER,
    REF,
    Change,
    HistoryError,
    Planned,
    Repository,
    message_for,
    write_error,
)

_BLOB = pygit2.enums.FileMode.BLOB
_TREE = pygit2.enums.FileMode.TREE


class HistoryWriter(Repository):
    """The writes of a store's history, made by the engine under the store lock."""

    def __init__(self, path: Path, store: str) -> None:
        super().__init__(path, store)
        self._dirty = False  # commits made since the last sync
        self._durable: str | None = None  # a head made durable since the last sync
        self._durable_file = path.with_suffix(".durable")

    def blob(self, data: bytes) -> pygit2.Oid:
        """Store ``data`` as a blob (content-addressed: safe outside the lock). Raises
        HistoryError (NoSpace: the file system is full)."""
        self._written += 1
        try:
            with self._writing:
                return self._repo.create_blob(data)
        except (pygit2.GitError, OSError) as error:
            raise write_error(self.store, error) from error


    def commit(self, changes: Iterable[Change], *, author: str, email: str, message: str,
               when: float | None = None, parent: str | None = None) -> str:
        """One commit on ``main`` applying ``changes`` to its tree; returns its id.
        ``parent``: ``main``'s head as the caller just read it (read again if None).
        Raises HistoryError when the repository cannot be written (NoSpace when its
        file system is full)."""
        with self._writing:
            oid = self._prepare(changes, author, email, message, when, parent)
            self._advance(oid)
            return oid

    def prepare(self, changes: Iterable[Change], *, author: str, email: str, message: str,
                parent: str | None) -> str:
        """Write the objects of the commit that `commit` would make (its trees and the
        commit itself) without moving ``main``; `advance` moves it. Content-addressed
        objects that nothing names yet: a change can be refused after this with
        nothing to undo. Raises HistoryError (NoSpace: the file system is full)."""
        with self._writing:
            return self._prepare(changes, author, email, message, None, parent)

    def prepare_batch(self, planned: list[Planned], *, parent: str | None) -> list[str]:
        """Write the commits of ``planned`` in order, each on the previous one (the
        first on ``parent``, ``main``'s head as the caller just read it), blobs and
        trees too, as **one pack** (memfs/store/history/gitobjects.py: write_pack), without
        moving ``main``; returns their ids. Built in memory, so a change's commit costs
        no file of its own, and nothing is written if it fails. Raises HistoryError
        (NoSpace: the file system is full)."""
        ids: list[str] = []
        with self._writing:
            written = self._written  # objects counted for packing are loose ones only
            try:
                with self._writer.collecting() as objects:
                    head = parent
                    for commit in planned:
                        changes = [Change(rel, None if data is None
                                          else self._repo.create_blob(data))
                                   for rel, data in commit.changes]
                        head = self._prepare(changes, commit.author, commit.email,
                                             commit.message, None, head)
                        ids.append(head)
                    write_pack(str(self.path / "objects" / "pack"), objects,
                               sync=self._sync)
            except (pygit2.GitError, OSError, KeyError) as error:
                raise write_error(self.store, error) from error
            finally:
                self._written = written
            self._packs += 1
        return ids

    def made_durable(self, oid: str) -> None:
        """Note that the commit ``oid`` (and all before it) is on disk: the next
        `sync` records it as the durable head without a flush of its own."""
        self._durable = oid

    def advance(self, oid: str) -> None:
        """Point ``main`` at ``oid``, a commit `prepare` made on ``main``'s head (the
        caller holds the store lock). Raises HistoryError."""
        with self._writing:
            self._advance(oid)

    def _prepare(self, changes: Iterable[Change], author: str, email: str, message: str,
                 when: float | None, parent: str | None) -> str:
        try:
            head = self.head() if parent is None else self._repo[parent]
            assert head is None or isinstance(head, pygit2.Commit)
            tree = self._updated(head.tree if head else None,
                                 {tuple(c.rel.split("/")): c.blob for c in changes})
            if tree is None:
                tree = self._repo.TreeBuilder().write()
            at = int(when if when is not None else time.time())
            signature = pygit2.Signature(author, email, at, 0)
            committer = pygit2.Signature(*COMMITTER, at, 0)
            oid = self._repo.create_commit(None, signature, committer, message, tree,
                                           [head.id] if head else [])
            crashpoints.reached("history.commit-written")
        except (pygit2.GitError, OSError, KeyError) as error:
            raise write_error(self.store, error) from error
        self._written += 1
        return str(oid)

    def _advance(self, oid: str) -> None:
        try:
            write_ref(str(self.path), REF, oid, shared=self._sync)
        except OSError as error:
            raise write_error(self.store, error) from error
        self._written += 1
        self._dirty = True

    def _updated(self, tree: pygit2.Tree | None,
                 changes: Mapping[tuple[str, ...], pygit2.Oid | None]) -> pygit2.Oid | None:
        """The id of ``tree`` with ``changes`` applied (None: it became empty)."""
        repo = self._repo
        builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
        below: dict[str, dict[tuple[str, ...], pygit2.Oid | None]] = {}
        for parts, blob in changes.items():
            if len(parts) > 1:
                below.setdefault(parts[0], {})[parts[1:]] = blob
            elif blob is not None:
                builder.insert(parts[0], blob, _BLOB)
            elif builder.get(parts[0]) is not None:
                builder.remove(parts[0])
        for name, sub in below.items():
            entry = tree[name] if tree is not None and name in tree else None
            subtree = repo[entry.id] if entry is not None and entry.filemode == _TREE else None
            assert subtree is None or isinstance(subtree, pygit2.Tree)
            new = self._updated(subtree, sub)
            if new is not None:
                builder.insert(name, new, _TREE)
            elif builder.get(name) is not None:
                builder.remove(name)
        if len(builder) == 0:
            return None
        self._written += 1
        return builder.write()

    def files(self) -> dict[str, str]:
        """rel -> blob id of every file in ``main``'s tree."""
        with self._writing:
            return self._files()

    def _files(self) -> dict[str, str]:
        head = self.head()
        found: dict[str, str] = {}
        if head is None:
            return found
        stack: list[tuple[str, pygit2.Tree]] = [("", head.tree)]
        while stack:
            base, tree = stack.pop()
            for entry in tree:
                rel = f"{base}{entry.name}"
                if entry.filemode == _TREE:
                    sub = self._repo[entry.id]
                    assert isinstance(sub, pygit2.Tree)
                    stack.append((rel + "/", sub))
                else:
                    found[rel] = str(entry.id)
        return found

    def recover(self, listing: Iterable[tuple[str, str | None]],
                read: Callable[[str], bytes | None], *, scope: set[str] | None = None,
                why: str = "") -> list[str]:
        """Commit, as memfs, what differs between ``main``'s tree and the files:
        ``listing`` gives each file's rel and its blob id when known (from its version
        record), ``read(rel)`` its bytes otherwise (None: it is not there). Only the
        paths in ``scope`` are compared when given, else the whole store. Returns the
        changed paths (none: no commit). Raises HistoryError (unreadable repository)."""
        try:
            known = self.files()
        except (pygit2.GitError, KeyError, ValueError) as error:
            raise HistoryError(f"history of {self.store} is unreadable: {error}") from error
        changes: list[Change] = []
        present: set[str] = set()
        for rel, hint in listing:
            present.add(rel)
            if hint is not None and known.get(rel) == hint:
                continue
            data = read(rel)
            if data is None:
                present.discard(rel)
                continue
            oid = pygit2.hash(data)
            if known.get(rel) != str(oid):
                changes.append(Change(rel, self.blob(data)))
        expected = set(known) if scope is None else set(known) & scope
        changes += [Change(rel, None) for rel in sorted(expected - present)]
        if not changes:
            return []
        paths = sorted(c.rel for c in changes)
        shown = paths[:50] + ([f"... and {len(paths) - 50} more"] if len(paths) > 50 else [])
        summary = f"recover: {len(paths)} path{'s' if len(paths) != 1 else ''} of {self.store}"
        body = [why] if why else []
        body += [f"{'deleted' if c.blob is None else 'changed'}: {self.store}/{c.rel}"
                 for c in sorted(changes, key=lambda c: c.rel)][: len(shown)]
        self.commit(changes, author=COMMITTER[0], email=COMMITTER[1],
                    message=message_for(summary, "recover", None, False, body))
        return paths
    # -- durability and size --------------------------------------------------------------

    def sync(self) -> None:
        """Make every commit so far durable (one syncfs of the history's filesystem),
        then note ``main`` as the durable head; or, when all since the last sync were
        made durable with their changes (`made_durable`), note that head."""
        if not self._dirty:
            if self._durable is not None:
                self._note_durable(self._durable)
                self._durable = None
            return
        self._dirty = False
        self._durable = None
        head = self.head(self._reader())
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            syncfs(fd)
        finally:
            os.close(fd)
        if head is not None:
            self._note_durable(str(head.id))

    def _note_durable(self, head: str) -> None:
        temporary = Path(temporary_name(str(self._durable_file)))  # hosts share it
        temporary.write_text(head + "\n")
        os.replace(temporary, self._durable_file)  # durable with the next sync

    def durable_head(self) -> str | None:
        with contextlib.suppress(OSError):
            return self._durable_file.read_text().strip() or None
        return None

    def verify(self) -> None:
        """Raise HistoryError unless ``main`` and its whole tree can be read."""
        try:
            self.files()
        except (pygit2.GitError, KeyError, ValueError, AssertionError) as error:
            raise HistoryError(f"history of {self.store} is damaged: {error}") from error

    def reset_to(self, rev: str) -> None:
        """Point ``main`` at ``rev`` (after damage; the caller then recovers)."""
        write_ref(str(self.path), REF, str(pygit2.Oid(hex=rev)), shared=self._sync)
