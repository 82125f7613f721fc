"""File versions: blake3 digests and the version record kept with each file.

Each file written by memfs carries an xattr ``user.memfs.version`` set on the staged
copy before it is renamed into place, so the digest, the last writer and the time
travel atomically with the bytes, survive restarts and are shared by every daemon on
the root. The record also holds size and mtime: a file changed in place behind
memfs's back no longer matches and is hashed again. Files planted by hand are
hashed once and get the record then.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

import blake3

from memfs.errors import LastWrite

XATTR = "user.memfs.version"
CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Version:
    """The identity of the bytes behind one open file descriptor."""

    digest: str
    size: int
    last_write: LastWrite


def digest_bytes(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def digest_fd(fd: int) -> str:
    """blake3 of the whole file behind ``fd`` (read with pread; offset untouched)."""
    hasher = blake3.blake3()
    offset = 0
    while chunk := os.pread(fd, CHUNK, offset):
        hasher.update(chunk)
        offset += len(chunk)
    return hasher.hexdigest()


def stamp(fd: int, digest: str, agent: str | None, at: float) -> None:
    """Attach the version record to a file (normally the staged copy, before rename)."""
    st = os.fstat(fd)
    record = {"b3": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "agent": agent,
              "at": at}
    os.setxattr(fd, XATTR, json.dumps(record, separators=(",", ":")).encode())


def version_of(fd: int) -> Version:
    """The version of the open file: from its record when it still matches, else hashed.

    Never fails for lack of xattr support: the record is then just not cached.
    """
    st = os.fstat(fd)
    record: dict[str, object] = {}
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(os.getxattr(fd, XATTR))
    if record.get("size") == st.st_size and record.get("mtime_ns") == st.st_mtime_ns:
        agent, at = record.get("agent"), record.get("at")
        return Version(
            str(record["b3"]),
            st.st_size,
            LastWrite(agent if isinstance(agent, str) else None,
                      float(at) if isinstance(at, int | float) else None),
        )
    digest = digest_fd(fd)
    # Remember it for next time; the file keeps its mtime, so the record stays valid.
    with contextlib.suppress(OSError):
        stamp(fd, digest, None, st.st_mtime_ns / 1e9)
    return Version(digest, st.st_size, LastWrite(None, st.st_mtime_ns / 1e9))
