"""Per-agent record of the digest each agent last read or wrote, kept on disk.

One empty marker file per (agent, store, path) under ``ROOT/state/seen/AGENT/STORE/``,
named by the blake3 of the path; the digest is its xattr ``user.memfs.store.seen``.
Setting an xattr replaces the value atomically (readers see the old or the new
digest, never a mix) in one syscall, with no data to write back: cheaper than
rewriting and renaming a small file, which matters because every first read of a
version records one.

The record lives on the shared root, so every daemon on that root decides conflicts
from the same record, and it survives a restart or ``kill -9`` of the daemon (the
kernel keeps it). It is not fsynced: after a power loss an agent may find its record
older than it was, which only turns a write into a conflict, never into a lost update.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import blake3

from memfs.store.backing import STALE_ATTEMPTS
from memfs.store.paths import MemPath

XATTR = "user.memfs.store.seen"
MARKER_CACHE = 65536  # marker paths remembered (every open looks its marker up)


class SeenRecords:
    def __init__(self, directory: Path) -> None:
        self._dir = os.fspath(directory)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._markers: dict[tuple[str, MemPath], str] = {}

    def _file(self, agent: str, path: MemPath) -> str:
        key = (agent, path)
        marker = self._markers.get(key)
        if marker is None:
            name = blake3.blake3(path.rel.encode("utf-8")).hexdigest()
            marker = f"{self._dir}/{agent}/{path.store}/{name}"
            if len(self._markers) >= MARKER_CACHE:
                self._markers.clear()
            self._markers[key] = marker
        return marker

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
        """Record ``digest`` as seen (atomic: the old or the new value, never a mix)."""
        marker = self._file(agent, path)
        try:
            os.setxattr(marker, XATTR, digest.encode("ascii"))
        except FileNotFoundError:
            os.makedirs(os.path.dirname(marker), mode=0o700, exist_ok=True)
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
            os.setxattr(marker, XATTR, digest.encode("ascii"))

    def forget(self, agent: str, path: MemPath) -> None:
        """Drop the record (after the agent deleted the file)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file(agent, path))



