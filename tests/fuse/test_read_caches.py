"""The caches on the read path never change what an open records or what stat says.

An open through the mount reads the file's version record and the agent's seen record
from memory when it can (memfs/store/read/versions.py, memfs/store/read/seen.py): the
seen record must still end up equal to the digest of the bytes the open returned even
when another daemon on the same root changed or removed that record in between (an A-B-A
on the file's content makes the stale memory look right). A store directory's times are
re-read at once after a commit through this daemon.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.store.read.versions import version_of
from tests.fuse.conftest import Mounted, cat, digest, probe1
from tests.support import (
    UID_A,
    UID_B,
    Daemon,
    connect_as,
    loop_filesystem,
    plant,
    public_tmpdir,
    run_as,
)

SEEN = "user.memfs.seen"


def seen_on_disk(m: Mounted, uid: int, rel: str) -> str:
    """The agent's seen record as the control socket reports it (read from disk)."""
    with connect_as(uid, m.socket) as client:
        info = client.call("stat", path=rel)
    return str(info["seen"])


@pytest.fixture
def other_daemon(mounted: Mounted) -> Iterator[Path]:
    """A second daemon on the same root (no mount): its commits and records reach the
    mounting daemon only through the shared files."""
    config = dict(mounted.daemon.config)
    config["socket"] = str(mounted.base / "other-cache.sock")
    other = Daemon(config, config_path=mounted.base / "other-cache.toml").start()
    try:
        yield Path(config["socket"])
    finally:
        other.stop()


def test_seen_record_rewritten_by_another_daemon_is_recorded_again(
        mounted: Mounted, other_daemon: Path) -> None:
    rel = "notes/cache-aba.md"
    v1, v2 = b"version one\n", b"version two\n"
    mounted.write(UID_A, rel, v1)
    assert cat(mounted, UID_A, rel) == v1
    assert cat(mounted, UID_A, rel) == v1  # the mount now holds A's record in memory
    with connect_as(UID_A, other_daemon) as client:
        client.write(rel, v2)  # A read v1, so accepted: A's record is now v2
    with connect_as(UID_B, other_daemon) as client:
        client.write(rel, v1, force=True)  # back to v1's bytes; A's record stays v2
    assert cat(mounted, UID_A, rel) == v1
    assert seen_on_disk(mounted, UID_A, rel) == digest(v1)
    assert probe1(UID_A, "getxattr", mounted.path(rel), SEEN) == {"ok": digest(v1)}
    with connect_as(UID_A, other_daemon) as client:  # not a conflict: A read v1 last
        client.write(rel, b"version three\n")


def test_seen_record_removed_by_another_daemon_is_recorded_again(
        mounted: Mounted, other_daemon: Path) -> None:
    rel = "notes/cache-forget.md"
    data = b"same bytes twice\n"
    mounted.write(UID_A, rel, data)
    assert cat(mounted, UID_A, rel) == data
    assert cat(mounted, UID_A, rel) == data
    with connect_as(UID_A, other_daemon) as client:
        client.delete(rel)  # drops A's record
    with connect_as(UID_B, other_daemon) as client:
        client.write(rel, data)  # recreated with the very same bytes
    assert cat(mounted, UID_A, rel) == data
    assert seen_on_disk(mounted, UID_A, rel) == digest(data)


def test_file_changed_in_place_by_hand_is_hashed_again(mounted: Mounted) -> None:
    rel = "notes/cache-by-hand.md"
    backing = plant(mounted.backing(rel), b"planted\n")
    assert cat(mounted, UID_A, rel) == b"planted\n"
    assert cat(mounted, UID_A, rel) == b"planted\n"  # version known from memory now
    with open(backing, "ab") as handle:
        handle.write(b"and changed in place\n")
    new = b"planted\nand changed in place\n"
    assert cat(mounted, UID_A, rel) == new
    assert probe1(UID_A, "getxattr", mounted.path(rel), SEEN) == {"ok": digest(new)}
    assert probe1(UID_A, "getxattr", mounted.path(rel), "user.memfs.digest") == {
        "ok": digest(new)}


def test_store_times_are_fresh_right_after_a_commit(mounted: Mounted) -> None:
    store = mounted.root / "stores" / "ops"

    def mount_mtime() -> int:
        done = run_as(UID_A, ["stat", "-c", "%.9Y", mounted.path("ops")])
        assert done.returncode == 0, done.stderr
        seconds, _, fraction = done.stdout.decode().strip().partition(".")
        return int(seconds) * 10**9 + int(fraction.ljust(9, "0"))

    assert mount_mtime() == os.stat(store).st_mtime_ns
    for round_ in range(3):
        mounted.write(UID_A, f"ops/cache-top-{round_}-{time.monotonic_ns()}.md", b"new\n")
        assert mount_mtime() == os.stat(store).st_mtime_ns  # a new name in the store


def test_version_of_a_reused_inode_number_is_read_again() -> None:
    """A file deleted and another created in its place may get the same inode number;
    even with the old file's size and times, the new one is never taken for the old.

    On a fresh ext4 of its own, where nothing else takes inodes, the next file gets the
    freed inode number every time (on the shared root fs another process may take it)."""
    base = public_tmpdir("memfs-versions-")
    with loop_filesystem(base / "fs", base / "fs.img", 16) as directory:
        old, new = directory / "old", directory / "new"
        old.write_bytes(b"aaaa")
        fd = os.open(old, os.O_RDONLY)
        try:
            version_of(fd, remember=True)  # hashed and stamped
            first = os.fstat(fd)
            assert version_of(fd, first, remember=True).digest == digest(b"aaaa")
        finally:
            os.close(fd)
        old.unlink()
        new.write_bytes(b"bbbb")
        fd = os.open(new, os.O_RDONLY)
        try:
            assert os.fstat(fd).st_ino == first.st_ino  # the case this test is about
            # the old file's stat (same size, times and inode number) with the new file
            assert version_of(fd, first, remember=True).digest == digest(b"bbbb")
        finally:
            os.close(fd)
