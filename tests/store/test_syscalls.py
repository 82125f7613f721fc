"""The system calls memfs makes through libc (memfs/store/fs/syscalls.py): what they return
and how they fail, on real files."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from memfs.store.fs import syscalls
from memfs.store.read import versions
from memfs.store.read.versions import stamp, version_of


def test_syncfs_flushes_an_open_file_system_and_fails_with_its_errno(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        syscalls.syncfs(fd)  # no error on a real file system
    finally:
        os.close(fd)
    with pytest.raises(OSError) as raised:
        syscalls.syncfs(fd)  # closed now
    assert raised.value.errno == errno.EBADF


def test_getxattr_reads_a_record_whole_in_one_call(tmp_path: Path) -> None:
    """A version record (longer than os.getxattr's first try of 128 bytes) is read in
    one call; a longer value planted by hand too, by the fallback; a missing one is
    ENODATA."""
    path = tmp_path / "a.md"
    path.write_text("hello\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        stamp(fd, "b" * 64, "alice", 1.5, "c" * 40)
        record = os.getxattr(fd, versions.XATTR)
        assert len(record) > 128
        assert syscalls.getxattr(fd, versions.XATTR.encode()) == record
        assert version_of(fd).digest == "b" * 64
        planted = os.urandom(syscalls.BUFFER + 1000)
        os.setxattr(fd, "user.planted", planted)
        assert syscalls.getxattr(fd, b"user.planted") == planted
        with pytest.raises(OSError) as raised:
            syscalls.getxattr(fd, b"user.none")
        assert raised.value.errno == errno.ENODATA
    finally:
        os.close(fd)


def test_a_version_record_costs_one_getxattr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             ) -> None:
    """Reading a file's version (each write's check, each open through the mount) asks
    the kernel for its record once, not twice."""
    path = tmp_path / "a.md"
    path.write_text("hello\n")
    fd = os.open(path, os.O_RDONLY)
    calls: list[object] = []
    real = syscalls._fgetxattr

    def counting(*args: object) -> int:
        calls.append(args)
        return int(real(*args))

    try:
        stamp(fd, "b" * 64, "alice", 1.5, "c" * 40)
        monkeypatch.setattr(syscalls, "_fgetxattr", counting)
        monkeypatch.setattr(os, "getxattr", lambda *args: pytest.fail("os.getxattr"))
        assert version_of(fd).digest == "b" * 64
        assert len(calls) == 1
    finally:
        os.close(fd)
