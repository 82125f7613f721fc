"""Safe access to the backing directory of a store.

Every path is walked one component at a time relative to an open directory fd with
``O_NOFOLLOW``, so a symlink, FIFO or device planted in the backing directory can never
lead outside the store or block the daemon: a symlinked directory is refused, a
non-regular file is reported as such and never opened for reading.

What memfs shows. A file is shown (read, listed, searched, stamped with a version
record) only if `is_kept` says so: a regular file with exactly one link, owned by the
daemon's own uid, as every file memfs writes is. A hard link planted in a store
(``ln stores/secret/s.txt stores/notes/hl``, or to a system file) is another name of an
inode that lives elsewhere, so it is treated like a planted FIFO: hidden, never read,
never stamped.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from memfs.store.errors import InvalidInput, NotAFolder
from memfs.store.fs.paths import nameable

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a planted FIFO must not block; O_NOCTTY: nor grab a terminal.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
DIR_MODE = 0o755  # o+rx: the jailed, unprivileged rg reads stores through fds
FILE_MODE = 0o644


def is_kept(st: os.stat_result) -> bool:
    """True for a file memfs shows: regular, one link, owned by the daemon's uid.
    (No link at all is fine: a version pinned open and since replaced or deleted.)
    The uid is asked each time: a daemon started as root drops to its service user
    once, after this module is imported (memfs/daemon/privilege.py)."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink <= 1 and st.st_uid == os.geteuid()


LINK_SETTLE_TRIES = 5  # fstats, 10 ms apart, before a second link is believed


def settled_stat(fd: int, st: os.stat_result) -> os.stat_result:
    """``st`` (the fstat of ``fd``), or a fresh one if it showed a file of the daemon's
    with a second link that went away within ~50 ms: on GlusterFS a rename made on
    another host shows the file with two links for a moment. A planted hard link
    stays, and is then refused as before (50 ms later)."""
    for _ in range(LINK_SETTLE_TRIES):
        if not (stat.S_ISREG(st.st_mode) and st.st_nlink > 1
                and st.st_uid == os.geteuid()):
            break
        time.sleep(0.01)
        st = os.fstat(fd)
    return st


def not_kept_reason(st: os.stat_result) -> str:
    """Why a non-directory entry is not shown (for error messages)."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink > 1:
        return "is a hard link (another name of a file elsewhere); memfs never reads it"
    return "is not owned by the memfs daemon; memfs never reads it"


# errnos that mean "the file changed under us" when they come from an fd that was just
# opened (fstat, pread, fgetxattr) or from a name that was just looked up: on a
# distributed file system (GlusterFS) another host renamed a new version over the file
# or deleted it in between. Never seen on a local file system, where an open fd keeps
# its file.
CHANGED_UNDER_US = frozenset({errno.ESTALE, errno.ENOENT})
STALE_ATTEMPTS = 8  # a file replaced this many times in a row during one read: give up

P = ParamSpec("P")
R = TypeVar("R")


def retry_stale(function: Callable[P, R]) -> Callable[P, R]:
    """Wrap an operation that opens a file and then uses the fd (and changes nothing
    before it succeeds): when it fails with ESTALE or ENOENT, do it again from the
    open, up to STALE_ATTEMPTS times in all; the last failure is raised. A file that
    is really gone is then simply not found by the next open."""

    @functools.wraps(function)
    def again(*args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(1, STALE_ATTEMPTS + 1):
            try:
                return function(*args, **kwargs)
            except OSError as error:
                if error.errno not in CHANGED_UNDER_US or attempt == STALE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    return again


@contextlib.contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def read_all(fd: int, size: int) -> bytes:
    """The first ``size`` bytes behind ``fd`` (fewer at end of file): a version's
    bytes, even while an append in place grows the file behind it."""
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def open_for_append(parent_fd: int, name: str) -> int | None:
    """Open the file ``name`` memfs keeps for writing in place (never following a
    symlink); None if it does not exist. Raises InvalidInput like `open_regular`."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK |
                     os.O_NOCTTY, dir_fd=parent_fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ETXTBSY):
            raise InvalidInput(f"{name!r} is not a regular file memfs keeps") from None
        if error.errno == errno.EACCES:
            raise _not_openable(parent_fd, name) from None
        raise
    return _kept(fd, name)


