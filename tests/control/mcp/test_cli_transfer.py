"""``memfs download`` / ``memfs upload``: the CLI twins of the MCP tools, run as a real
uid. Binary content round-trips byte for byte; a stale upload exits 3; --force wins."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import UID_A, UID_B, Daemon, connect_as, memfs_as, public_tmpdir

# every byte value, repeated, then a few MiB of noise (not valid UTF-8 anywhere)
PAYLOAD = bytes(range(256)) * 4096 + random.Random(5).randbytes(2 * 1024 * 1024)


@pytest.fixture
def local() -> Iterator[Path]:
    path = public_tmpdir("memfs-cli-xfer-")
    os.chown(path, UID_A, UID_A)
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_binary_round_trip(daemon: Daemon, local: Path) -> None:
    src = local / "blob.bin"
    src.write_bytes(PAYLOAD)
    up = memfs_as(UID_A, daemon.socket, "upload", str(src), "ops/blob.bin")
    assert up.returncode == 0, up.stderr
    assert b"uploaded ops/blob.bin" in up.stdout
    with connect_as(UID_B, daemon.socket) as bob:
        assert bob.read_bytes("ops/blob.bin")[0] == PAYLOAD

    dest = local / "copy.bin"
    down = memfs_as(UID_A, daemon.socket, "download", "ops/blob.bin", str(dest))
    assert down.returncode == 0, down.stderr
    assert dest.read_bytes() == PAYLOAD
    assert dest.stat().st_uid == UID_A
    # into a directory: keeps the file's name; /memory/ prefix accepted
    down = memfs_as(UID_A, daemon.socket, "download", "/memory/ops/blob.bin", str(local))
    assert down.returncode == 0, down.stderr
    assert (local / "blob.bin").read_bytes() == PAYLOAD
    assert not [p for p in os.listdir(local) if p.endswith(".partial")]

    # change a byte locally and send it back: accepted (alice downloaded this version)
    changed = bytearray(PAYLOAD)
    changed[12345] ^= 0xFF
    dest.write_bytes(bytes(changed))
    up = memfs_as(UID_A, daemon.socket, "upload", str(dest), "ops/blob.bin")
    assert up.returncode == 0, up.stderr
    with connect_as(UID_B, daemon.socket) as bob:
        assert bob.read_bytes("ops/blob.bin")[0] == bytes(changed)


def test_stale_upload_exits_3_and_force_works(daemon: Daemon, local: Path) -> None:
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("notes/rows.csv", "id\n1\n")
    dest = local / "rows.csv"
    assert memfs_as(UID_A, daemon.socket, "download", "notes/rows.csv", str(dest)).returncode == 0
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("notes/rows.csv", "2\n", append=True)  # a row added meanwhile
    dest.write_text("id\n1\n3\n")
    stale = memfs_as(UID_A, daemon.socket, "upload", str(dest), "notes/rows.csv")
    assert stale.returncode == 3, stale.stderr
    assert b"conflict" in stale.stderr and b"bob" in stale.stderr
    with connect_as(UID_B, daemon.socket) as bob:
        assert bob.read("notes/rows.csv")["text"] == "id\n1\n2\n"  # bob's row survived
    forced = memfs_as(UID_A, daemon.socket, "upload", "--force", str(dest), "notes/rows.csv")
    assert forced.returncode == 0, forced.stderr
    with connect_as(UID_B, daemon.socket) as bob:
        assert bob.read("notes/rows.csv")["text"] == "id\n1\n3\n"


def test_download_overwrites_atomically_and_keeps_mode(daemon: Daemon, local: Path) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/x.sh", "#!/bin/sh\necho new\n")
    dest = local / "x.sh"
    dest.write_text("old\n")
    os.chown(dest, UID_A, UID_A)
    dest.chmod(0o750)
    inode = dest.stat().st_ino
    assert memfs_as(UID_A, daemon.socket, "download", "notes/x.sh", str(dest)).returncode == 0
    assert dest.read_text() == "#!/bin/sh\necho new\n"
    assert dest.stat().st_mode & 0o777 == 0o750
    assert dest.stat().st_ino != inode  # replaced by rename, not rewritten in place


def test_transfer_errors_are_clean(daemon: Daemon, local: Path) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/x.md", "x\n")
    cases = [
        (("download", "notes/x.md", str(local / "missing-dir" / "x.md")), 1, b"cannot write"),
        (("download", "notes/x.md", "/root/forbidden.md"), 1, b"cannot write"),
        (("download", "notes/nope.md", str(local / "n.md")), 5, b"not found"),
        (("download", "secret/x.md", str(local / "n.md")), 5, b'no store named "secret"'),
        (("upload", str(local / "absent.bin"), "notes/x.md"), 2, b"cannot read"),
        (("upload", str(local), "notes/x.md"), 2, b"cannot read"),
        (("upload", "/etc/hostname", "../x.md"), 2, b"invalid"),
    ]
    for argv, code, fragment in cases:
        proc = memfs_as(UID_A, daemon.socket, *argv)
        assert proc.returncode == code, (argv, proc.stderr)
        assert fragment in proc.stderr, (argv, proc.stderr)
        assert b"Traceback" not in proc.stderr
    assert sorted(os.listdir(local)) == []
