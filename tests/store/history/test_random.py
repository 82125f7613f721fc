"""A randomized history by several agents through two daemons on one root: one commit
per acknowledged change, in acceptance order, with the right authors; main's tree
equals the files; plain git agrees."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from memfs.control.client import Client, ConflictError, NotFoundError
from tests.store.history.conftest import history_config
from tests.store.history.gitcheck import commits, git, store_files, trailers, tree_files
from tests.support import UID_A, UID_B, Daemon, connect_as, public_tmpdir

FILES = [f"notes/rand/{name}" for name in ("a.md", "b.md", "deep/c.md", "deep/er/d.md")]


def two_daemons(base: Path) -> tuple[Daemon, Daemon]:
    first = history_config(base)
    second = dict(first, socket=str(base / "second.sock"), mount=str(base / "memory2"))
    return Daemon(first).start(), Daemon(second).start()


def step(client: Client, rng: random.Random, n: int) -> tuple[str, dict[str, Any]] | None:
    """One random change; (op, result) when acknowledged, None when refused or when it
    left the file as it was (``unchanged``: no commit)."""
    done = _change(client, rng, n)
    return None if done is None or done[1].get("unchanged") else done


def _change(client: Client, rng: random.Random, n: int) -> tuple[str, dict[str, Any]] | None:
    path = rng.choice(FILES)
    op = rng.choice(["write", "write", "append", "edit", "delete", "upload", "restore",
                     "force"])
    try:
        if op in ("write", "edit", "delete", "restore"):
            try:
                client.read(path)
            except NotFoundError:
                if op != "write":
                    return None
        if op == "write":
            return op, client.write(path, f"write {n}\n")
        if op == "force":
            return "write", client.write(path, f"forced {n}\n", force=True)
        if op == "append":
            return op, client.write(path, f"append {n}\n", append=True)
        if op == "upload":
            return "write", client.write(path, bytes([n % 256]) * 100, force=True)
        if op == "edit":
            return op, client.edit(path, [f"1s/$/ edited {n}/"])
        if op == "delete":
            return op, client.delete(path)
        log = client.log(path, limit=5)
        revs = [e["rev"] for e in log if e["op"] != "delete"]
        if not revs:
            return None
        return op, client.restore(path, rng.choice(revs))
    except (ConflictError, NotFoundError):
        return None


def test_sequential_history_matches_acceptance_order() -> None:
    rng = random.Random(8)
    base = public_tmpdir()
    daemons = two_daemons(base)
    root = Path(daemons[0].config["root"])
    try:
        clients = [connect_as(uid, d.socket) for d in daemons for uid in (UID_A, UID_B)]
        agents = ["alice", "bob", "alice", "bob"]
        before = len(commits(root, "notes"))
        accepted: list[tuple[str, str, dict[str, Any]]] = []
        for n in range(160):
            which = rng.randrange(len(clients))
            done = step(clients[which], rng, n)
            if done is not None:
                accepted.append((agents[which], *done))
        history = commits(root, "notes")
        made = history[: len(history) - before][::-1]
        assert len(made) == len(accepted) > 40
        for commit, (agent, op, result) in zip(made, accepted, strict=True):
            assert str(commit.id) == result["commit"]
            assert commit.author.name == agent
            assert trailers(commit)["Memfs-Op"] == op
            if op != "delete":
                assert trailers(commit)["Memfs-Digest"] == result["digest"]
        assert tree_files(history[0]) == store_files(root, "notes")
        authors = git(root, "notes", "log", "--format=%an", "main").split()
        assert authors[: len(accepted)] == [a for a, _, _ in accepted][::-1]
        for client in clients:
            client.close()
    finally:
        for daemon in daemons:
            daemon.stop()


@pytest.mark.slow
def test_concurrent_history_has_one_commit_per_acknowledged_change() -> None:
    base = public_tmpdir()
    daemons = two_daemons(base)
    root = Path(daemons[0].config["root"])
    before = {str(c.id) for c in commits(root, "notes")}
    acked: list[list[str]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    # connected here: connect_as switches the process's euid, never from threads
    clients = [connect_as((UID_A, UID_B)[i % 2], daemons[i // 2].socket) for i in range(4)]

    def worker(index: int) -> None:
        rng = random.Random(index)
        try:
            with clients[index] as client:
                for n in range(60):
                    done = step(client, rng, n)
                    if done is not None:
                        acked[index].append(done[1]["commit"])
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors
        history = commits(root, "notes")
        order = {str(c.id): position for position, c in enumerate(reversed(history))}
        new = [str(c.id) for c in history if str(c.id) not in before]
        assert sorted(new) == sorted(rev for revs in acked for rev in revs)
        for revs in acked:  # each client's changes were accepted in the order it made them
            assert [order[rev] for rev in revs] == sorted(order[rev] for rev in revs)
        assert tree_files(history[0]) == store_files(root, "notes")
    finally:
        for daemon in daemons:
            daemon.stop()
    # The repository as the daemons left it: a live daemon merges the batches' packs and
    # removes the merged ones 10 s later, under a git that listed them before.
    git(root, "notes", "fsck")
