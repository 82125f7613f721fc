"""File versions: blake3 digests and the version record kept with each file.

Each file written by memfs carries an xattr ``user.memfs.version`` set on the staged
copy before it is renamed into place, so the digest, the last writer and the time
travel atomically with the bytes, survive restarts and are shared by every daemon on
the root. The record also holds size and mtime: a file changed in place behind
memfs's back no longer matches and is hashed again. Files planted by hand are
hashed once and get the record then.

Reading the record is an fgetxattr per open (two, as the record is longer than the
first buffer Python tries). ``version_of(..., remember=True)`` (the read path) keeps
the versions it read from records, keyed by the inode *and its change time*:
(st_dev, st_ino, inode generation, st_size, st_mtime_ns, st_ctime_ns). The generation
(FS_IOC_GETVERSION, one cheap ioctl) is drawn anew for every inode allocated, so an
inode number freed and reused never matches an old key. Within one inode, any change
(bytes, xattrs such as the record itself, times, a rename) sets its ctime, which no
process can choose, and since Linux 6.13 a change made after the ctime was queried
(we query it with every fstat) gets a strictly later one (multigrain timestamps).
So while the key is unchanged the record is the one read before, and the uncached
path would return the same Version. (With coarse timestamps, a same-size change made
in place by hand within one clock tick would go unseen: the record check itself has
that blind spot, it trusts size and mtime.) Where the ioctl is not supported nothing
is remembered. Commits never use the cache: their conflict checks read the record
every time.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any

import blake3

from memfs.store.errors import LastWrite
from memfs.store.fs import backing
from memfs.store.fs.paths import MemPath
from memfs.store.fs.syscalls import getxattr
from memfs.store.read.lru import LRU

XATTR = "user.memfs.version"
_XATTR = XATTR.encode()
APPENDING = "user.memfs.appending"  # the size before an append in place under way
CHUNK = 1024 * 1024
HASH_ATTEMPTS = 4  # a file that keeps changing while hashed: times it is looked at again
_SURROGATE = re.compile("[\ud800-\udfff]")
# Versions kept by identity, least recently used first out: ~1.3 KB each with its
# parsed record; a hit saves an open two getxattr calls (~3 us of the ~100 us an open
# through the mount costs), so a hot working set is enough (16,384 were 15 MB of a
# 100,000-file store's daemon after one `rg` through the mount).
REMEMBERED = 4096
# _IOR('v', 1, long): the inode generation (ext4, xfs, btrfs, tmpfs, ...)
FS_IOC_GETVERSION = (2 << 30) | (struct.calcsize("l") << 16) | (ord("v") << 8) | 1
_GENERATION_ARG = bytes(struct.calcsize("l"))


@dataclass(frozen=True, slots=True)
class Version:
    """The identity of the bytes behind one open file descriptor; ``git`` is their git
    blob id when the record has it (stores with history)."""

    digest: str
    size: int
    last_write: LastWrite
    git: str | None = None


@dataclass(slots=True)
class Pinned:
    """An open, pinned version of a file: reads through ``fd`` return exactly the
    bytes whose digest is ``version.digest``, whatever is committed later.
    ``previous`` is what the agent had seen before this read (None: never);
    ``stat`` is ``os.fstat(fd)`` when the pin was made by ``Engine.open_version``.
    (Not frozen: a frozen dataclass's __init__ costs a microsecond per open through
    the mount; treat it as read-only all the same.)"""

    fd: int
    version: Version
    previous: str | None
    stat: os.stat_result | None = field(default=None, compare=False, repr=False)

    @property
    def changed_since_seen(self) -> bool:
        return self.previous is not None and self.previous != self.version.digest


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

    @classmethod
    def of(cls, path: MemPath, version: Version, seen: str | None) -> FileInfo:
        return cls(path, version.digest, version.size, seen, version.last_write.agent,
                   version.last_write.at)


def digest_bytes(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def digest_fd(fd: int, size: int) -> str:
    """blake3 of the first ``size`` bytes of the file behind ``fd`` (fewer if it is
    shorter; read with pread, offset untouched)."""
    hasher = blake3.blake3()
    offset = 0
    while offset < size and (chunk := os.pread(fd, min(CHUNK, size - offset), offset)):
        hasher.update(chunk)
        offset += len(chunk)
    return hasher.hexdigest()


def appending(fd: int) -> int | None:
    """The size the file had when an append in place began, while one is under way
    (or was cut short by a crash: the store lock's next holder truncates it back)."""
    try:
        return int(os.getxattr(fd, APPENDING))
    except (OSError, ValueError):
        return None


def mark_appending(fd: int, size: int | None) -> None:
    """Mark an append in place from ``size`` as under way (None: finished)."""
    if size is None:
        with contextlib.suppress(OSError):
            os.removexattr(fd, APPENDING)
    else:
        os.setxattr(fd, APPENDING, str(size).encode("ascii"))


def appended_digest(fd: int, old: Version, data: bytes) -> str:
    """blake3 of the file's first ``old.size`` bytes followed by ``data``: from the
    hasher state kept after this daemon's last append to the same file when there is
    one (the cost is then that of ``data`` alone), else by hashing the old bytes."""
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino, old.size, old.digest)
    hasher = _hashers.get(key)
    if hasher is None:
        hasher = blake3.blake3()
        offset = 0
        while offset < old.size:
            chunk = os.pread(fd, min(CHUNK, old.size - offset), offset)
            if not chunk:
                break
            hasher.update(chunk)
            offset += len(chunk)
    else:
        hasher = hasher.copy()
    hasher.update(data)
    digest = hasher.hexdigest()
    _hashers.put((st.st_dev, st.st_ino, old.size + len(data), digest), hasher)
    return digest


