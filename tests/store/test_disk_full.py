"""A full disk: the memory's root on a small real file system (a loop-mounted ext4
image), filled through memfs. Every change that hits the limit is refused with its own
error (``no_space`` on the socket, 507 over HTTP, exit 6 from the CLI, a tool text
over MCP) and changes nothing: the files, the history (``git fsck --strict``), no
staged leftovers; the daemon stays up, says so in its log and in /metrics, and once
space is freed the same changes land."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memfs.control.client import Client, ConflictError, MemfsClientError
from memfs.control.mcp.storage import Connection, StorageTools
from tests.control.http.test_metrics import scrape, value
from tests.store.history.gitcheck import commits, head_files, repo_path, store_files
from tests.support import (
    UID_A,
    UID_B,
    UID_C,
    Daemon,
    LoopUnavailable,
    connect_as,
    daemon_ids,
    loop_filesystem,
    memfs_as,
    public_tmpdir,
    run_as,
    scaled,
)

HISTORY_STORES = ("notes", "team")
STORES = (*HISTORY_STORES, "plain")
BIG = 64 * 1024  # more than any full disk below has left


@contextlib.contextmanager
def small_filesystem(mountpoint: Path, image: Path, mib: int = 16) -> Iterator[Path]:
    """A fresh ext4 file system of ``mib`` MiB (tests.support.loop_filesystem). Skips
    only when this machine cannot loop-mount at all."""
    try:
        with loop_filesystem(mountpoint, image, mib) as disk:
            yield disk
    except LoopUnavailable as error:
        pytest.skip(f"loop devices are unavailable here: {error}")


def disk_config(base: Path) -> dict[str, Any]:
    (base / "jail").mkdir(exist_ok=True)
    os.chown(base / "jail", *daemon_ids())  # the daemon builds its sed root there
    return {
        "root": str(base / "disk" / "root"),
        "mount": str(base / "memory"),
        "socket": str(base / "control.sock"),
        "delegates": [0],
        "stores": {"notes": {}, "plain": {"history": False}, "team": {"structured": True}},
        "agents": {"alice": {"uid": UID_A, "stores": {name: "read_write" for name in STORES}},
                   "bob": {"uid": UID_B, "stores": {"notes": "read"}},
                   "carol": {"uid": UID_C, "stores": {"notes": "read"}}},
        "http": {"listen": "127.0.0.1:0"},
        "jail": {"sed_root": str(base / "jail" / "sed-root")},  # not on the small disk
    }


@pytest.fixture
def disk_base() -> Iterator[Path]:
    """A scratch directory whose ``disk/`` is a 16 MiB file system holding the root
    and a 1 MiB ballast file (the operator's, freed to make room)."""
    base = public_tmpdir("memfs-disk-")
    with small_filesystem(base / "disk", base / "disk.img") as disk:
        (disk / "ballast").write_bytes(os.urandom(1 << 20))
        yield base


@pytest.fixture
def daemon(disk_base: Path) -> Iterator[Daemon]:
    with Daemon(disk_config(disk_base), mount=True) as running:
        yield running


def refused(call: Callable[[], object], what: str = "") -> MemfsClientError:
    """The client error of a call (``what``) that must be refused for lack of space."""
    try:
        call()
    except MemfsClientError as error:
        assert error.code == "no_space", (what, error.code, error.message)
        assert "disk is full" in error.message and "nothing was changed" in error.message, \
            (what, error.message)
        return error
    pytest.fail(f"{what}: accepted on a full disk")


def fill(client: Client) -> int:
    """Write random files into store ``plain`` through memfs until not even 1 KiB
    more fits, in rounds until a round writes nothing (the file system may give room
    back after a refusal: ext4's reservations, a background writer's partial files);
    returns how many were written."""
    written = 0
    while True:
        size, before = 1 << 20, written
        while size >= 1024:
            try:
                client.write(f"plain/fill/{written}.bin", os.urandom(size))
            except MemfsClientError as error:
                assert error.code == "no_space", (error.code, error.message)
                size //= 4
                continue
            written += 1
        if written == before:
            return written


def fill_directly(directory: Path, leave: int = 0) -> None:
    """Fill the file system of ``directory`` to the last block with a file of the
    operator's (``ballast-full``), then free ``leave`` bytes of it."""
    ballast = directory / "ballast-full"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        with contextlib.suppress(OSError):  # until ENOSPC
            while True:
                os.write(fd, bytes(4096))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.truncate(ballast, max(0, ballast.stat().st_size - leave))


def snapshot(root: Path) -> dict[str, Any]:
    """Everything a refused change must leave as it was: each store's files and each
    history's head."""
    return {"files": {store: store_files(root, store) for store in STORES},
            "heads": {store: [str(c.id) for c in commits(root, store)[:1]]
                      for store in HISTORY_STORES}}


def assert_history_sound(root: Path) -> None:
    """``git fsck --strict`` is clean, and ``main``'s tree equals the files."""
    for store in HISTORY_STORES:
        done = run_as(daemon_ids()[0], ["git", "--git-dir", str(repo_path(root, store)),
                                        "fsck", "--strict"])
        assert done.returncode == 0, (store, done.stdout, done.stderr)
        assert head_files(root, store) == store_files(root, store), store


def staged_leftovers(root: Path) -> list[str]:
    return [str(entry) for directory in (root / "state" / "staging").iterdir()
            if directory.is_dir() for entry in directory.iterdir()]


def test_every_change_on_a_full_disk_is_refused_with_no_space_and_changes_nothing(
        daemon: Daemon, disk_base: Path) -> None:
    root = Path(daemon.config["root"])
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/a.md", "alpha\n")
        alice.write("plain/log.md", "first line\n")
        alice.call("task_add", store="team", task="before", title="added before the disk filled")
        filled = fill(alice)
        assert filled > 0
        fill_directly(disk_base / "disk")  # the last few blocks: small changes fail too
        before = snapshot(root)
        big = os.urandom(BIG)
        probes: dict[str, Callable[[], object]] = {
            "small create": lambda: alice.write("plain/tiny.md", "x"),
            "sed edit (history)": lambda: alice.edit("notes/a.md", ["s/alpha/beta/"]),
            "replace (history)": lambda: alice.write("notes/a.md", big),
            "create (history)": lambda: alice.write("notes/new.md", big),
            "create": lambda: alice.write("plain/new.md", big),
            "append (history)": lambda: alice.write("notes/a.md", big, append=True),
            "append": lambda: alice.write("plain/log.md", big, append=True),
            "append creating": lambda: alice.write("plain/new-log.md", big, append=True),
            "task add": lambda: alice.call("task_add", store="team", task="during",
                                           title="added while the disk is full",
                                           body="x" * 60_000),
        }
        for what, probe in probes.items():
            refused(probe, what)
        assert alice.read("notes/a.md")["text"] == "alpha\n"  # reads go on...
        with connect_as(UID_B, daemon.socket) as bob:  # ...unless they cannot be recorded
            refused(lambda: bob.read("notes/a.md"), "first read")
        cat = run_as(UID_C, ["cat", f"{daemon.config['mount']}/notes/a.md"])
        assert cat.returncode == 1 and b"No space left on device" in cat.stderr, cat
        assert snapshot(root) == before
        assert_history_sound(root)
        assert staged_leftovers(root) == []
        assert daemon.alive()
        assert "the memory's disk is full" in daemon.log()  # the warning
        # recall's index waits for room: removing it would free room for a change
        assert list((root / "state" / "recall").glob("*/index/meta.json"))

        for ballast in (disk_base / "disk").glob("ballast*"):
            ballast.unlink()  # the operator frees space
        for number in range(filled):  # and the agent its files: room for recall's index
            alice.delete(f"plain/fill/{number}.bin", force=True)
        alice.write("notes/a.md", "alpha, after\n")
        alice.write("notes/new.md", big)
        alice.write("plain/log.md", "second line\n", append=True)
        alice.write("notes/a.md", "more\n", append=True)
        alice.call("task_add", store="team", task="after", title="added after space was freed")
        assert alice.read("notes/a.md")["text"] == "alpha, after\nmore\n"
        with connect_as(UID_B, daemon.socket) as bob:
            assert bob.read("notes/a.md")["text"] == "alpha, after\nmore\n"
        alice.write("notes/marmots.md", "the marmots moved north\n")
        # Recall catches up once its index has room (an index write may still find the
        # disk too full right after, and then its answer names the stores it is
        # catching up with); then it finds what was written.
        deadline = time.monotonic() + scaled(60)
        answer = alice.recall("marmots")
        while answer["indexing"] and time.monotonic() < deadline:
            time.sleep(0.2)
            answer = alice.recall("marmots")
        found = [hit["path"] for hit in answer["hits"]]
        assert found == ["notes/marmots.md"], (answer, daemon.log()[-3000:])
    assert_history_sound(root)
    heads = snapshot(root)["heads"]
    daemon.stop()
    daemon.start()  # the restart finds nothing to recover: history matched the files
    assert snapshot(root)["heads"] == heads


@pytest.fixture
def quiet_daemon(disk_base: Path) -> Iterator[Daemon]:
    """A daemon on the small disk that keeps no recall index (which may give back room
    the test has just filled: a refused index write removes its partial files)."""
    with Daemon({**disk_config(disk_base), "recall": False}, mount=True) as running:
        yield running


def test_a_full_disk_over_http_cli_and_mcp_and_in_metrics(quiet_daemon: Daemon,
                                                          disk_base: Path) -> None:
    daemon = quiet_daemon
    token = daemon.token("alice")  # tokens.json is written before the disk fills
    with connect_as(UID_A, daemon.socket) as alice, \
            httpx.Client(base_url=daemon.http_url, timeout=60,
                         headers={"Authorization": f"Bearer {token}"}) as http:
        alice.write("notes/a.md", "alpha\n")
        assert value(scrape(http), "memfs_disk_full") == 0
        fill(alice)
        big = os.urandom(BIG)

        response = http.put("/v1/stores/notes/files/h.md", content=big)
        assert response.status_code == 507, response.text
        body = response.json()
        assert body["code"] == "no_space" and body["title"] == "Insufficient storage"
        assert "disk is full" in body["detail"]
        response = http.patch("/v1/stores/notes/files/a.md", json={"append": "x" * BIG})
        assert response.status_code == 507, response.text

        cli = memfs_as(UID_A, daemon.socket, "write", "notes/cli.md", input=big)
        assert cli.returncode == 6, cli
        assert b"no space" in cli.stderr and b"disk is full" in cli.stderr, cli.stderr

        tools = StorageTools(Connection(str(daemon.socket), as_agent="alice"))
        outcome = tools.write(path="notes/mcp.md", content="y" * BIG)
        assert outcome.is_error
        assert "disk is full" in outcome.text and "nothing was changed" in outcome.text
        assert "retry" in outcome.text

        samples = scrape(http)
        assert value(samples, "memfs_disk_full") == 1
        assert value(samples, "memfs_operations_total", op="write", outcome="no_space") >= 4
        full = value(samples, "memfs_disk_available_bytes")

        (disk_base / "disk" / "ballast").unlink()
        assert value(scrape(http), "memfs_disk_available_bytes") > full
        assert http.put("/v1/stores/notes/files/h.md", content=big).status_code == 201
        assert value(scrape(http), "memfs_disk_full") == 0
    assert memfs_as(UID_A, daemon.socket, "write", "notes/cli.md", input=big).returncode == 0


# -- part of the state on a file system of its own ---------------------------------------


@contextlib.contextmanager
def state_on_its_own_disk(part: str) -> Iterator[tuple[Path, Path]]:
    """(base, ROOT/state/PART): a config's root on the ordinary disk, but that part of
    its state a small file system of its own (the daemon's user's, as an operator
    would make it: the daemon adopts nothing on another file system), which a test
    fills."""
    base = public_tmpdir(f"memfs-{part}-disk-")
    with small_filesystem(base / "root" / "state" / part, base / f"{part}.img",
                          mib=8) as mounted:
        os.chown(mounted, *daemon_ids())
        yield base, mounted


@pytest.fixture
def history_disk() -> Iterator[tuple[Path, Path]]:
    with state_on_its_own_disk("history") as disk:
        yield disk


@pytest.fixture
def seen_disk() -> Iterator[tuple[Path, Path]]:
    with state_on_its_own_disk("seen") as disk:
        yield disk


def history_config(base: Path) -> dict[str, Any]:
    config = disk_config(base)
    config["root"] = str(base / "root")
    del config["http"]
    return config


def test_a_blob_that_cannot_be_written_refuses_the_write(
        history_disk: tuple[Path, Path]) -> None:
    """The history's disk is full (but for a few blocks) while the files' is not: a
    write whose blob cannot be stored is refused, instead of landing with a history
    commit that records the file as deleted."""
    base, history = history_disk
    with Daemon(history_config(base)) as daemon, connect_as(UID_A, daemon.socket) as alice:
        root = Path(daemon.config["root"])
        alice.write("notes/a.md", "alpha\n")
        fill_directly(history, leave=16 * 1024)  # room for a tree and a commit, no blob
        before = snapshot(root)
        refused(lambda: alice.write("notes/a.md", os.urandom(BIG)), "replace")
        assert snapshot(root) == before
        assert head_files(root, "notes")["a.md"] == b"alpha\n"
        assert_history_sound(root)
        assert staged_leftovers(root) == []
        (history / "ballast-full").unlink()
        alice.write("notes/a.md", "beta\n")
        assert head_files(root, "notes")["a.md"] == b"beta\n"


def test_a_history_commit_that_cannot_be_written_refuses_the_change(
        history_disk: tuple[Path, Path]) -> None:
    """The history's disk is full: a write whose blob is there already (the same bytes
    as another file) but whose tree and commit cannot be stored is refused with
    no_space, and nothing changes."""
    base, history = history_disk
    with Daemon(history_config(base)) as daemon, connect_as(UID_A, daemon.socket) as alice:
        root = Path(daemon.config["root"])
        alice.write("notes/a.md", "alpha\n")
        alice.write("notes/b.md", "beta\n")
        fill_directly(history)
        before = snapshot(root)
        # Its blob exists (a.md's), but there is no room for a tree or a commit.
        refused(lambda: alice.write("notes/b.md", "alpha\n"), "replace")
        assert snapshot(root) == before
        assert_history_sound(root)
        assert daemon.alive()


def test_a_change_whose_writers_record_cannot_be_kept_stands_and_says_so(
        seen_disk: tuple[Path, Path]) -> None:
    """The seen records' disk is full: a write lands (its record is kept after the
    file is in place, when nothing can be refused any more) and is acknowledged; the
    writer's next blind write is a conflict, never a lost update; a read, whose
    record cannot be kept, is refused with no_space."""
    base, seen = seen_disk
    with Daemon(history_config(base)) as daemon, connect_as(UID_A, daemon.socket) as alice:
        root = Path(daemon.config["root"])
        fill_directly(seen)
        assert alice.write("notes/a.md", "alpha\n")["created"]
        assert store_files(root, "notes") == head_files(root, "notes") == {"a.md": b"alpha\n"}
        with pytest.raises(ConflictError):
            alice.write("notes/a.md", "beta\n")
        refused(lambda: alice.read("notes/a.md"), "read")
        (seen / "ballast-full").unlink()
        assert alice.read("notes/a.md")["text"] == "alpha\n"
        alice.write("notes/a.md", "beta\n")
        assert "alice's record of notes/a.md was not updated" in daemon.log()
