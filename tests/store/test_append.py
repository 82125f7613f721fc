"""Appends grow a file in place (their cost is what they add), yet no reader ever sees
part of one: while one is under way (or after a crash cut it short) the version is the
recorded one and reads stop at its size; the next holder of the store lock truncates
a cut-short append back."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import blake3
import pytest

from memfs.store.read import versions
from tests.support import UID_A, UID_B, Daemon, connect_as, public_tmpdir, standard_config


def config(history: bool) -> dict[str, Any]:
    made = standard_config(public_tmpdir())
    made["stores"]["notes"] = {"history": history}
    return made


@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
def test_appends_grow_in_place_and_keep_the_version_rules(history: bool) -> None:
    cfg = config(history)
    target = Path(cfg["root"]) / "stores" / "notes" / "log.md"
    with Daemon(cfg) as daemon, connect_as(UID_A, daemon.socket) as alice, \
            connect_as(UID_B, daemon.socket) as bob:
        first = alice.write("notes/log.md", "line 1\n", append=True)
        inode = target.stat().st_ino
        expected = b"line 1\n"
        for n in range(2, 30):
            who = alice if n % 2 else bob
            result = who.write("notes/log.md", f"line {n}\n", append=True)
            expected += f"line {n}\n".encode()
            assert result["digest"] == blake3.blake3(expected).hexdigest()
            assert result["size"] == len(expected)
        assert target.stat().st_ino == inode  # in place: the same file, never copied
        assert target.read_bytes() == expected
        assert "user.memfs.appending" not in os.listxattr(target)
        assert bob.read("notes/log.md")["text"] == expected.decode()
        bob.write("notes/log.md", "replaced\n")  # bob read the latest: accepted
        assert first["created"] is True
        if history:
            log = alice.log("notes/log.md", limit=100)
            assert [e["op"] for e in log].count("append") == 29


def test_a_reader_never_sees_an_append_under_way() -> None:
    """The state mid-append: the file is marked, the new bytes are there, the record
    still names the old size. Reads (socket, paged, base64, stat) return the old
    version exactly."""
    cfg = config(False)
    target = Path(cfg["root"]) / "stores" / "notes" / "busy.md"
    with Daemon(cfg) as daemon, connect_as(UID_A, daemon.socket) as alice:
        old = alice.write("notes/busy.md", "old line\n")
        fd = os.open(target, os.O_RDWR)
        try:
            versions.mark_appending(fd, 9)
            os.pwrite(fd, b"half of an appe", 9)
            assert alice.read("notes/busy.md")["text"] == "old line\n"
            assert alice.read("notes/busy.md", offset=1, limit=5)["lines"] == 1
            assert alice.read_bytes("notes/busy.md")[0] == b"old line\n"
            assert alice.stat("notes/busy.md")["digest"] == old["digest"]
        finally:
            os.close(fd)


@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
def test_an_append_cut_short_is_truncated_back(history: bool) -> None:
    cfg = config(history)
    root = Path(cfg["root"])
    target = root / "stores" / "notes" / "cut.md"
    with Daemon(cfg) as daemon, connect_as(UID_A, daemon.socket) as alice:
        before = alice.write("notes/cut.md", "kept\n")["digest"]
    # what a kill during the write of an append leaves (Store.append, memfs/store/write/store.py)
    head = None
    if history:
        head = (root / "state/history/notes.git/refs/heads/main").read_text().strip()
    lock = root / "state" / "locks" / "notes.lock"
    os.setxattr(lock, "user.memfs.pending", json.dumps(
        {"agent": "alice", "head": head, "paths": {"cut.md": "0" * 64}, "record": ["cut.md"],
         "append": {"rel": "cut.md", "size": 5}}).encode())
    fd = os.open(target, os.O_RDWR)
    versions.mark_appending(fd, 5)
    os.pwrite(fd, b"torn app", 5)
    os.close(fd)
    with Daemon(cfg) as daemon, connect_as(UID_A, daemon.socket) as alice:
        assert alice.read("notes/cut.md")["text"] == "kept\n"
        assert target.read_bytes() == b"kept\n"
        assert "user.memfs.appending" not in os.listxattr(target)
        assert alice.stat("notes/cut.md")["digest"] == before
        alice.write("notes/cut.md", "next\n", append=True)
        assert target.read_bytes() == b"kept\nnext\n"


def _append_elsewhere(fd: int, data: bytes, agent: str) -> None:
    """An append in place as another daemon on the root makes it (Store.append): mark,
    write, stamp the new record, unmark."""
    size = os.fstat(fd).st_size
    versions.mark_appending(fd, size)
    os.pwrite(fd, data, size)
    whole = os.pread(fd, size + len(data), 0)
    versions.stamp(fd, blake3.blake3(whole).hexdigest(), agent, 1.0)
    versions.mark_appending(fd, None)


def _consistent(fd: int, version: versions.Version) -> bool:
    return blake3.blake3(os.pread(fd, version.size, 0)).hexdigest() == version.digest


def test_a_version_taken_across_an_append_elsewhere_names_its_own_bytes(
        tmp_path: Path) -> None:
    """A reader's fstat is taken, then another daemon appends and records the new
    version, then the reader reads the record: it no longer matches the reader's stat.
    The cluster storm caught the old code returning the whole new file's digest with
    the old size (a read whose bytes were not its digest's)."""
    path = tmp_path / "ledger.txt"
    path.write_bytes(b"first line\n")
    fd = os.open(path, os.O_RDWR)
    try:
        versions.stamp(fd, blake3.blake3(b"first line\n").hexdigest(), "alice", 1.0)
        before = os.fstat(fd)
        _append_elsewhere(fd, b"appended elsewhere\n", "bob")
        version = versions.version_of(fd, before)
        assert _consistent(fd, version), version
    finally:
        os.close(fd)


def test_an_append_elsewhere_while_a_file_is_hashed_leaves_no_false_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file without a record is hashed; while that runs, another daemon appends and
    records its version. The reader's record must not relabel the old digest with the
    new size (the old code stamped the size it found after hashing): every version
    read afterwards names its own bytes."""
    path = tmp_path / "planted.txt"
    path.write_bytes(b"planted by hand\n")
    fd = os.open(path, os.O_RDWR)
    real_digest = versions.digest_fd

    def digest_then_append(*args: Any) -> str:
        digest = real_digest(*args)
        if os.fstat(fd).st_size == len(b"planted by hand\n"):  # once
            _append_elsewhere(fd, b"appended meanwhile\n", "bob")
        return digest

    monkeypatch.setattr(versions, "digest_fd", digest_then_append)
    try:
        first = versions.version_of(fd)
        assert _consistent(fd, first), first
        monkeypatch.setattr(versions, "digest_fd", real_digest)
        again = versions.version_of(fd)
        assert _consistent(fd, again), again
        assert again.size == len(b"planted by hand\nappended meanwhile\n")
    finally:
        os.close(fd)
