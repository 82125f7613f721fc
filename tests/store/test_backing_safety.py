"""Things planted in the backing directory never lead outside a store or block the
daemon: symlinks (to files and to directories), FIFOs, sockets."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.control.client import InvalidError, NotFoundError
from tests.support import UID_A, Daemon, connect_as, plant, public_tmpdir, standard_config


@pytest.fixture(scope="module")
def planted() -> Iterator[tuple[Daemon, Path]]:
    base = public_tmpdir()
    with Daemon(standard_config(base)) as daemon:
        notes = Path(daemon.config["root"]) / "stores" / "notes"
        plant(notes / "real.md", "real\n")
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


# -- hard links planted by root ----------------------------------------------------------

HARDLINK_SECRET = "HARDLINK-SECRET-51c2"
ROOT_ONLY = "ROOT-ONLY-CONTENT-9e07"


@pytest.fixture(scope="module")
def linked() -> Iterator[tuple[Daemon, Path]]:
    """`notes` holds hard links to a file of the unattached store `secret` (the
    daemon's own) and to a root-only 0600 file outside the root, plus a FIFO; all
    planted by root."""
    base = public_tmpdir()
    with Daemon(standard_config(base, jail={"timeout_seconds": 5})) as daemon:
        stores = Path(daemon.config["root"]) / "stores"
        secret = stores / "secret" / "s.txt"
        plant(secret, f"{HARDLINK_SECRET}\n")
        private = base / "root-only.txt"
        private.write_text(f"{ROOT_ONLY}\n")
        private.chmod(0o600)
        notes = stores / "notes"
        os.link(secret, notes / "hl")
        os.link(private, notes / "hl-private")
        (notes / "sub").mkdir()
        os.link(private, notes / "sub" / "deep[1]*.txt")  # glob characters in the name
        os.mkfifo(notes / "fifo")
        plant(notes / "real.md", "real\n")
        yield daemon, base
        for planted in (notes / "hl", notes / "hl-private", notes / "sub" / "deep[1]*.txt"):
            planted.unlink()


@pytest.mark.parametrize("path", ["notes/hl", "notes/hl-private", "notes/sub/deep[1]*.txt"])
def test_hard_links_are_never_read(linked: tuple[Daemon, Path], path: str) -> None:
    daemon, _ = linked
    with connect_as(UID_A, daemon.socket) as alice:
        with pytest.raises(InvalidError) as caught:
            alice.read(path)
        assert "hard link" in caught.value.message
        with pytest.raises(InvalidError):
            alice.stat(path)
        with pytest.raises(InvalidError):  # nor written through
            alice.write(path, "overwrite\n", force=True)
        assert "notes/real.md" in alice.list()
        assert not any(p.startswith(("notes/hl", "notes/sub")) for p in alice.list("notes/**"))


def test_hard_links_are_never_searched(linked: tuple[Daemon, Path]) -> None:
    daemon, _ = linked
    with connect_as(UID_A, daemon.socket) as alice:
        for args in (["-uuu", "-a", "."], ["--files", "-uuu"], ["-uuu", "-g", "hl*", "."],
                     ["-uuu", "-g", "notes/**", "-g", "*", "-l", "."]):
            result = alice.search(args)
            assert HARDLINK_SECRET not in result["output"], args
            assert ROOT_ONLY not in result["output"], args
            assert "notes/hl" not in result["output"], args
            assert "deep[1]" not in result["output"], args
        assert "notes/real.md" in alice.search(["--files"])["output"]
        for named in ("notes/hl", "notes/hl-private", "notes/sub/deep[1]*.txt"):
            with pytest.raises(InvalidError) as caught:
                alice.search(["-a", ".", named])
            assert "not a file memfs shows" in caught.value.message


def test_fifo_as_search_path_is_refused_at_once(linked: tuple[Daemon, Path]) -> None:
    """rg blocks on a FIFO given by name until the jail's time limit: refused first."""
    daemon, _ = linked
    with connect_as(UID_A, daemon.socket) as alice, pytest.raises(InvalidError) as caught:
        alice.search(["x", "notes/fifo"])
    assert "not a file memfs shows" in caught.value.message  # not the time limit


def test_foreign_inodes_are_never_stamped(linked: tuple[Daemon, Path]) -> None:
    daemon, base = linked
    with connect_as(UID_A, daemon.socket) as alice:
        for path in ("notes/hl", "notes/hl-private"):
            with pytest.raises(InvalidError):
                alice.read(path)
        alice.search(["-uuu", "."])
    secret = Path(daemon.config["root"]) / "stores" / "secret" / "s.txt"
    for inode in (base / "root-only.txt", secret):
        assert "user.memfs.version" not in os.listxattr(inode), inode


def test_a_planted_version_record_cannot_break_a_reply(planted: tuple[Daemon, Path]) -> None:
    """A version record written by hand with an absurd time and an agent name no reply
    can carry: the read answers (the record's oddities are dropped), never internal."""
    daemon, notes = planted
    target = plant(notes / "odd-record.md", "odd\n")
    st = target.stat()
    record = ('{"b3":"' + "0" * 64 + f'","size":{st.st_size},"mtime_ns":{st.st_mtime_ns},'
              '"agent":"\\ud800","at":' + "9" * 400 + "}")
    os.setxattr(target, "user.memfs.version", record.encode())
    with connect_as(UID_A, daemon.socket) as alice:
        result = alice.read("notes/odd-record.md")
    assert (result["last_writer"], result["last_written_at"]) == (None, None)


def test_ls_accepts_the_configured_mount_prefix(planted: tuple[Daemon, Path]) -> None:
    daemon, _ = planted
    mount = daemon.config["mount"]
    with connect_as(UID_A, daemon.socket) as alice:
        assert alice.list(f"{mount}/notes/real.md") == ["notes/real.md"]
        assert alice.read(f"{mount}/notes/real.md")["path"] == "notes/real.md"
