"""Reads for a person looking at the memory (the web view), not for an agent reading
it: each needs the agent's read access, like any read, and records nothing, not even
a file's absence, so looking never makes a stale write acceptable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Protocol

from memfs.store.errors import InvalidInput
from memfs.store.fs import backing
from memfs.store.fs.paths import MemPath, nameable
from memfs.store.read.pages import Page, read_page
from memfs.store.read.versions import FileInfo, Pinned, version_of


class Shown(Protocol):
    """What these reads need of a store (memfs/store/write/store.py's `Store`): its
    folder and a way to open a file's current version. A protocol, so that the read side
    does not import the write side."""

    @property
    def fd(self) -> int: ...

    def open_current(self, path: MemPath) -> tuple[int, os.stat_result] | None: ...


Pin = Callable[[str, MemPath], Pinned]  # (agent, path) -> the current version, not recorded


class UnrecordedReads:
    """page, files and versions_of: the engine's ``unrecorded`` reads. Built by the
    engine from its stores, its access check and its pin of the current version."""

    def __init__(self, stores: Mapping[str, Shown], *,
                 check_access: Callable[[str, str], None], pin: Pin) -> None:
        self._stores = stores
        self._check_access = check_access
        self._pin = pin

    @backing.retry_stale
    def page(self, agent: str, path: MemPath, offset: int, limit: int,
             max_bytes: int) -> tuple[Page, FileInfo]:
        """Lines ``[offset, offset + limit)`` of the current version, at most
        ``max_bytes`` of them (memfs/store/read/pages.py), and its info. Raises
        PermissionDenied, NotFound, InvalidInput (a folder, a symlink, ...)."""
        pinned = self._pin(agent, path)
        with backing.closing_fd(pinned.fd):
            page = read_page(pinned.fd, offset, limit, pinned.version.size, max_bytes)
        return page, FileInfo.of(path, pinned.version, pinned.previous)

    def peek(self, agent: str, path: MemPath, limit: int) -> tuple[bytes, FileInfo]:
        """The first ``limit`` bytes of the current version, and its info (recall's best
        lines). Raises PermissionDenied, NotFound, InvalidInput (a folder, a symlink,
        ...)."""
        pinned = self._pin(agent, path)
        with backing.closing_fd(pinned.fd):
            data = os.pread(pinned.fd, min(limit, pinned.version.size), 0)
        return data, FileInfo.of(path, pinned.version, pinned.previous)

    def files(self, agent: str, store: str) -> list[backing.Entry]:
        """Every file of ``store`` that memfs shows and a request can name, with its
        size and mtime, sorted by path (one walk, no content read). Raises
        PermissionDenied."""
        self._check_access(agent, store)
        return sorted((entry for entry in backing.walk_files(self._stores[store].fd)
                       if nameable(entry.rel)), key=lambda entry: entry.rel)

    def versions_of(self, agent: str, paths: list[MemPath]) -> dict[MemPath, FileInfo]:
        """The current version of each path that exists (missing ones, and anything
        memfs does not show, are left out), from the version records. Raises
        PermissionDenied."""
        found: dict[MemPath, FileInfo] = {}
        for path in paths:
            self._check_access(agent, path.store)
            try:
                opened = self._stores[path.store].open_current(path)
            except (InvalidInput, OSError):
                continue
            if opened is None:
                continue
            with backing.closing_fd(opened[0]):
                version = version_of(*opened, remember=True)
            found[path] = FileInfo.of(path, version, None)
        return found
