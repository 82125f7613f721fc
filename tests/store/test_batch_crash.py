"""Group commit under SIGKILL: a batch of concurrent changes from several writers
(replaces, a create, a delete, appends by two agents to one file) landed together
(memfs/store/write/landing.py), the daemon killed between every pair of its steps
(memfs/store/crashpoints.py; ``MEMFS_TEST_BATCH`` makes the batch gather all of them,
whatever the scheduling). After a restart: every acknowledged change is on disk and, with
history, on ``main`` exactly once with its author and trailers; every change that was
not acknowledged is absent, or there whole with its own commit (never a ``recover:``);
the writers' records say what landed; the tree of ``main`` is the files, `git fsck
--strict` is clean and `git gc` works; no staged file is left. Also: a batch lands as one
pack with a commit per change, conflicts inside a batch are decided as if the changes
came one after another, appends to one file land as one write with a commit each, and
an intent an older memfs left in the lock file's xattr is finished at start."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import blake3
import pygit2
import pytest

from memfs.control.client import Client, ConflictError, MemfsClientError, NotFoundError
from memfs.store import crashpoints
from memfs.store.history.repo import Change, message_for
from memfs.store.history.store_history import StoreHistory
from memfs.store.read.versions import stamp
from memfs.store.write import store
from tests.store.history.gitcheck import (
    assert_valid_git,
    commits,
    loose_files,
    pack_ids,
    repo_path,
    store_files,
    trailers,
    tree_files,
)
from tests.support import (
    UID_A,
    UID_B,
    Daemon,
    as_euid,
    connect_as,
    daemon_ids,
    killed_at,
    public_tmpdir,
    standard_config,
)

BATCH = "MEMFS_TEST_BATCH"


def batch_config(history: bool) -> dict[str, Any]:
    config = standard_config(public_tmpdir())
    config["stores"]["notes"] = {"history": history}
    return config


class Sent:
    """One change of the batch, sent by its own connection; ``result`` is its reply
    (acknowledged) or None."""

    def __init__(self, uid: int, agent: str, op: str, rel: str, data: bytes | None) -> None:
        self.uid, self.agent, self.op, self.rel, self.data = uid, agent, op, rel, data
        self.result: dict[str, Any] | None = None
        self.error: Exception | None = None
        self.client: Client | None = None

    def send(self) -> None:
        assert self.client is not None
        try:
            if self.op == "delete":
                self.result = dict(self.client.delete(f"notes/{self.rel}"))
            else:
                self.result = dict(self.client.write(f"notes/{self.rel}", self.data or b"",
                                                     append=self.op == "append"))
        except MemfsClientError as error:  # the daemon died: not acknowledged
            self.error = error


def changes(k: int) -> list[Sent]:
    return [
        Sent(UID_A, "alice", "write", "b/one.md", f"one after {k}\n".encode()),
        Sent(UID_A, "alice", "append", "b/log.md", f"alice {k}\n".encode()),
        Sent(UID_B, "bob", "append", "b/log.md", f"bob {k}\n".encode()),
        Sent(UID_B, "bob", "delete", "b/gone.md", None),
        Sent(UID_A, "alice", "write", "b/new.md", f"new {k}\n".encode()),
        Sent(UID_B, "bob", "write", "b/two.md", f"two after {k}\n".encode()),
    ]


def set_up(daemon: Daemon, k: int) -> None:
    """The files before the batch, each read by the agent that changes it."""
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
        alice.write("notes/b/one.md", f"one before {k}\n", force=True)
        bob.write("notes/b/two.md", f"two before {k}\n", force=True)
        bob.write("notes/b/gone.md", f"gone {k}\n", force=True)
        with contextlib.suppress(NotFoundError):
            alice.delete("notes/b/new.md", force=True)
        alice.write("notes/b/log.md", f"log {k}\n", force=True)
        alice.read("notes/b/log.md")
        alice.read("notes/b/one.md")
        bob.read("notes/b/two.md")
        bob.read("notes/b/gone.md")


def send_batch(daemon: Daemon, batch: list[Sent]) -> None:
    for change in batch:
        change.client = connect_as(change.uid, daemon.socket)
    threads = [threading.Thread(target=change.send) for change in batch]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for change in batch:
        assert change.client is not None
        change.client.close()


def head_id(root: Path) -> str | None:
    made = commits(root, "notes")
    return str(made[0].id) if made else None


def since(root: Path, head: str | None) -> list[pygit2.Commit]:
    """The commits on main after ``head``, oldest first."""
    made = []
    for commit in commits(root, "notes"):
        if str(commit.id) == head:
            break
        made.append(commit)
    return made[::-1]


def check(root: Path, daemon: Daemon, batch: list[Sent], k: int, before: str | None,
          history: bool, step: str) -> None:
    files = store_files(root, "notes")
    landed: dict[int, bool] = {}
    for n, change in enumerate(batch):
        if change.op == "write":
            old = None if change.rel == "b/new.md" else f"{change.rel[2:-3]} before {k}\n"
            now = files.get(change.rel)
            assert now in (change.data, None if old is None else old.encode()), (step, change.rel)
            landed[n] = now == change.data
        elif change.op == "delete":
            landed[n] = change.rel not in files
    log = files["b/log.md"].decode()
    lines = log.splitlines(keepends=True)
    assert lines[0] == f"log {k}\n" and len(lines) == len(set(lines)), (step, log)
    assert set(lines[1:]) <= {f"alice {k}\n", f"bob {k}\n"}, (step, log)
    for n, change in enumerate(batch):
        if change.op == "append":
            landed[n] = (change.data or b"").decode() in lines
    for n, change in enumerate(batch):
        if change.result is not None:
            assert landed[n], f"{step}: an acknowledged change was lost: {change.op} {change.rel}"
            if change.op == "append":
                at = log.index((change.data or b"").decode()) + len(change.data or b"")
                assert change.result["digest"] == blake3.blake3(log[:at].encode()).hexdigest()
    if history:
        made = since(root, before)
        assert tree_files(commits(root, "notes")[0]) == files, step
        assert not [c for c in made if trailers(c)["Memfs-Op"] == "recover"], step
        for n, change in enumerate(batch):
            summary = f"{change.op} notes/{change.rel}"
            own = [c for c in made if c.message.split("\n", 1)[0] == summary
                   and c.author.name == change.agent]
            assert len(own) == (1 if landed[n] else 0), (step, summary, len(own))
            if own and change.result is not None:
                assert change.result["commit"] == str(own[0].id), step
                if change.op != "delete":
                    assert trailers(own[0])["Memfs-Digest"] == change.result["digest"], step
        assert len(made) == sum(landed.values()), step
    # Each writer's record says what landed: a non-forced write of its path goes through.
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
        alice.write("notes/b/one.md", f"one next {k}\n")
        bob.write("notes/b/two.md", f"two next {k}\n")
    assert list((root / "state" / "landing" / "notes").iterdir()) == []
    live = [entry for entry in (root / "state" / "staging").iterdir() if entry.is_dir()]
    assert len(live) == 1 and os.listdir(live[0]) == [], f"{step}: staging leftovers"


# Every step of a batch, in order (memfs/store/write/batch.py, landing.py, store.py), with the
# renames (three) and the unlink counted by land.rename.
STEPS = ["stage@3", "batch.synced", "history.object-open", "land.prepared", "land.intent",
         "land.rename@1", "append.prepared", "append.marked", "append.written",
         "append.stamped", "land.rename@2", "land.rename@3", "land.rename@4",
         "land.records", "land.commit", "batch.durable", "batch.answered@1",
         "batch.answered@4"]


@pytest.mark.slow
@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
def test_a_batch_killed_between_any_two_steps_keeps_every_acknowledged_change(
        history: bool) -> None:
    config = batch_config(history)
    root = Path(config["root"])
    steps = STEPS if history else [s for s in STEPS if s != "history.object-open"]
    daemon = Daemon(config).start()
    try:
        for k, step in enumerate(steps):
            set_up(daemon, k)
            daemon.stop()
            before = head_id(root) if history else None
            batch = changes(k)
            with killed_at(config, step, env={BATCH: str(len(batch))}) as crashing:
                send_batch(crashing, batch)
            daemon.start()
            check(root, daemon, batch, k, before, history, step)
        daemon.stop()
        if history:
            assert_valid_git(root, "notes")
    finally:
        if daemon.alive():
            daemon.kill()


def test_a_batch_lands_as_one_pack_with_a_commit_per_change() -> None:
    config = batch_config(True)
    root = Path(config["root"])
    with Daemon(config) as daemon:
        set_up(daemon, 0)
    before = head_id(root)
    batch = changes(0)
    with Daemon(config, env={BATCH: str(len(batch))}) as daemon:
        send_batch(daemon, batch)
        assert all(change.result is not None for change in batch), [c.error for c in batch]
        check(root, daemon, batch, 0, before, True, "none")
    made = since(root, before)
    assert len(made) == len(batch) + 2  # and the two writes of check
    ours = {str(c.id) for c in made[:len(batch)]}
    # Written in a pack (memfs/store/history/writer.py: prepare_batch), not as loose objects.
    assert ours <= {oid for ids in pack_ids(root, "notes") for oid in ids}
    assert not ours & {p.parent.name + p.name for p in loose_files(root, "notes")}
    assert_valid_git(root, "notes")


def test_conflicts_inside_a_batch_are_decided_as_in_turn() -> None:
    """Two agents who read the same version write it in one batch: one is accepted,
    the other is a conflict that names the version the first wrote; so are two
    connections of one agent (each expects what it read)."""
    config = batch_config(False)
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/c.md", "v0\n")
    with Daemon(config, env={BATCH: "4"}) as daemon:
        clients = [connect_as(UID_A, daemon.socket), connect_as(UID_B, daemon.socket),
                   connect_as(UID_A, daemon.socket), connect_as(UID_B, daemon.socket)]
        for client in clients:
            client.read("notes/c.md")
        outcomes: list[object] = [None] * 4

        def write(n: int) -> None:
            try:
                outcomes[n] = clients[n].write("notes/c.md", f"from {n}\n")
            except ConflictError as error:
                outcomes[n] = error

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        accepted = [n for n, o in enumerate(outcomes) if isinstance(o, dict)]
        assert len(accepted) == 1, outcomes
        winner = dict(outcomes[accepted[0]])  # type: ignore[call-overload]
        for n, outcome in enumerate(outcomes):
            if n != accepted[0]:
                assert isinstance(outcome, ConflictError)
                assert outcome.details["current_digest"] == winner["digest"]
        assert clients[0].read("notes/c.md")["text"] == f"from {accepted[0]}\n"
        for client in clients:
            client.close()


def test_appends_to_one_file_land_as_one_write_with_a_commit_each() -> None:
    config = batch_config(True)
    root = Path(config["root"])
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/log.md", "start\n")
    before = head_id(root)
    appenders = 8
    with Daemon(config, env={BATCH: str(appenders)}) as daemon:
        clients = [connect_as(UID_A if n % 2 else UID_B, daemon.socket)
                   for n in range(appenders)]
        results: list[dict[str, Any]] = [{}] * appenders

        def append(n: int) -> None:
            results[n] = dict(clients[n].write("notes/log.md", f"line {n}\n", append=True))

        threads = [threading.Thread(target=append, args=(n,)) for n in range(appenders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for client in clients:
            client.close()
    text = (root / "stores" / "notes" / "log.md").read_text()
    lines = text.splitlines(keepends=True)
    assert lines[0] == "start\n" and sorted(lines[1:]) == sorted(
        f"line {n}\n" for n in range(appenders))
    made = since(root, before)
    assert len(made) == appenders
    for commit in made:  # each commit's file is the file up to its own line
        content = tree_files(commit)["log.md"]
        assert text.encode().startswith(content)
        assert trailers(commit)["Memfs-Digest"] == blake3.blake3(content).hexdigest()
        n = int(content.decode().splitlines()[-1].split()[1])
        assert commit.author.name == ("alice" if n % 2 else "bob")
        assert results[n]["commit"] == str(commit.id)
        assert results[n]["digest"] == blake3.blake3(content).hexdigest()
    assert_valid_git(root, "notes")


def test_an_intent_an_older_memfs_left_in_the_lock_xattr_is_finished_at_start() -> None:
    """Older versions kept a landing's intent in the store lock file's xattr: a daemon
    killed after its rename left the prepared commit off main. The new daemon moves main
    to it (the change keeps its author) and sets the writer's record."""
    config = batch_config(True)
    root = Path(config["root"])
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/old.md", "old\n")
    head = head_id(root)
    data = b"landed by an older memfs\n"
    digest = blake3.blake3(data).hexdigest()
    with as_euid(daemon_ids()[0]):
        history = StoreHistory(repo_path(root, "notes"), "notes")
        blob = history.blob(data)
        prepared = history.prepare([Change("old.md", blob)], author="alice",
                                   email="alice@memfs.invalid",
                                   message=message_for("write notes/old.md", "write", digest,
                                                       False), parent=head)
        target = root / "stores" / "notes" / "old.md"
        staged = target.with_name(".staged")
        staged.write_bytes(data)
        fd = os.open(staged, os.O_RDONLY)
        try:
            stamp(fd, digest, "alice", 1.0, str(blob))
        finally:
            os.close(fd)
        os.rename(staged, target)
        intent = {"agent": "alice", "head": head, "commit": prepared,
                  "paths": {"old.md": digest}, "record": ["old.md"]}
        lock = root / "state" / "locks" / "notes.lock"
        os.setxattr(lock, store.PENDING, json.dumps(intent).encode())
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        assert head_id(root) == prepared
        assert commits(root, "notes")[0].author.name == "alice"
        alice.write("notes/old.md", "next\n")  # her record says she wrote it
        assert store.PENDING not in os.listxattr(root / "state" / "locks" / "notes.lock")
    assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")
    assert_valid_git(root, "notes")


