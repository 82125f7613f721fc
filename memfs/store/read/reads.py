"""An agent's reads of the files of its stores (the engine's ``reads``): pinning the
current version and recording it as seen, whole files and pages, a file's info, what
changed since the agent last looked, the files matching globs, and the NotFound (with
near names) of what is missing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from memfs.config import Config
from memfs.store.errors import ABSENT, InvalidInput, NotFound
from memfs.store.fs import backing
from memfs.store.fs.globs import compile_glob, literal_prefix
from memfs.store.fs.paths import MemPath, check_component, nameable
from memfs.store.read import near
from memfs.store.read.pages import Page, read_page
from memfs.store.read.seen import SeenRecords
from memfs.store.read.unrecorded import Shown
from memfs.store.read.versions import FileInfo, Pinned, Version, version_of

RESERVED = ("sessions", "tasks", "decisions")  # folders of a structured store


def reserved(config: Config, path: MemPath) -> bool:
    """Whether ``path`` lies in a folder that its structured store keeps itself."""
    return path.parts[0] in RESERVED and config.stores[path.store].structured


def mem_path(store: str, rel: str) -> MemPath:
    """The MemPath of ``rel`` (a path below ``store``)."""
    return MemPath(store, tuple(rel.split("/")))


class Reads:
    """The reads of `Engine` (memfs/store/engine.py): built from the stores, the seen
    records, the config and the access checks (callables, so that the read side does
    not import the access side, which imports it)."""

    def __init__(self, config: Config, stores: Mapping[str, Shown], seen: SeenRecords, *,
                 check_access: Callable[[str, str], None],
                 readable_stores: Callable[[str], list[str]]) -> None:
        self._config = config
        self._stores = stores
        self._seen = seen
        self._check_access = check_access
        self._readable_stores = readable_stores

    def missing(self, path: MemPath) -> NotFound | None:
        """None when ``path`` exists (a folder, a file, or something memfs hides; a
        store-only path: the store), else the NotFound to raise, with the names near
        the first missing part in the folder above it. No access check. Raises
        InvalidInput when a part on the way is not a folder."""
        store_fd = self._stores[path.store].fd
        found = backing.missing_from(store_fd, path.parts)
        if found is None:
            return None
        return near.no_path(path, found, backing.shown_names(store_fd, path.parts[:found]))

    def require(self, agent: str, path: MemPath) -> None:
        """Raise NotFound (with near names) unless ``agent`` may read ``path.store``
        and ``path`` exists there (see `missing`): what a command that names a file or
        folder to list, search or log checks first."""
        self._check_access(agent, path.store)
        error = self.missing(path)
        if error is not None:
            raise error

    def exists(self, store: str, rel: str) -> bool | None:
        """Whether the file ``rel`` of ``store`` exists (False also for a store that
        is gone), None when that cannot be told (a symlink on the way, an error)."""
        if store not in self._stores:
            return False
        try:
            fd = backing.open_beneath(self._stores[store].fd, tuple(rel.split("/")))
        except (InvalidInput, OSError):
            return None
        if fd is None:
            return False
        os.close(fd)
        return True

    def not_found(self, path: MemPath) -> NotFound:
        """The NotFound of a file found missing: with near names (see `missing`)."""
        try:
            error = self.missing(path)
        except (InvalidInput, OSError):  # changed meanwhile: the plain answer will do
            error = None
        return error or NotFound(f"{path} does not exist")  # None: it came back meanwhile

    def _open_current(self, path: MemPath) -> tuple[int, os.stat_result] | None:
        """fd and fstat of the file's current version, or None if it does not exist.
        Raises InvalidInput (a symlink on the way, not a file memfs keeps)."""
        return self._stores[path.store].open_current(path)

    @backing.retry_stale
    def open_version(self, agent: str, path: MemPath, *, record: bool = True,
                     absent: bool = False, is_scan: Callable[[], bool] | None = None,
                     ) -> Pinned:
        """Pin the current version of a file and (with ``record``) record its digest
        as seen by ``agent``. The caller owns ``Pinned.fd`` and must close it.
        ``is_scan`` is asked only when recording would change the agent's record;
        True means the opener is searching, not reading: nothing is recorded.
        ``absent``: observing that the file does not exist counts as a read too (it
        records ABSENT over a digest the agent saw before, so that it may create the
        file again), done by reads and stats, never by scans.

        Raises PermissionDenied, NotFound, InvalidInput (symlink, directory, special).
        """
        self._check_access(agent, path.store)
        opened = self._open_current(path)
        if opened is None:
            if absent:
                self._saw_absent(agent, path)
            raise self.not_found(path)
        fd, st = opened
        try:
            version = version_of(fd, st, remember=True)
            previous = self._seen.get(agent, path)
            if record and previous != version.digest and not (is_scan and is_scan()):
                self._seen.put(agent, path, version.digest)
        except BaseException:
            os.close(fd)
            raise
        return Pinned(fd, version, None if previous == ABSENT else previous, st)

    def _saw_absent(self, agent: str, path: MemPath) -> None:
        seen = self._seen.get(agent, path)
        if seen is not None and seen != ABSENT:
            self._seen.put(agent, path, ABSENT)

    @backing.retry_stale
    def read_bytes(self, agent: str, path: MemPath) -> tuple[bytes, Pinned]:
        """The whole content of the current version, recorded as seen (its absence
        too)."""
        pinned = self.open_version(agent, path, absent=True)
        with backing.closing_fd(pinned.fd):
            return backing.read_all(pinned.fd, pinned.version.size), pinned

    @backing.retry_stale
    def read_page(self, agent: str, path: MemPath, offset: int,
                  limit: int | None) -> tuple[Page, Pinned]:
        """Lines ``[offset, offset + limit)`` of the current version, which is recorded
        as seen (its absence too); memory bounded by the page (memfs/store/read/pages.py)."""
        pinned = self.open_version(agent, path, absent=True)
        with backing.closing_fd(pinned.fd):
            return read_page(pinned.fd, offset, limit, pinned.version.size), pinned

    def info(self, agent: str, path: MemPath) -> FileInfo:
        """Digest, size and last writer of the current version; records nothing but
        the file's absence."""
        pinned = self.open_version(agent, path, record=False, absent=True)
        os.close(pinned.fd)
        return FileInfo.of(path, pinned.version, pinned.previous)

    def changed_since_seen(self, agent: str, limit: int = 20) -> list[dict[str, Any]]:
        """Files in the agent's stores that changed (or went) since it last read or
        wrote them, among its most recent records; who changed them and when. The
        folders a structured store keeps itself are left out (they change with every
        operation; the brief shows them its own way)."""
        readable = set(self._readable_stores(agent))
        changed: list[dict[str, Any]] = []
        for store, rel, digest in self._seen.recorded(agent, newest=limit * 5):
            if store not in readable or digest == ABSENT or len(changed) >= limit:
                continue
            path = mem_path(store, rel)
            if reserved(self._config, path):
                continue
            try:
                opened = self._open_current(path)
            except InvalidInput:
                continue
            if opened is None:
                changed.append({"path": str(path), "deleted": True, "last_writer": None,
                                "last_written_at": None})
                continue
            with backing.closing_fd(opened[0]):
                version = version_of(*opened, remember=True)
            if version.digest != digest:
                changed.append({"path": str(path), "deleted": False,
                                "last_writer": version.last_write.agent,
                                "last_written_at": version.last_write.at})
        return changed

    @backing.retry_stale
    def current_bytes(self, path: MemPath) -> bytes | None:
        """The current content (no access check, no record); None if missing."""
        opened = self._open_current(path)
        if opened is None:
            return None
        fd, st = opened
        with backing.closing_fd(fd):
            return backing.read_all(fd, version_of(fd, st).size)

    @backing.retry_stale
    def read_current(self, path: MemPath) -> tuple[Version, bytes]:
        """The current version and its bytes (no access check, no record). Raises
        NotFound, InvalidInput."""
        opened = self._open_current(path)
        if opened is None:
            raise self.not_found(path)
        fd, st = opened
        with backing.closing_fd(fd):
            version = version_of(fd, st)
            return version, backing.read_all(fd, version.size)

    @backing.retry_stale
    def current_digest(self, path: MemPath) -> str | None:
        """Digest of what a read would return now (no access check, no record)."""
        opened = self._open_current(path)
        if opened is None:
            return None
        fd, st = opened
        with backing.closing_fd(fd):
            return version_of(fd, st).digest

    def list(self, agent: str, patterns: list[str]) -> list[str]:
        """``STORE/PATH`` of every regular file the agent may read that matches one of
        the globs (all files when there is none), sorted. The part of a glob before
        its first wildcard (all of it, if it has none) must name a store of the agent
        and a folder or file there; else NotFound, with near names (see `require`)."""
        stores = self._readable_stores(agent)
        mounts = ("/memory/", str(self._config.mount).rstrip("/") + "/")
        wanted = [_unmounted(p, mounts).lstrip("/") for p in patterns] or ["**"]
        found: set[str] = set()
        for pattern in wanted:
            regex = compile_glob(pattern)
            literal = literal_prefix(pattern)
            if literal:
                for name in literal:
                    check_component(name)  # "..", ".": refused, never walked
                self.require(agent, MemPath(literal[0], literal[1:]))
            for store in [literal[0]] if literal else stores:
                for entry in backing.walk_files(self._stores[store].fd):
                    name = f"{store}/{entry.rel}"
                    if not nameable(name):
                        continue  # cannot be named in a request; the mount still shows it
                    if regex.match(name):
                        found.add(name)
        return sorted(found)


def _unmounted(pattern: str, mounts: tuple[str, ...]) -> str:
    """A glob given under the mount point (/memory/... or the configured one) as
    STORE/PATH."""
    for prefix in mounts:
        if pattern.startswith(prefix):
            return pattern[len(prefix):]
    return pattern
