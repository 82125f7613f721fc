"""Things planted in the backing directory never lead outside a store or block the
daemon: symlinks (to files and to directories), FIFOs, sockets."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from control.client import InvalidError, NotFoundError
from tests.support import UID_A, Daemon, connect_as, public_tmpdir, standard_config


@pytest.fixture(scope="module")
def planted() -> Iterator[tuple[Daemon, Path]]:
    base = public_tmpdir()
    with Daemon(standard_config(base)) as daemon:
        notes = Path(daemon.config["root"]) / "stores" / "notes"
        (notes / "real.md").write_text("real\n")
        (notes / "link-to-passwd").symlink_to("/etc/passwd")
        (notes / "link-to-secret").symlink_to("../secret")
        (notes / "link-dir").symlink_to("/etc")
        os.mkfifo(notes / "fifo")
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(notes / "sock"))
        yield daemon, notes
        sock.close()


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("notes/link-to-passwd", InvalidError),
        ("notes/link-dir/passwd", InvalidError),
        ("notes/link-to-secret/x", InvalidError),
        ("notes/fifo", InvalidError),
        ("notes/sock", InvalidError),
        ("notes/nothing-here", NotFoundError),
    ],
)
def test_reads_never_follow_or_block(planted: tuple[Daemon, Path], path: str,
                                     error: type[Exception]) -> None:
    daemon, _ = planted
    with connect_as(UID_A, daemon.socket) as alice:
        with pytest.raises(error):
            alice.read(path)
        assert alice.read("notes/real.md")["text"] == "real\n"  # still serving


@pytest.mark.parametrize("path", ["notes/link-dir/evil", "notes/link-to-passwd",
                                  "notes/fifo", "notes/link-to-secret/x"])
def test_writes_never_go_through_planted_things(planted: tuple[Daemon, Path], path: str) -> None:
    daemon, notes = planted
    before = Path("/etc/passwd").read_bytes()
    with connect_as(UID_A, daemon.socket) as alice:
        with pytest.raises(InvalidError):
            alice.write(path, "evil\n", force=True)
        with pytest.raises(InvalidError):
            alice.write(path, "evil\n", append=True)
    assert Path("/etc/passwd").read_bytes() == before
    assert not Path("/etc/evil").exists()
    assert (notes / "link-to-passwd").is_symlink()


def test_listing_shows_regular_files_only(planted: tuple[Daemon, Path]) -> None:
    daemon, _ = planted
    with connect_as(UID_A, daemon.socket) as alice:
        assert alice.list("notes/**") == ["notes/real.md"]


def test_private_state_is_not_store_content(planted: tuple[Daemon, Path]) -> None:
    daemon, _ = planted
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/visible.md", "x\n", force=True)
        listed = alice.list()
        assert all(p.split("/")[0] in ("notes", "ops") for p in listed)
        assert not any("staging" in p or "seen" in p for p in listed)
