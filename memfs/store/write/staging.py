"""Staging: new bytes written on the root's filesystem before they are renamed into a
store, so a commit is one atomic rename and a crash leaves no partial file. They are
durable before the rename: fsynced when staged, or (``sync=False``) by whoever lands
them, for a whole batch at once (memfs/store/write/landing.py)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from memfs.store import crashpoints
from memfs.store.errors import InvalidInput, refused_when_full
from memfs.store.fs import backing
from memfs.store.read.versions import digest_bytes, stamp


class Staged:
    """New bytes in the staging directory, ready to be renamed into place once
    ``durable``."""

    def __init__(self, directory: int, name: str, digest: str, size: int) -> None:
        self.directory = directory  # fd of the directory it waits in
        self.name = name
        self.digest = digest
        self.size = size
        self.fd = -1  # the file, open until it is durable (for its fsync)
        self.created = False  # the file exists (only a file this daemon made is removed)
        self.durable = False  # its bytes and record are on disk
        self.moved = False  # moved into place, or handed over to a landing's intent

    def move_to(self, parent: int, name: str) -> None:
        try:
            os.rename(self.name, name, src_dir_fd=self.directory, dst_dir_fd=parent)
        except IsADirectoryError:
            raise InvalidInput(f"{name!r} is a directory") from None
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise InvalidInput(f"{name!r} is a directory") from None
            raise
        self.moved = True


class Staging:
    """This daemon's staging directory on the root's filesystem (so rename is atomic).

    Each daemon stages in its own subdirectory ``ID`` and holds an flock on ``ID.lock``
    (taken before the directory exists). At start-up, every subdirectory whose lock is
    free belongs to a dead daemon and is removed, so no staging leftovers survive.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / f"{os.getpid()}-{secrets.token_hex(4)}"
        # Staged files are named by this daemon's random prefix and a counter: unique in
        # its own directory and in a store's landing directory, which other daemons use
        # too (one at a time, under the store lock), without a getrandom() per file.
        self._prefix = secrets.token_hex(4)
        self._counter = itertools.count()
        # Staged files are created with FILE_MODE; only a umask that takes some of it
        # away (a system service's 0077) needs an fchmod for each.
        self._chmod = bool(_umask() & backing.FILE_MODE)
        lock = self.path.with_name(self.path.name + ".lock")
        self._lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        for old in directory.iterdir():
            if not old.name.endswith(".lock") and old != self.path:
                _remove_if_abandoned(old)
        self.path.mkdir(mode=0o700)
        self._fd = os.open(self.path, backing.DIR_FLAGS)

    @contextlib.contextmanager
    def stage(self, data: bytes, agent: str, git: str | None = None, *,
              into: int | None = None, sync: bool = True) -> Iterator[Staged]:
        """Write ``data`` to a new staged file with its version record (``git``: its
        blob id in the store's history), in this daemon's staging directory or the
        directory ``into`` (a store's landing directory: see store.py); fsynced unless
        not ``sync`` (then whoever lands it makes it durable first: ``Staged.fd`` stays
        open until the exit). The staged file is removed on exit unless it was moved
        into place. Raises NoSpace when the disk is full."""
        staged = self.stage_file(data, agent, git, into=into, sync=sync)
        try:
            yield staged
        finally:
            self.discard(staged)

    def stage_file(self, data: bytes, agent: str, git: str | None = None, *,
                   into: int | None = None, sync: bool = True) -> Staged:
        """As `stage`, for a caller that calls `discard` itself when done with it."""
        directory = self._fd if into is None else into
        name = f"{self._prefix}{next(self._counter):x}"
        staged = Staged(directory, name, digest_bytes(data), len(data))
        with refused_when_full():
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         backing.FILE_MODE, dir_fd=directory)
            staged.fd, staged.created = fd, True
            try:
                if self._chmod:
                    os.fchmod(fd, backing.FILE_MODE)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                stamp(fd, staged.digest, agent, time.time(), git)
                if sync:
                    os.fsync(fd)
                    staged.durable = True
            except BaseException:
                self.discard(staged)
                raise
        crashpoints.reached("stage")
        return staged

    @staticmethod
    def release(staged: Staged) -> None:
        """Close the staged file's fd (it stays staged, under its name)."""
        if staged.fd >= 0:
            os.close(staged.fd)
            staged.fd = -1

    def discard(self, staged: Staged) -> None:
        """Close the staged file, and remove it unless it was moved into place."""
        self.release(staged)
        if staged.created and not staged.moved:
            staged.created = False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged.name, dir_fd=staged.directory)

    def close(self) -> None:
        os.close(self._fd)
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.with_name(self.path.name + ".lock").unlink(missing_ok=True)
        os.close(self._lock_fd)


def _umask() -> int:
    """The process's umask, as /proc tells it (os.umask could only read it by setting
    it, for every thread at once); 0o777 where /proc does not say."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o777


def _remove_if_abandoned(directory: Path) -> None:
    lock = directory.with_name(directory.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1  # no lock at all: never a live daemon's (it locks before mkdir)
    if fd >= 0:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return  # a live daemon owns it
        lock.unlink(missing_ok=True)
        os.close(fd)
    shutil.rmtree(directory, ignore_errors=True)
