"""Per-agent record of the digest each agent last read or wrote, kept on disk.

One marker file per (agent, store, path) under ``ROOT/state/seen/AGENT/STORE/``,
named by the blake3 of the path and holding the path itself (so a sweep can tell
which file it is about); the digest is its xattr ``user.memfs.seen``, or ``absent``
when the agent saw that no file was there. Setting an xattr replaces the value
atomically (readers see the old or the new digest, never a mix) in one syscall, with
no data to write back: cheaper than rewriting and renaming a small file, which matters
because every first read of a version records one.

The record lives on the shared root, so every daemon on that root decides conflicts
from the same record, and it survives a restart or ``kill -9`` of the daemon (the
kernel keeps it). It is not fsynced: after a power loss an agent may find its record
older than it was, which only turns a write into a conflict, never into a lost update.

Records of files that no longer exist are removed by `sweep` once they are older than
the retention (``seen_retention_days``): until then an agent that read a deleted file
is told it was deleted when it writes it again blind.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

import blake3

from memfs.store.errors import refused_when_full
from memfs.store.fs.backing import STALE_ATTEMPTS
from memfs.store.fs.paths import MemPath

XATTR = "user.memfs.seen"
MARKER_CACHE = 4096  # marker paths remembered (~0.5 KB each; a miss costs one blake3 of a path)


@functools.lru_cache(maxsize=MARKER_CACHE)
def _marker(directory: str, agent: str, path: MemPath) -> str:
    name = blake3.blake3(path.rel.encode("utf-8")).hexdigest()
    return f"{directory}/{agent}/{path.store}/{name}"


class SeenRecords:
    def __init__(self, directory: Path) -> None:
        self._dir = os.fspath(directory)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _file(self, agent: str, path: MemPath) -> str:
        return _marker(self._dir, agent, path)

    def get(self, agent: str, path: MemPath) -> str | None:
        """The digest ``agent`` last read or wrote at ``path``, or None."""
        for attempt in range(1, STALE_ATTEMPTS + 1):
            try:
                return os.getxattr(self._file(agent, path), XATTR).decode("ascii")
            except FileNotFoundError:
                return None
            except OSError as error:
                if error.errno == errno.ENODATA:  # marker created, value not yet set
                    return None
                # ESTALE: another host unlinked it as we looked it up: look again
                if error.errno != errno.ESTALE or attempt == STALE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def put(self, agent: str, path: MemPath, digest: str) -> None:
        """Record ``digest`` as seen (atomic: the old or the new value, never a mix).
        Raises NoSpace when the disk is full: the record is then as it was."""
        marker = self._file(agent, path)
        with refused_when_full(f"the record that {agent} saw {path} cannot be kept"):
            try:
                os.setxattr(marker, XATTR, digest.encode("ascii"))
            except FileNotFoundError:
                self._create(marker, path, digest)

    def _create(self, marker: str, path: MemPath, digest: str) -> None:
        """A new marker holding ``digest``; none is left if that fails half-way."""
        os.makedirs(os.path.dirname(marker), mode=0o700, exist_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.pwrite(fd, path.rel.encode("utf-8"), 0)  # for the sweep
            finally:
                os.close(fd)
            os.setxattr(marker, XATTR, digest.encode("ascii"))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(marker)
            raise

    def forget(self, agent: str, path: MemPath) -> None:
        """Drop the record (after the agent deleted the file)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file(agent, path))

    def rename_agent(self, old: str, new: str) -> bool:
        """Give ``old``'s records to ``new`` (an agent renamed: it has seen what it saw);
        False when there were none, or ``new`` has records of its own (kept apart)."""
        try:
            os.rename(f"{self._dir}/{old}", f"{self._dir}/{new}")
        except (FileNotFoundError, FileExistsError, OSError):
            return False
        return True

    def recorded(self, agent: str, newest: int) -> list[tuple[str, str, str]]:
        """(store, rel, digest) of the agent's ``newest`` most recently set records."""
        found: list[tuple[float, str, str]] = []
        for store_dir in _subdirs(f"{self._dir}/{agent}"):
            for entry in os.scandir(store_dir):
                try:
                    found.append((entry.stat(follow_symlinks=False).st_ctime, store_dir,
                                  entry.path))
                except FileNotFoundError:
                    continue
        found.sort(reverse=True)
        records = []
        for _, store_dir, marker in found[:newest]:
            try:
                with open(marker, "rb") as handle:
                    rel = handle.read(65536).decode("utf-8", "replace")
                digest = os.getxattr(marker, XATTR).decode("ascii")
            except OSError:
                continue
            if rel:
                records.append((os.path.basename(store_dir), rel, digest))
        return records

    def sweep(self, exists: Callable[[str, str], bool | None], older_than: float) -> int:
        """Remove the records, last changed more than ``older_than`` seconds ago, of
        files that no longer exist (``exists(store, rel)`` False; None: cannot tell,
        kept). Markers that hold no path (written by an older memfs) and are that old
        go too: losing a record only turns a write into a conflict. Returns how many
        were removed. Never raises for a marker that vanishes meanwhile."""
        limit = time.time() - older_than
        removed = 0
        for agent_dir in _subdirs(self._dir):
            for store_dir in _subdirs(agent_dir):
                store = os.path.basename(store_dir)
                for entry in os.scandir(store_dir):
                    try:
                        if entry.stat(follow_symlinks=False).st_ctime > limit:
                            continue
                        with open(entry.path, "rb") as handle:
                            rel = handle.read(65536).decode("utf-8", "replace")
                        if rel and exists(store, rel) is not False:
                            continue
                        os.unlink(entry.path)
                        removed += 1
                    except OSError as error:
                        # ESTALE: another host's daemon swept it as we looked (Gluster)
                        if error.errno not in (errno.ENOENT, errno.ESTALE):
                            raise
                        continue
        return removed


def _subdirs(path: str) -> list[str]:
    try:
        return [entry.path for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
