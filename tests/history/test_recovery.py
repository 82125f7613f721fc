"""Files are the source of truth: what differs from the history at start is committed
as `recover:`; a missing or corrupt repository is rebuilt and the daemon serves; a
change a crash cut short between its rename and its commit is finished by the next
daemon (history and the writer's seen record)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import blake3
import pytest

from control.client import MemfsClientError
from memfs.store import versions
from memfs.store.history import PACK_AFTER, StoreHistory
from tests.history.conftest import history_config
from tests.history.gitcheck import (
    commits,
    git,
    repo_path,
    store_files,
    trailers,
    tree_files,
)
from tests.support import UID_A, Daemon, connect_as, killed_at, public_tmpdir


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
    memory while building it: one pack of 100,000 blobs cost 27 MB), and plain git
    reads every object from the packs."""
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    planted = root / "stores" / "notes" / "many"
    planted.mkdir(parents=True)
    files = 2 * PACK_AFTER + 100
    for n in range(files):
        (planted / f"{n:05d}.md").write_text(f"planted {n}\n")
    with Daemon(config):
        for _ in range(600):  # maintenance runs every second
            counted = git(root, "notes", "count-objects", "-v")
            fields = dict(line.split(": ") for line in counted.splitlines())
            if int(fields["count"]) == 0:  # every loose object packed
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"loose objects left after 60 s: {counted}")
    indexes = sorted((repo_path(root, "notes") / "objects" / "pack").glob("*.idx"))
    sizes = [len(subprocess.run(["git", "show-index"], stdin=index.open("rb"),
                                capture_output=True, check=True).stdout.splitlines())
             for index in indexes]
    assert len(sizes) >= 3 and max(sizes) <= PACK_AFTER, sizes
    assert sum(sizes) >= files  # every planted blob (and the trees) in a pack
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