assert crashpoints.GATHER_ENV == BATCH


@pytest.mark.parametrize("step", ["append.stamped", "land.commit"])
def test_an_append_whose_bytes_a_power_loss_lost_is_undone_at_start(step: str) -> None:
    """An append's bytes and new record become durable with the batch's one flush,
    after the store lock is released; a file keeps its mark until then. A daemon
    stopped before it (here killed, then its bytes damaged as a power loss can leave
    them on a file system that orders nothing: the record and the size on disk, the
    bytes not) leaves the mark: the next start finds the bytes are not what the record
    says and truncates the file back; history follows the files."""
    config = batch_config(True)
    root = Path(config["root"])
    target = root / "stores" / "notes" / "log.md"
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/log.md", "start\n")
    with killed_at(config, step) as crashing, connect_as(UID_A, crashing.socket) as alice, \
            pytest.raises(MemfsClientError):
        alice.write("notes/log.md", "appended\n", append=True)
    assert target.read_bytes() == b"start\nappended\n"
    before = os.stat(target)
    with open(target, "r+b") as handle:
        handle.seek(len("start\n"))
        handle.write(bytes(len("appended\n")))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        assert target.read_bytes() == b"start\n"
        assert alice.read("notes/log.md")["text"] == "start\n"
        assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")
        alice.write("notes/log.md", "after\n", append=True)
    assert target.read_bytes() == b"start\nafter\n"
    assert_valid_git(root, "notes")
