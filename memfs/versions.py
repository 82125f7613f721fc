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
import functools
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


# (digest, size, mtime_ns, agent, at) of a parsed record
_Record = tuple[str, object, object, str | None, float | None]


@functools.lru_cache(maxsize=4096)
def _parse_record(raw: bytes) -> _Record | None:
    """The fields of a version record (a pure function of its bytes, so cached: every
    open of a file reads its record, and the JSON parse was most of that cost)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict) or "b3" not in record:
        return None
    agent, at = record.get("agent"), record.get("at")
    return (str(record["b3"]), record.get("size"), record.get("mtime_ns"),
            agent if isinstance(agent, str) else None,
            float(at) if isinstance(at, int | float) else None)


def version_of(fd: int, st: os.stat_result | None = None) -> Version:
    """The version of the open file: from its record when it still matches, else hashed.
    ``st``: the caller's ``os.fstat(fd)``, if it has one (saves a system call).

    Never fails for lack of xattr support: the record is then just not cached.
    """
    if st is None:
        st = os.fstat(fd)
    record = None
    with contextlib.suppress(OSError):
        record = _parse_record(os.getxattr(fd, XATTR))
    if record is not None and record[1] == st.st_size and record[2] == st.st_mtime_ns:
        return Version(record[0], st.st_size, LastWrite(record[3], record[4]))
    digest = digest_fd(fd)
    # Remember it for next time; the file keeps its mtime, so the record stays valid.
    with contextlib.suppress(OSError):
        stamp(fd, digest, None, st.st_mtime_ns / 1e9)
    return Version(digest, st.st_size, LastWrite(None, st.st_mtime_ns / 1e9))
