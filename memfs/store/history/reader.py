"""Reading a store's history (`HistoryReader`), from any thread, each with its own
Repository object: a revision resolved, the log, a file's content at a commit and its
versions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pygit2

from memfs.store.errors import InvalidInput, NotFound
from memfs.store.history import revs
from memfs.store.history.repo import (
    Entry,
    Repository,
    commit_trailers,
    delegate_of,
    entry_id,
    is_under,
    named_path,
    parse_time,
)

_REV_HEX = re.compile(revs.HEX)
_REV_HEAD = re.compile(revs.HEAD)
_REV_TIME = re.compile(revs.TIME)


class HistoryReader(Repository):
    """The reads of a store's history; any thread."""

    def resolve(self, rev: str) -> pygit2.Commit:
        """The commit of ``main``'s history that ``rev`` names: a full or abbreviated
        id, ``HEAD``/``main`` with ``~N``, or a time (the newest commit at or before
        it). Raises InvalidInput (anything else) or NotFound."""
        repo = self._reader()
        head = self.head(repo)
        if head is None:
            raise NotFound(f"store {self.store} has no history yet")
        match = _REV_HEAD.fullmatch(rev)
        if match:
            commit = head
            for _ in range(int(match.group(1) or 0)):
                if not commit.parents:
                    raise NotFound(f"{rev}: the history of {self.store} is not that long")
                commit = commit.parents[0]
            return commit
        if _REV_HEX.fullmatch(rev):
            try:
                found = repo.revparse_single(rev)
            except (KeyError, ValueError, pygit2.GitError):
                raise NotFound(f"no commit {rev} in the history of {self.store}") from None
            if not isinstance(found, pygit2.Commit) or not (
                    found.id == head.id or repo.descendant_of(head.id, found.id)):
                raise NotFound(f"no commit {rev} in the history of {self.store}")
            return found
        if _REV_TIME.fullmatch(rev):
            moment = parse_time(rev)
            for commit in self._walk(repo, head):
                if commit.commit_time <= moment:
                    return commit
            raise NotFound(f"the history of {self.store} starts after {rev}")
        raise InvalidInput(f"bad revision {rev!r}: use a commit id (at least 4 hex digits), "
                           "HEAD~N, or a time such as 2026-11-30T10:00")

    def _changes(self, commit: pygit2.Commit, parent: pygit2.Commit | None, rel: str) -> bool:
        """Whether ``commit`` changed ``rel`` (a file, or anything below a folder):
        from the message for a single-path op, else by comparing the trees."""
        named = named_path(commit.message, self.store)
        if named is not None:
            return is_under(named, rel)
        return entry_id(commit.tree, rel) != (entry_id(parent.tree, rel) if parent else None)

    def _walk(self, repo: pygit2.Repository, head: pygit2.Commit) -> Iterator[pygit2.Commit]:
        walker = repo.walk(head.id, pygit2.enums.SortMode.NONE)
        walker.simplify_first_parent()
        yield from walker

    def log(self, rel: str | None = None, *, limit: int = 20, since: float | None = None,
            until: float | None = None, start: str | None = None,
            author: str | None = None, patch: bool = False) -> list[Entry]:
        """Commits newest first, at most ``limit``; only those that changed ``rel`` (a
        file or folder) when given, made by ``author``, at or after ``since`` and at
        or before ``until``; from ``start`` (a revision, see `resolve`; inclusive)
        back, else from the newest. Raises InvalidInput, NotFound (bad ``start``)."""
        repo = self._reader()
        head = self.head(repo)
        entries: list[Entry] = []
        if start is not None:
            head = self.resolve(start)
        if head is None:
            return entries
        for commit in self._walk(repo, head):
            if since is not None and commit.commit_time < since:
                continue
            if until is not None and commit.commit_time > until:
                continue
            if author is not None and commit.author.name != author:
                continue
            parent = commit.parents[0] if commit.parents else None
            if rel is not None and not self._changes(commit, parent, rel):
                continue
            entries.append(self._entry(repo, commit, parent, rel if patch else None, patch))
            if len(entries) >= limit:
                break
        return entries

    def _entry(self, repo: pygit2.Repository, commit: pygit2.Commit,
               parent: pygit2.Commit | None, rel: str | None, patch: bool) -> Entry:
        trailers = commit_trailers(commit.message)
        text = None
        if patch:
            if parent is not None:
                diff = parent.tree.diff_to_tree(commit.tree)
            else:
                diff = commit.tree.diff_to_tree(swap=True)
            text = "".join(p.text or "" for p in diff if p is not None and (
                rel is None or is_under(p.delta.new_file.path, rel)
                or is_under(p.delta.old_file.path, rel)))
        return Entry(str(commit.id), float(commit.commit_time), commit.author.name,
                     trailers.get("Memfs-Op", "?"), commit.message.split("\n", 1)[0],
                     trailers.get("Memfs-Forced") == "yes", trailers.get("Memfs-Digest"), text,
                     delegate_of(trailers.get("Memfs-Delegate")))

    def content(self, commit: pygit2.Commit, rel: str) -> bytes:
        """The bytes of ``rel`` in ``commit``. Raises NotFound, InvalidInput."""
        try:
            found = commit.tree[rel]
        except KeyError:
            raise NotFound(f"{self.store}/{rel} did not exist at {str(commit.id)[:7]}") \
                from None
        if not isinstance(found, pygit2.Blob):
            raise InvalidInput(f"{self.store}/{rel} is a folder at {str(commit.id)[:7]}")
        return found.data

    def versions(self, rel: str) -> Iterator[tuple[pygit2.Commit, bytes | None]]:
        """(commit, content or None if deleted) for each commit that changed ``rel``,
        newest first."""
        repo = self._reader()
        head = self.head(repo)
        if head is None:
            return
        for commit in self._walk(repo, head):
            parent = commit.parents[0] if commit.parents else None
            if not self._changes(commit, parent, rel):
                continue
            mine = entry_id(commit.tree, rel)
            blob = repo[mine] if mine is not None else None
            yield commit, blob.data if isinstance(blob, pygit2.Blob) else None
