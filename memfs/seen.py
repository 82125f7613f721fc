"""Per-agent record of the digest each agent last read or wrote, kept on disk.

One small file per (agent, store, path) under ``ROOT/state/seen/AGENT/STORE/``, named
by a hash of the path and replaced atomically with rename. It lives on the shared
root, so every daemon on that root decides conflicts from the same record, and it
survives a restart or ``kill -9`` of the daemon (the page cache outlives the process).
It is not fsynced: after a power loss an agent may find its record older than it was,
which only turns a write into a conflict, never into a lost update.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import blake3

from memfs.paths import MemPath


class SeenRecords:
    def __init__(self, directory: Path) -> None:
        self._dir = directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _file(self, agent: str, path: MemPath) -> Path:
        name = blake3.blake3(path.rel.encode("utf-8", "surrogateescape")).hexdigest()[:40]
        return self._dir / agent / path.store / name

    def get(self, agent: str, path: MemPath) -> str | None:
        """The digest ``agent`` last read or wrote at ``path``, or None."""
        try:
            with open(self._file(agent, path), "rb") as handle:
                value = handle.read(8192).decode("ascii", "replace")
        except FileNotFoundError:
            return None
        digest, _, rel = value.partition(" ")
        # The file holds the path too, to rule out a collision of the short hash.
        return digest if rel.rstrip("\n") == path.rel else None

    def put(self, agent: str, path: MemPath, digest: str) -> None:
        """Record ``digest`` as seen; atomic, so a crash leaves the old or the new value."""
        target = self._file(agent, path)
        content = f"{digest} {path.rel}\n".encode("utf-8", "surrogateescape")
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        os.rename(tmp, target)

    def forget(self, agent: str, path: MemPath) -> None:
        """Drop the record (after the agent deleted the file)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file(agent, path))