def _is_symlink(parent_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_dir(parent_fd: int, name: str) -> int:
    """Open directory ``name`` under ``parent_fd`` without following symlinks.

    Raises FileNotFoundError if it does not exist, NotAFolder (an InvalidInput and a
    NotFound) if it is a file or anything else but a directory or a symlink,
    InvalidInput if it is a symlink or a directory the daemon may not open.
    """
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except OSError as error:
        if error.errno == errno.ENOTDIR and not _is_symlink(parent_fd, name):
            raise NotAFolder(f"{name!r} is a file, not a folder: nothing is below it"
                             ) from None
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise InvalidInput(f"{name!r} is not a directory") from None
        if error.errno == errno.EACCES:
            raise InvalidInput(f"{name!r} is a folder the memfs daemon may not open (not "
                               "its own); memfs never reads it") from None
        raise


def walk_parent(store_fd: int, parts: tuple[str, ...], *, create: bool) -> int:
    """Return a new fd of the directory holding ``parts[-1]``.

    With ``create``, missing directories are made (mode 0755) and each new entry is
    made durable by syncing its parent. Raises FileNotFoundError when a directory is
    missing and not ``create``; InvalidInput when a component is not a directory.
    """
    if len(parts) == 1:
        return os.dup(store_fd)
    fd = store_fd  # not ours to close; each directory opened below is
    try:
        for name in parts[:-1]:
            try:
                child = open_dir(fd, name)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # another writer made it first
                    os.mkdir(name, DIR_MODE, dir_fd=fd)
                    child = open_dir(fd, name)
                    os.fchmod(child, DIR_MODE)  # independent of the daemon's umask
                    os.fsync(child)
                    os.close(child)
                    os.fsync(fd)
                child = open_dir(fd, name)
            if fd != store_fd:
                os.close(fd)
            fd = child
        return fd
    except BaseException:
        if fd != store_fd:
            os.close(fd)
        raise


def open_regular(parent_fd: int, name: str) -> int | None:
    """Open the regular file ``name`` for reading; None if it does not exist.

    Raises InvalidInput for a symlink, directory, special file or a file that is not
    `is_kept` (hard link, foreign owner).
    """
    opened = open_regular_stat(parent_fd, name)
    return None if opened is None else opened[0]


def open_regular_stat(parent_fd: int, name: str) -> tuple[int, os.stat_result] | None:
    """As `open_regular`, with the fstat of the file opened (the caller closes it)."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise InvalidInput(f"{name!r} is a symlink; memfs never follows symlinks") from None
        if error.errno in (errno.ENXIO, errno.EISDIR):
            raise InvalidInput(f"{name!r} is not a regular file") from None
        if error.errno == errno.EACCES:
            raise _not_openable(parent_fd, name) from None
        raise
    return fd, _kept_stat(fd, name)


def _not_openable(parent_fd: int, name: str) -> InvalidInput:
    """The error for the entry ``name`` of ``parent_fd`` that the daemon may not open
    (EACCES: a file of another owner, e.g. root's): why memfs does not show it, from
    its lstat."""
    reason = "is not the memfs daemon's to open; memfs never reads it"
    with contextlib.suppress(OSError):
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if not is_kept(st):
            reason = not_kept_reason(st)
    return InvalidInput(f"{name!r} {reason}")


_UNSUPPORTED = -1  # from _Openat2.open: walk instead


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class _Openat2:
    """One openat2(2) call instead of a walk of one open per directory (an open of a
    file through the mount spent more time walking than anything else): the kernel
    refuses any symlink on the way (RESOLVE_NO_SYMLINKS) and any escape from the
    store (RESOLVE_BENEATH). Where it is missing (before Linux 5.6, or filtered by
    seccomp), ``open`` answers _UNSUPPORTED and callers walk as before."""

    SYSCALL = 437  # the same number on every Linux architecture
    RESOLVE = 0x02 | 0x04 | 0x08  # NO_MAGICLINKS | NO_SYMLINKS | BENEATH

    def __init__(self) -> None:
        self._syscall: Callable[..., int] | None = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._syscall = libc.syscall
            libc.syscall.restype = ctypes.c_long
        except (OSError, AttributeError):
            self._syscall = None
        self._how = _OpenHow(FILE_FLAGS, 0, self.RESOLVE)
        self._how_ref = ctypes.byref(self._how)
        self._how_size = ctypes.sizeof(self._how)
        # ctypes passes these by value: made once, not per call (the mount's hot path)
        self._number = ctypes.c_long(self.SYSCALL)
        self._size_arg = ctypes.c_size_t(self._how_size)

    def open(self, store_fd: int, parts: tuple[str, ...], rel: bytes | None = None,
             ) -> int | None:
        """fd of STORE/PARTS (any kind of file), None if missing, or _UNSUPPORTED.
        ``rel``: PARTS already joined and encoded, if the caller has it."""
        call = self._syscall
        if call is None:
            return _UNSUPPORTED
        if rel is None:
            rel = os.fsencode("/".join(parts))
        fd = call(self._number, ctypes.c_long(store_fd), rel, self._how_ref, self._size_arg)
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code == errno.ENOENT:
            return None
        if code == errno.ELOOP:
            raise InvalidInput(f"{'/'.join(parts)!r} crosses a symlink; memfs never follows "
                               "symlinks")
        if code == errno.ENOTDIR:
            raise NotAFolder(f"{'/'.join(parts)!r} does not exist: a component is a file, "
                             "not a folder")
        if code == errno.EXDEV:
            raise InvalidInput(f"{'/'.join(parts)!r}: a component is not a directory")
        if code in (errno.ENXIO, errno.EISDIR):
            raise InvalidInput(f"{'/'.join(parts)!r} is not a regular file")
        if code == errno.EACCES:
            return _UNSUPPORTED  # the walk says why (a folder or file it may not open)
        if code in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG):
            self._syscall = None  # not available here: walk from now on
            return _UNSUPPORTED
        if code == errno.EINTR:
            return _UNSUPPORTED  # walk this once
        raise OSError(code, os.strerror(code), "/".join(parts))


_OPENAT2 = _Openat2()


def open_beneath(store_fd: int, parts: tuple[str, ...], rel: bytes | None = None,
                 ) -> int | None:
    """Open STORE/PARTS for reading without following any symlink or leaving the
    store; None if it does not exist. One openat2 where the kernel has it, else a
    walk. Raises InvalidInput (symlink, not a directory, FIFO/device on open);
    the caller checks that the result is a regular file. ``rel``: PARTS joined and
    encoded, if the caller has it."""
    fd = _OPENAT2.open(store_fd, parts, rel)
    if fd != _UNSUPPORTED:
        return fd
    try:
        parent = walk_parent(store_fd, parts, create=False)
    except FileNotFoundError:
        return None
    with closing_fd(parent):
        return open_regular(parent, parts[-1])


def open_kept(store_fd: int, parts: tuple[str, ...], rel: bytes | None = None,
              ) -> tuple[int, os.stat_result] | None:
    """fd and fstat of STORE/PARTS if it is a file memfs keeps (`is_kept`); None if it
    does not exist. Raises InvalidInput for a symlink on the way, a component that is
    not a directory, or a file memfs does not keep. The caller closes the fd.
    ``rel``: PARTS joined and encoded, if the caller has it."""
    fd = open_beneath(store_fd, parts, rel)
    if fd is None:
        return None
    return fd, _kept_stat(fd, "/".join(parts))


@dataclass(frozen=True)
class Entry:
    """A regular file found while walking a store; ``rel`` is relative to the store."""

    rel: str
    size: int
    mtime_ns: int


def walk_files(store_fd: int, prefix: tuple[str, ...] = ()) -> Iterator[Entry]:
    """Yield every file below the store that memfs shows (`is_kept`), never following
    symlinks. Symlinks, FIFOs, devices, sockets and hard links are skipped;
    unreadable directories too.
    """
    try:
        # a fresh open, not a dup: a dup would share its directory offset with the
        # store fd, so two concurrent walks (or a walk and a mount listing) would
        # each read part of the entries
        fd = (walk_parent(store_fd, (*prefix, "x"), create=False) if prefix
              else open_dir(store_fd, "."))
    except (FileNotFoundError, InvalidInput):
        return
    stack = [(fd, "/".join(prefix))]
    while stack:
        dir_fd, base = stack.pop()
        try:
            with os.scandir(dir_fd) as entries:
                children = sorted(entries, key=lambda entry: entry.name)
            subdirs = []
            for entry in children:
                rel = f"{base}/{entry.name}" if base else entry.name
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError as error:
                    if error.errno in CHANGED_UNDER_US:
                        continue  # deleted (or replaced) since the directory was read
                    raise
                if is_kept(st):
                    yield Entry(rel, st.st_size, st.st_mtime_ns)
                elif stat.S_ISDIR(st.st_mode):
                    subdirs.append((entry.name, rel))
            for name, rel in reversed(subdirs):
                try:
                    stack.append((open_dir(dir_fd, name), rel))
                except (OSError, InvalidInput):
                    continue
        finally:
            os.close(dir_fd)


def missing_from(store_fd: int, parts: tuple[str, ...]) -> int | None:
    """Where STORE/PARTS stops existing: the index of the first of ``parts`` that its
    folder does not hold, or None when the whole path exists (a folder, a file, or
    anything memfs hides). Never follows a symlink; raises InvalidInput when a
    component on the way is not a folder."""
    fd = open_dir(store_fd, ".")  # a fresh open: a dup would share the store fd's offset
    try:
        for index, name in enumerate(parts):
            if index == len(parts) - 1:
                try:
                    os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    return index
                return None
            try:
                child = open_dir(fd, name)
            except FileNotFoundError:
                return index
            os.close(fd)
            fd = child
        return None
    finally:
        os.close(fd)


MAX_NAMES = 10_000  # names of one folder that `shown_names` reads, at most


def shown_names(store_fd: int, parts: tuple[str, ...]) -> list[str]:
    """The names memfs shows in the folder STORE/PARTS: its folders and the files it
    keeps (`is_kept`), at most MAX_NAMES (it answers an error: its cost is bounded);
    none if the folder cannot be opened."""
    try:
        fd = open_dir(store_fd, ".")  # a fresh open, as in missing_from
        for name in parts:
            try:
                child = open_dir(fd, name)
            finally:
                os.close(fd)
            fd = child
    except (OSError, InvalidInput):
        return []
    names: list[str] = []
    with closing_fd(fd), os.scandir(fd) as entries:
        for entry in entries:
            if len(names) >= MAX_NAMES:
                break
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (is_kept(st) or stat.S_ISDIR(st.st_mode)) and nameable(entry.name):
                names.append(entry.name)
    return names


def _kept(fd: int, name: str) -> int:
    """``fd`` if it is a file memfs keeps (`is_kept`); else closed, and InvalidInput."""
    _kept_stat(fd, name)
    return fd


def _kept_stat(fd: int, name: str) -> os.stat_result:
    """The fstat of ``fd`` if it is a file memfs keeps (`is_kept`); else ``fd`` is
    closed, and InvalidInput."""
    try:
        st = os.fstat(fd)
        if not is_kept(st):
            st = settled_stat(fd, st)
        if not is_kept(st):
            raise InvalidInput(f"{name!r} {not_kept_reason(st)}")
    except BaseException:
        os.close(fd)
        raise
    return st
