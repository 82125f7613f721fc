"""Delegation is visible and bounded: a delegate uid limited to some agents is refused
for the others (its tokens too), and every change it makes for an agent carries
``Memfs-Delegate: uid N`` (plain git shows it, ``memfs log`` says "via uid N"); forced
changes carry ``Memfs-Forced: yes``, a forced task release says whose lease it was and
who released it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfs.control.client import PermissionDeniedError
from tests.memory.conftest import memory_config
from tests.store.history.gitcheck import commits, git, trailers
from tests.support import UID_A, Daemon, connect_as, memfs_as, public_tmpdir

DELEGATE = 2100  # may act for alice and bob only; root may act for anyone


def delegation_config(base: Path) -> dict[str, Any]:
    config = memory_config(base)
    config["delegates"] = {"0": "*", str(DELEGATE): ["alice", "bob"]}
    return config


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(delegation_config(public_tmpdir("memfs-delegation-"))) as running:
        yield running


@pytest.fixture
def root(daemon: Daemon) -> Path:
    return Path(daemon.config["root"])


def test_a_limited_delegate_acts_for_its_agents_only(daemon: Daemon, root: Path) -> None:
    with connect_as(DELEGATE, daemon.socket, as_agent="alice") as for_alice:
        for_alice.write("notes/by-delegate.md", "for alice\n")
    for other in ("carol", "dave"):
        with connect_as(DELEGATE, daemon.socket, as_agent=other) as client, \
                pytest.raises(PermissionDeniedError) as refused:
            client.list()
        assert refused.value.message == \
            f"delegate uid {DELEGATE} may act only for alice, bob, not for {other!r}"
    done = memfs_as(DELEGATE, daemon.socket, "--as", "dave", "write", "notes/x.md",
                    input=b"x\n")
    assert done.returncode == 4 and b"may act only for alice, bob" in done.stderr
    # and not through a token either
    assert memfs_as(DELEGATE, daemon.socket, "token", "create", "carol").returncode == 4
    assert memfs_as(DELEGATE, daemon.socket, "token", "create", "bob").returncode == 0
    assert memfs_as(0, daemon.socket, "token", "create", "carol").returncode == 0
    listed = memfs_as(DELEGATE, daemon.socket, "--json", "token", "list")
    assert {t["agent"] for t in json.loads(listed.stdout)["tokens"]} == {"bob"}
    carols = json.loads(memfs_as(0, daemon.socket, "--json", "token", "list").stdout)
    carol_id = next(t["id"] for t in carols["tokens"] if t["agent"] == "carol")
    assert memfs_as(DELEGATE, daemon.socket, "token", "revoke", carol_id).returncode == 4
    agents = json.loads(memfs_as(DELEGATE, daemon.socket, "--json", "agent", "list").stdout)
    assert [a["agent"] for a in agents["agents"]] == ["alice", "bob"]


def test_each_change_a_delegate_makes_names_it(daemon: Daemon, root: Path) -> None:
    with connect_as(DELEGATE, daemon.socket, as_agent="bob") as for_bob:
        for_bob.write("notes/delegated.md", "v1\n")
        for_bob.write("notes/delegated.md", "more\n", append=True)
    with connect_as(UID_A, daemon.socket) as alice:  # an agent as itself: no trailer
        alice.read("notes/delegated.md")
        alice.write("notes/delegated.md", "v2 by alice\n")
    newest = commits(root, "notes")[:3]
    assert [c.author.name for c in newest] == ["alice", "bob", "bob"]
    assert [trailers(c).get("Memfs-Delegate") for c in newest] == \
        [None, f"uid {DELEGATE}", f"uid {DELEGATE}"]
    plain = git(root, "notes", "log", "-3",
                "--format=%an|%(trailers:key=Memfs-Delegate,valueonly,separator=)")
    assert plain.splitlines() == ["alice|", f"bob|uid {DELEGATE}", f"bob|uid {DELEGATE}"]
    log = memfs_as(UID_A, daemon.socket, "log", "notes/delegated.md", "-n", "3")
    lines = log.stdout.decode().splitlines()
    assert "alice " in lines[0] and "via uid" not in lines[0]
    assert f"bob (via uid {DELEGATE})" in lines[1], lines


def test_a_forced_release_shows_as_forced_and_names_the_delegate(daemon: Daemon,
                                                                  root: Path) -> None:
    def task(uid: int, *args: str) -> Any:
        return memfs_as(uid, daemon.socket, *args, "--store", "team")

    assert task(UID_A, "task", "add", "fix-login", "--title", "Fix the login").returncode == 0
    assert task(UID_A, "task", "claim", "fix-login").returncode == 0
    refused = task(DELEGATE, "--as", "dave", "task", "release", "fix-login", "--force")
    assert refused.returncode == 4  # beyond the delegate's agents
    released = task(DELEGATE, "--as", "bob", "task", "release", "fix-login", "--force")
    assert released.returncode == 0, released.stderr
    newest = commits(root, "team")[0]
    summary = "task: alice's lease of fix-login released by bob, forced"
    assert newest.message.splitlines()[0] == summary
    assert trailers(newest)["Memfs-Forced"] == "yes"
    assert trailers(newest)["Memfs-Delegate"] == f"uid {DELEGATE}"
    plain = git(root, "team", "log", "-1", "--format=%an%n%B")
    assert plain.splitlines()[:2] == ["bob", summary]
    assert "Memfs-Forced: yes" in plain and f"Memfs-Delegate: uid {DELEGATE}" in plain
    log = memfs_as(UID_A, daemon.socket, "log", "team", "-n", "1").stdout.decode()
    assert f"bob (via uid {DELEGATE})" in log and summary in log and "(forced)" in log


def test_forced_writes_and_restores_say_so(daemon: Daemon, root: Path) -> None:
    with connect_as(0, daemon.socket, as_agent="bob") as for_bob:
        first = for_bob.write("notes/forced.md", "one\n")
        for_bob.write("notes/forced.md", "two\n", force=True)
        for_bob.restore("notes/forced.md", first["commit"], force=True)
        for_bob.delete("notes/forced.md", force=True)
    newest = commits(root, "notes")[:4]
    assert [trailers(c).get("Memfs-Forced") for c in newest] == ["yes", "yes", "yes", None]
    assert all(trailers(c)["Memfs-Delegate"] == "uid 0" for c in newest)