def stamp(fd: int, digest: str, agent: str | None, at: float, git: str | None = None, *,
          st: os.stat_result | None = None) -> None:
    """Attach the version record to a file (normally the staged copy, before rename).
    ``st``: the stat of the bytes ``digest`` was taken of (default: the file's now)."""
    if st is None:
        st = os.fstat(fd)
    record = {"b3": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "agent": agent,
              "at": at}
    if git is not None:
        record["git"] = git
    os.setxattr(fd, XATTR, json.dumps(record, separators=(",", ":")).encode())


# (digest, size, mtime_ns, agent, at, git) of a parsed record
_Record = tuple[str, object, object, str | None, float | None, str | None]


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
    agent, at, git = record.get("agent"), record.get("at"), record.get("git")
    try:
        when = float(at) if isinstance(at, int | float) else None
    except OverflowError:  # a record planted by hand: an absurd time means none
        when = None
    if not isinstance(agent, str) or not agent.isprintable() or _SURROGATE.search(agent):
        agent = None  # only a name a reply can carry
    return (str(record["b3"]), record.get("size"), record.get("mtime_ns"), agent, when,
            git if isinstance(git, str) else None)


# (st_dev, st_ino, generation, st_size, st_mtime_ns, st_ctime_ns) -> the Version its
# record gave (see the module docstring)
_Key = tuple[int, int, bytes, int, int, int]
_remembered: LRU[_Key, Version] = LRU(REMEMBERED)
# (st_dev, st_ino, size, digest) -> the blake3 hasher after hashing those bytes, kept
# after an append so that the next append to the file hashes only what it adds
_hashers: LRU[tuple[int, int, int, str], Any] = LRU(256)


def version_of(fd: int, st: os.stat_result | None = None, *,
               remember: bool = False) -> Version:
    """The version of the open file: from its record when it still matches, else hashed.
    ``st``: the caller's ``os.fstat(fd)``, if it has one (saves a system call).
    ``remember``: reuse (and keep) the version read from the record of an unchanged
    file, see the module docstring (the read path; never the commit path).

    Guarantees that the digest is that of the version's first ``size`` bytes, even
    while the file grows in place (an append by another daemon): a file that changed
    while it was hashed is looked at again. Never fails for lack of xattr support:
    the record is then just not cached.
    """
    if st is None:
        st = os.fstat(fd)
    for _ in range(HASH_ATTEMPTS):
        recorded = _recorded(fd, st, remember)
        if recorded is not None:
            return recorded
        digest = digest_fd(fd, st.st_size)
        now = os.fstat(fd)
        if (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns):
            # Remember it for next time, for exactly the bytes hashed: a record stamped
            # late (the file grew meanwhile) then no longer matches, and is not used.
            with contextlib.suppress(OSError):
                stamp(fd, digest, None, st.st_mtime_ns / 1e9, st=st)
            break
        st_hashed, st = st, now  # it changed while hashed (an append): look again
    else:
        st = st_hashed  # still changing: the version of the bytes hashed last
    return Version(digest, st.st_size, LastWrite(None, st.st_mtime_ns / 1e9))


def _recorded(fd: int, st: os.stat_result, remember: bool) -> Version | None:
    """The version the file's record gives for the file as ``st`` describes it (or the
    recorded one while an append in place is under way); None: hash it."""
    key: _Key | None = None
    if remember:
        try:  # a new bytes object per call: safe across threads
            generation = fcntl.ioctl(fd, FS_IOC_GETVERSION, _GENERATION_ARG)
        except OSError:
            pass  # not supported here: nothing is remembered
        else:
            key = (st.st_dev, st.st_ino, generation, st.st_size, st.st_mtime_ns,
                   st.st_ctime_ns)
            known = _remembered.get(key)
            if known is not None:
                return known
    record = None
    with contextlib.suppress(OSError):
        record = _parse_record(getxattr(fd, _XATTR))
    if record is None:
        return None
    if record[1] == st.st_size and record[2] == st.st_mtime_ns:
        version = Version(record[0], st.st_size, LastWrite(record[3], record[4]), record[5])
        if key is not None:
            _remembered.put(key, version)
        return version
    if isinstance(record[1], int) and appending(fd) == record[1]:
        # An append in place is under way: the version is still the recorded one, and
        # readers read only its bytes (its size bounds them).
        return Version(record[0], record[1], LastWrite(record[3], record[4]), record[5])
    return None


@backing.retry_stale
def version_at(parent: int, name: str) -> Version | None:
    """The version of the file ``name`` in the folder ``parent``; None if there is no
    such file. Raises InvalidInput for what memfs does not keep (backing.open_regular)."""
    opened = backing.open_regular_stat(parent, name)
    if opened is None:
        return None
    fd, st = opened
    try:
        return version_of(fd, st)
    finally:
        os.close(fd)
