"""Files are the source of truth: what differs from the history at start is committed
as `recover:`; a missing or corrupt repository is rebuilt and the daemon serves; a
change a crash cut short between its rename and its commit is finished by the next
daemon (history and the writer's seen record)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import zlib
from pathlib import Path

import blake3
import pytest

from memfs.control.client import MemfsClientError
from memfs.store import crashpoints
from memfs.store.history import gitobjects
from memfs.store.history.maintenance import PACK_AFTER
from memfs.store.history.repo import Change
from memfs.store.history.store_history import StoreHistory
from memfs.store.read import versions
from tests.store.history.conftest import history_config
from tests.store.history.gitcheck import (
    assert_valid_git,
    commits,
    git,
    loose_files,
    pack_ids,
    repo_path,
    store_files,
    trailers,
    tree_files,
)
from tests.support import (
    UID_A,
    Daemon,
    as_euid,
    connect_as,
    daemon_ids,
    killed_at,
    public_tmpdir,
    scaled,
)


def started(config: dict[str, object]) -> Daemon:
    return Daemon(config).start()


def test_changes_made_by_hand_are_recovered_at_start() -> None:
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/kept.md", "kept\n")
        alice.write("notes/edited.md", "before\n")
        alice.write("notes/removed.md", "gone soon\n")
    notes = root / "stores" / "notes"
    (notes / "edited.md").write_text("edited by an operator\n")
    (notes / "removed.md").unlink()
    (notes / "sub").mkdir()
    (notes / "sub" / "added.md").write_text("added by hand\n")
    with Daemon(config) as daemon:
        head = commits(root, "notes")[0]
        assert head.message.startswith("recover: 3 paths of notes")
        assert head.author.name == "memfs" and trailers(head)["Memfs-Op"] == "recover"
        for line in ("changed: notes/edited.md", "deleted: notes/removed.md",
                     "changed: notes/sub/added.md"):
            assert line in head.message
        assert tree_files(head) == store_files(root, "notes")
        count = len(commits(root, "notes"))
    with Daemon(config):  # nothing changed since: no new commit
        assert len(commits(root, "notes")) == count


def test_a_deleted_repository_is_rebuilt_and_the_daemon_serves() -> None:
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/a.md", "a\n")
        alice.write("notes/b/c.md", "c\n")
    shutil.rmtree(repo_path(root, "notes"))
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        history = commits(root, "notes")
        assert len(history) == 1 and history[0].message.startswith("recover:")
        assert tree_files(history[0]) == store_files(root, "notes")
        alice.write("notes/a.md", "after\n", force=True)
        assert len(alice.log("notes")) == 2


def test_a_corrupt_repository_is_moved_aside_and_rebuilt() -> None:
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/a.md", "a\n")
    repo = repo_path(root, "notes")
    for loose in (repo / "objects").rglob("*"):
        if loose.is_file():
            loose.write_bytes(b"garbage")
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        assert alice.read("notes/a.md")["text"] == "a\n"
        assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")
        assert "unreadable" in daemon.log() or "damaged" in daemon.log()
    assert any(p.name.startswith("notes.git.broken-") for p in repo.parent.iterdir())


def test_a_commit_cut_short_is_finished_with_the_writers_record() -> None:
    """The state a kill between the rename and the rest of the landing leaves: the file
    holds alice's new version, the intent is on the lock file, her seen record and the
    history are behind. The next daemon repairs both: her next write is accepted."""
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/cut.md", "v0\n")
    new = b"v1 renamed, never acknowledged\n"
    digest = blake3.blake3(new).hexdigest()
    target = root / "stores" / "notes" / "cut.md"
    staged = target.with_name(".staged")
    staged.write_bytes(new)
    fd = os.open(staged, os.O_RDONLY)
    versions.stamp(fd, digest, "alice", 0.0)
    os.close(fd)
    lock = root / "state" / "locks" / "notes.lock"
    head = str(commits(root, "notes")[0].id)  # the landing started from this head
    os.setxattr(lock, "user.memfs.pending", json.dumps(
        {"agent": "alice", "head": head, "paths": {"cut.md": digest},
         "record": ["cut.md"]}).encode())
    os.rename(staged, target)
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/cut.md", "v2 based on v1\n")  # no conflict: her record was set
        log = alice.log("notes/cut.md")
        assert [e["op"] for e in log[:2]] == ["write", "recover"]
    assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")


def test_a_ref_lock_left_by_a_killed_daemon_does_not_stop_history() -> None:
    """libgit2 refuses to update a ref whose .lock file exists; a daemon killed during
    the update leaves one. The next commit (under the store lock) clears it."""
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/l.md", "one\n")
        (repo_path(root, "notes") / "refs" / "heads" / "main.lock").write_text("stale\n")
        result = alice.write("notes/l.md", "two\n")
        assert str(commits(root, "notes")[0].id) == result["commit"]
    assert not any(".broken-" in p.name for p in repo_path(root, "notes").parent.iterdir())


def test_daemons_sharing_a_root_note_the_durable_head_side_by_side(tmp_path: Path) -> None:
    """Two daemons on one root (here two StoreHistory objects on one repository) make
    their commits durable at the same moment: each notes the durable head without
    taking the other's temporary file (once a shared name: one rename found it gone
    and history maintenance failed)."""
    path = tmp_path / "notes.git"
    histories = [StoreHistory(path, "notes") for _ in range(2)]
    rounds = 150
    start = threading.Barrier(2, timeout=60)
    failures: list[BaseException] = []

    def syncer(history: StoreHistory, seed: int) -> None:
        for index in range(rounds):
            start.wait()
            if index % 2 == seed:  # the two take turns at committing (under the lock)
                with lock:
                    history.commit([], author="a", email="a@memfs.invalid",
                                   message=f"round {index}")
            start.wait()
            try:
                history._dirty = True  # both have commits to make durable
                history.sync()
            except OSError as error:
                failures.append(error)

    lock = threading.Lock()
    threads = [threading.Thread(target=syncer, args=(history, seed))
               for seed, history in enumerate(histories)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures[:3]
    head = histories[0].head_id()
    assert head is not None and histories[1].durable_head() == head
    assert not list(tmp_path.glob("*.tmp"))


def test_many_loose_objects_are_packed_in_bounded_packs() -> None:
    """A store planted by hand is recorded at start as one loose blob per file; the
    daemon's maintenance packs them PACK_AFTER at a time (libgit2 holds a whole pack in
    memory while building it: one pack of 100,000 blobs cost 27 MB), then merges the
    packs without libgit2. Killed after its second pack, a daemon has built two of at
    most PACK_AFTER objects; the next one packs the rest and merges them all, and
    plain git reads every object from the packs."""
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    planted = root / "stores" / "notes" / "many"
    planted.mkdir(parents=True)
    files = 2 * PACK_AFTER + 100
    for n in range(files):
        (planted / f"{n:05d}.md").write_text(f"planted {n}\n")
    Daemon(config, env={crashpoints.ENV: "history.packed@2"}).run_until_killed()
    sizes = [len(ids) for ids in pack_ids(root, "notes")]
    assert len(sizes) == 2 and max(sizes) <= PACK_AFTER, sizes
    with Daemon(config):
        deadline = time.monotonic() + scaled(60)
        while loose_files(root, "notes") or len(pack_ids(root, "notes")) > 1:
            assert time.monotonic() < deadline, f"not packed and merged after 60 s: {sizes}"
            time.sleep(0.1)
    packed = pack_ids(root, "notes")[0]
    assert len(packed) == len(set(packed)) >= files  # every planted blob (and the trees)
    git(root, "notes", "fsck", "--strict", "--no-dangling")
    assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")


# The steps of one write and of one append, in order (memfs/store/crashpoints.py).
WRITE_STEPS = ["stage", "land.prepared", "land.intent", "land.rename", "land.records",
               "land.commit"]


@pytest.mark.slow
def test_a_write_killed_at_any_step_keeps_its_author_in_history() -> None:
    """Killed between any two steps of a write, the next daemon finds the old or the
    new version (the rename decides) and, when the new one landed, its own commit by
    its agent (the commit prepared before the rename), never an anonymous recover:;
    plain git finds the repository valid."""
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    target = root / "stores" / "notes" / "step.md"
    for index, step in enumerate(WRITE_STEPS):
        with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/step.md", f"before {index}\n", force=True)
        with killed_at(config, step) as crashing, connect_as(UID_A, crashing.socket) as alice, \
                pytest.raises(MemfsClientError):
            alice.write("notes/step.md", f"after {index}\n", force=True)
        with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
            landed = target.read_text() == f"after {index}\n"
            assert landed == (index >= WRITE_STEPS.index("land.rename")), step
            head = commits(root, "notes")[0]
            assert tree_files(head) == store_files(root, "notes"), step
            if landed:
                assert head.message.startswith("write notes/step.md"), step
                assert head.author.name == "alice", step
            alice.write("notes/step.md", "next\n")  # her record says she wrote it
        git(root, "notes", "fsck", "--strict", "--no-dangling")


APPEND_STEPS = ["append.prepared", "append.marked", "append.written", "append.stamped",
                "append.records"]


@pytest.mark.slow
def test_an_append_killed_at_any_step_is_whole_or_none_with_its_author() -> None:
    """Killed between any two steps of an append in place, the next daemon finds the
    file as it was or with the whole appended text (an append cut short is truncated
    back), and an append that landed has its own commit by its agent."""
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    target = root / "stores" / "notes" / "log.md"
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/log.md", "start\n")
    expected = "start\n"
    for index, step in enumerate(APPEND_STEPS):
        with killed_at(config, step) as crashing, connect_as(UID_A, crashing.socket) as alice, \
                pytest.raises(MemfsClientError):
            alice.write("notes/log.md", f"line {index}\n", append=True)
        with Daemon(config) as daemon:
            landed = index >= APPEND_STEPS.index("append.stamped")
            if landed:
                expected += f"line {index}\n"
            assert target.read_text() == expected, step
            head = commits(root, "notes")[0]
            assert tree_files(head) == store_files(root, "notes"), step
            if landed:
                assert head.message.startswith("append notes/log.md"), step
                assert head.author.name == "alice", step
        git(root, "notes", "fsck", "--strict", "--no-dangling")


def loose_object(data: bytes) -> tuple[str, bytes]:
    """The id and the loose file's bytes (git's format) of a blob of ``data``."""
    raw = b"blob %d\0" % len(data) + data
    return hashlib.sha1(raw).hexdigest(), zlib.compress(raw)


def test_what_kills_left_in_the_objects_is_removed_and_the_rest_packed() -> None:
    """Older versions wrote each loose object in place, so a kill left empty or
    truncated object files, and temporary ones; then `git fsck --strict` and `git gc`
    failed, and so did packing, for good (nor was it tried: the count of objects to
    pack started from zero at every start). The daemon removes them, packs what an
    earlier daemon left loose, and git is happy."""
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        for n in range(20):
            alice.write(f"notes/kept/{n}.md", f"kept {n}\n")
    # Changes are written in packs; recover: commits (and older versions' commits) are
    # written as loose objects, as here, by the daemon's user.
    with as_euid(daemon_ids()[0]):
        history = StoreHistory(repo_path(root, "notes"), "notes")
        for n in range(45):
            history.blob(b"left loose %d\n" % n)
    objects = repo_path(root, "notes") / "objects"
    left = loose_files(root, "notes")
    assert len(left) > 40  # loose objects an earlier daemon left (fewer than PACK_AFTER)
    empty = objects / "ab" / ("c" * 38)
    truncated_id, body = loose_object(os.urandom(5000))
    truncated = objects / truncated_id[:2] / truncated_id[2:]
    old_temporary = objects / "cd" / f"{'e' * 38}.4242-0badcafe.tmp"
    temporary = objects / "cd" / "tmp_obj_Xy12Ab"
    pack_temporaries = [objects / "pack" / "pack_git2_AbCdEf", objects / "pack" / "tmp_pack_1"]
    for path, content in [(empty, b""), (truncated, body[:len(body) // 2]),
                          (old_temporary, body), (temporary, body[:10]),
                          *((path, b"partial") for path in pack_temporaries)]:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(content)
        hours_ago = time.time() - 2 * 3600  # older than a write in progress could be
        os.utime(path, (hours_ago, hours_ago))
    broken = subprocess.run(["git", "--git-dir", str(repo_path(root, "notes")), "fsck",
                             "--strict"], capture_output=True, text=True)
    assert broken.returncode != 0 and "is empty" in broken.stderr  # what the issue saw
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        deadline = time.monotonic() + scaled(60)
        while loose_files(root, "notes") or any(p.exists() for p in pack_temporaries):
            assert time.monotonic() < deadline, f"left: {loose_files(root, 'notes')[:5]}"
            time.sleep(0.1)
        alice.write("notes/after.md", "after the clean-up\n")
    assert_valid_git(root, "notes")
    assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")
    assert len(commits(root, "notes")) == 21


def test_a_write_replaces_an_object_file_a_power_loss_left_empty(tmp_path: Path) -> None:
    """A power loss can keep an object's name but not its bytes: writing the same
    object again makes it whole."""
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    data = b"written before the power went\n"
    oid, body = loose_object(data)
    path = repo_path(tmp_path, "notes") / "objects" / oid[:2] / oid[2:]
    path.parent.mkdir()
    path.write_bytes(b"")
    assert str(history.blob(data)) == oid
    assert zlib.decompress(path.read_bytes()) == zlib.decompress(body)


def test_objects_are_written_without_o_tmpfile_where_the_file_system_has_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a file system without O_TMPFILE (a FUSE mount such as GlusterFS), each object
    is written under a temporary name and renamed into place: nothing else is left."""
    real_open = os.open
    refused = []

    def refusing(path: str, flags: int, mode: int = 0o777, **kwargs: object) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            refused.append(path)
            raise OSError(errno.EOPNOTSUPP, "O_TMPFILE not supported")
        return real_open(path, flags, mode, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gitobjects.os, "open", refusing)
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    for n in range(20):
        history.commit([Change(f"f{n % 3}.md", history.blob(b"version %d\n" % n))],
                       author="alice", email="alice@memfs.invalid", message=f"write {n}\n")
    names = [path.name for path in loose_files(tmp_path, "notes")]
    assert len(refused) == 1  # tried once, then never again
    assert len(names) >= 40 and all(len(name) == 38 for name in names), names
    assert_valid_git(tmp_path, "notes")


def test_objects_are_compressed_with_a_window_their_size_and_git_reads_them(
        tmp_path: Path) -> None:
    """A loose object's zlib stream has a window no larger than the object needs (zlib's
    default one is allocated and cleared for every stream); git reads every one."""
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    big = os.urandom(100_000)
    history.commit([Change("a/small.md", history.blob(b"small\n")),
                    Change("big.bin", history.blob(big))],
                   author="alice", email="alice@memfs.invalid", message="write\n")
    windows = {}
    for path in loose_files(tmp_path, "notes"):
        raw = path.read_bytes()
        windows[len(zlib.decompress(raw))] = 1 << ((raw[0] >> 4) + 8)  # CINFO
    assert all(window < 2 * size or window == 512 for size, window in windows.items()
               if size < 32768), windows
    assert windows[max(windows)] == 32768  # the big blob: zlib's largest window
    assert_valid_git(tmp_path, "notes")
    shown = subprocess.run(["git", "--git-dir", str(repo_path(tmp_path, "notes")), "show",
                            "main:big.bin"], capture_output=True, check=True).stdout
    assert shown == big
