"""Seen records stay bounded: records of deleted files are swept after the retention,
records of existing files never are; the caches in front of them are LRUs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import blake3
import pytest

from memfs.config import parse_config
from memfs.control.client import ConflictError
from memfs.store.engine import Engine
from memfs.store.fs.paths import parse_path
from memfs.store.read.lru import LRU
from tests.support import UID_A, UID_B, Daemon, connect_as, public_tmpdir, standard_config


def markers(root: Path, agent: str) -> list[Path]:
    return sorted(p for p in (root / "state" / "seen" / agent).rglob("*") if p.is_file())


def test_sweep_removes_records_of_deleted_files_only() -> None:
    base = public_tmpdir()
    config = parse_config(standard_config(base, seen_retention_days=0))
    engine = Engine.of(config)
    try:
        kept, gone = parse_path("notes/kept.md"), parse_path("notes/deep/gone.md")
        for path in (kept, gone):
            engine.write("alice", path, b"x\n")
            engine.read_bytes("bob", path)
        engine.delete("alice", gone)
        assert len(markers(config.root, "bob")) == 2
        assert engine.sweep_seen() == 1
        left = markers(config.root, "bob")
        assert [p.read_text() for p in left] == ["kept.md"]
        assert engine.seen.get("bob", kept) is not None
        assert engine.seen.get("bob", gone) is None
    finally:
        engine.close()


def test_sweep_keeps_young_records() -> None:
    base = public_tmpdir()
    config = parse_config(standard_config(base))  # 30 days
    engine = Engine.of(config)
    try:
        path = parse_path("notes/young.md")
        engine.write("alice", path, b"x\n")
        engine.read_bytes("bob", path)
        engine.delete("alice", path)
        assert engine.sweep_seen() == 0
        assert engine.seen.get("bob", path) is not None
    finally:
        engine.close()


def test_daemon_sweeps_at_start() -> None:
    base = public_tmpdir()
    config: dict[str, Any] = standard_config(base)
    with (Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice,
          connect_as(UID_B, daemon.socket) as bob):
        alice.write("notes/y.md", "y\n")
        bob.read("notes/y.md")
        alice.read("notes/y.md")
        alice.delete("notes/y.md")
        with pytest.raises(ConflictError):
            bob.write("notes/y.md", "blind\n")
    config["seen_retention_days"] = 0
    with Daemon(config) as daemon, connect_as(UID_B, daemon.socket) as bob:
        assert bob.write("notes/y.md", "created again\n")["created"] is True


def test_lru_forgets_the_least_recently_used() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c"), len(cache)) == (1, 3, 2)


def test_conflict_with_ones_own_last_write_says_so() -> None:
    """The state a crash between the rename and the record update leaves (the file is
    alice's new version, her record the old one): the conflict names her, as herself."""

    base = public_tmpdir()
    config = standard_config(base)
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        old = alice.write("notes/crash.md", "v0\n")["digest"]
        alice.write("notes/crash.md", "v1\n")
        name = blake3.blake3(b"crash.md").hexdigest()
        marker = Path(config["root"]) / "state" / "seen" / "alice" / "notes" / name

        os.setxattr(marker, "user.memfs.seen", old.encode())
        with connect_as(UID_A, daemon.socket) as again, pytest.raises(ConflictError) as caught:
            again.write("notes/crash.md", "v2\n")
    assert "last written by you, alice" in caught.value.message
