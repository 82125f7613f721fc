"""Reads for a person looking at the memory (the web view), not for an agent reading
it: each needs the agent's read access, like any read, and records nothing, not even
a file's absence, so looking never makes a stale write acceptable.

A mixin of `memfs.store.engine.Engine` (which provides what `_Engine` declares).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memfs.store import backing
from memfs.store.errors import InvalidInput
from memfs.store.paths import MemPath, nameable
from memfs.store.versions import version_of

if TYPE_CHECKING:
    from memfs.store.commits import Store
    from memfs.store.engine import Pinned


@dataclass(frozen=True)
class FileInfo:
    """The current version of a file: digest, size, who wrote it and when; ``seen``
    is what the agent last saw (None: never, or not looked up)."""

    path: MemPath
    digest: str
    size: int
    seen: str | None
    last_writer: str | None
    last_written_at: float | None


class _Engine:
    _stores: dict[str, Store]

    def check_access(self, agent: str, store: str, *, write: bool = False) -> None:
        raise NotImplementedError

    def open_version(self, agent: str, path: MemPath, *, record: bool = True,
                     absent: bool = False) -> Pinned:
        raise NotImplementedError

    def _open_current(self, path: MemPath) -> tuple[int, os.stat_result] | None:
        raise NotImplementedError


class Looking(_Engine):
    """peek, files and versions_of: reads that record nothing."""

    @backing.retry_stale
    def peek(self, agent: str, path: MemPath, limit: int) -> tuple[bytes, FileInfo]:
        """The first ``limit`` bytes of the current version, and its info. Raises
        PermissionDenied, NotFound, InvalidInput (a folder, a symlink, ...)."""
        pinned = self.open_version(agent, path, record=False)
        with backing.closing_fd(pinned.fd):
            data = os.pread(pinned.fd, min(limit, pinned.version.size), 0)
        version = pinned.version
        return data, FileInfo(path, version.digest, version.size, pinned.previous,
                              version.last_write.agent, version.last_write.at)

    def files(self, agent: str, store: str) -> list[backing.Entry]:
        """Every file of ``store`` that memfs shows and a request can name, with its
        size and mtime, sorted by path (one walk, no content read). Raises
        PermissionDenied."""
        self.check_access(agent, store)
        return sorted((entry for entry in backing.walk_files(self._stores[store].fd)
                       if nameable(entry.rel)), key=lambda entry: entry.rel)

    def versions_of(self, agent: str, paths: list[MemPath]) -> dict[MemPath, FileInfo]:
        """The current version of each path that exists (missing ones, and anything
        memfs does not show, are left out), from the version records. Raises
        PermissionDenied."""
        found: dict[MemPath, FileInfo] = {}
        for path in paths:
            self.check_access(agent, path.store)
            try:
                opened = self._open_current(path)
            except (InvalidInput, OSError):
                continue
            if opened is None:
                continue
            with backing.closing_fd(opened[0]):
                version = version_of(*opened, remember=True)
            found[path] = FileInfo(path, version.digest, version.size, None,
                                   version.last_write.agent, version.last_write.at)
        return found
