"""Packing a store's history (`HistoryMaintenance`), in a worker thread outside the
store lock: loose objects packed in batches, packs merged geometrically
(memfs/store/history/packs.py), and what kills left removed on the way.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pygit2

from memfs.store import crashpoints
from memfs.store.history import packs
from memfs.store.history.gitobjects import intact, writer_repository
from memfs.store.history.repo import Repository

log = logging.getLogger("memfs.history")

PACK_AFTER = 4096  # loose objects written before `pack` packs them
PACKS_BEFORE_MERGE = 32  # packs of batches written before `pack` merges the small ones
PACK_RETRY = 60.0  # seconds before packing is tried again after it failed
STALE = 3600.0  # seconds after which a temporary file is a kill's leftover
PACK_LOCK = "memfs-pack.lock"  # in the repository: one daemon packs it at a time
MERGE_RECORD = "memfs-merging"  # the packs a merge is removing (packs.merge)
MERGE_GRACE = 10.0  # seconds the packs a merge replaced stay for readers that knew them
_OBJECT_NAME = re.compile(r"[0-9a-f]{38}")


class HistoryMaintenance(Repository):
    """The packing of a store's history; safe while commits go on."""

    def __init__(self, path: Path, store: str) -> None:
        super().__init__(path, store)
        # Objects written since the last pack (approximate); the first maintenance
        # packs what earlier daemons left loose, so the bound holds across restarts.
        self._written = PACK_AFTER
        self._retry_at = 0.0  # monotonic time before which packing is not tried again
        # Whether the next packing reads every loose object to check it is whole: at
        # start (what earlier daemons left) and after a failure. This daemon's own
        # objects are whole once named (gitobjects.py), so not each time after.
        self._check_loose = True
        self._first_pack = True  # no packing since start

    def needs_pack(self) -> bool:
        """True at start, after PACK_AFTER loose objects and after PACKS_BEFORE_MERGE
        packs of batches (a minute after a failure)."""
        return ((self._written >= PACK_AFTER or self._packs > PACKS_BEFORE_MERGE)
                and time.monotonic() >= self._retry_at)

    def pack(self) -> int:
        """Pack the loose objects into new packs of at most PACK_AFTER objects each,
        remove them, then merge packs so that there are few (memfs/store/history/packs.py);
        returns how many loose objects were packed. Safe while commits go on: only
        objects in a pack already written are removed, and a reader that misses an
        object finds it in the new pack. Memory stays that of one batch, however many
        objects are loose (a store of 100,000 files planted by hand is 100,000 at
        start-up): libgit2 holds a whole pack's objects while building it (one pack of
        100,000 blobs took 27 MB, most of it kept by the allocator after).

        What kills left is removed on the way: a loose object that is not whole (older
        versions wrote objects in place), a copy of an object already packed,
        temporary files, the packs of a merge cut short. A failure is logged and
        packing tried again later; another daemon packing meanwhile does it instead."""
        try:
            with _exclusive(self.path / PACK_LOCK) as mine:
                if not mine:
                    return 0
                return self._pack()
        except (pygit2.GitError, OSError, ValueError) as error:
            log.warning("packing the history of %s failed (tried again in %.0f s): %s",
                        self.store, PACK_RETRY, error)
            self._written = PACK_AFTER
            self._retry_at = time.monotonic() + PACK_RETRY
            self._check_loose = True
            return 0

    def _pack(self) -> int:
        self._written = 0
        self._packs = 0
        objects = self.path / "objects"
        directory = objects / "pack"
        stale = time.time() - STALE
        record = self.path / MERGE_RECORD
        if packs.finish(record, directory, grace=0.0 if self._first_pack else MERGE_GRACE):
            self._release_packs()
        self._first_pack = False
        packed = self._pack_loose(objects, stale)
        packs.tidy(directory, stale)
        chosen = [] if record.exists() else packs.rollup(packs.listed(directory))
        if chosen:
            packs.merge(chosen, record)
            self._release_packs()
        return packed

    def retire(self) -> None:
        """Remove the packs a merge replaced once readers had MERGE_GRACE seconds to
        let go of them (packs.finish); one stat when there are none. (At the first
        packing after start they go at once: nobody read them meanwhile.)"""
        record = self.path / MERGE_RECORD
        if self._first_pack or not record.exists():
            return
        with _exclusive(self.path / PACK_LOCK) as mine:
            if mine and packs.finish(record, self.path / "objects" / "pack",
                                     grace=MERGE_GRACE):
                self._release_packs()

    def _pack_loose(self, objects: Path, stale: float) -> int:
        repo = pygit2.Repository(str(self.path))
        packed = pygit2.Odb()
        packed.add_backend(pygit2.OdbBackendPack(str(objects)), 1)
        batch: list[Path] = []
        count = broken = 0
        for directory in _hex_dirs(objects):
            for name in os.listdir(directory):
                path = directory / name
                if not _OBJECT_NAME.fullmatch(name):
                    _remove_if_older(path, stale)  # a temporary file a kill left
                elif pygit2.Oid(hex=directory.name + name) in packed:
                    # Written again since it was packed, or a kill came between a
                    # pack and the removal of its objects.
                    _remove(path)
                elif self._check_loose and not intact(path):  # cut short by a kill
                    broken += _remove(path)
                else:
                    batch.append(path)
                    if len(batch) == PACK_AFTER:
                        count += _pack_batch(repo, objects, batch)
                        batch = []
        if batch:
            count += _pack_batch(repo, objects, batch)
        for directory in _hex_dirs(objects):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when empty
        if broken:
            log.warning("history of %s: removed %d loose object files a crash left "
                        "incomplete", self.store, broken)
        self._check_loose = False
        return count

    def _release_packs(self) -> None:
        """Reopen the Repository objects, which keep removed packs open (see _reader)."""
        self._generation += 1
        with self._writing:
            self._repo, self._writer = writer_repository(str(self.path), sync=self._sync)

def _pack_batch(repo: pygit2.Repository, objects: Path, loose: list[Path]) -> int:
    """Write one pack of the ``loose`` object files, then remove them."""
    builder = pygit2.PackBuilder(repo)
    for path in loose:
        builder.add(pygit2.Oid(hex=path.parent.name + path.name))
    builder.write(str(objects / "pack"))
    crashpoints.reached("history.packed")
    for path in loose:
        _remove(path)
    return len(loose)


def _remove(path: Path) -> int:
    """Remove ``path``; 1 if it was there, else 0."""
    try:
        path.unlink()
    except FileNotFoundError:
        return 0
    return 1


def _remove_if_older(path: Path, before: float) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_mtime < before:
            path.unlink()


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[bool]:
    """Whether this process holds the flock on ``path`` (taken without waiting)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _hex_dirs(objects: Path) -> list[Path]:
    return [d for d in objects.iterdir()
            if len(d.name) == 2 and all(c in "0123456789abcdef" for c in d.name)]
