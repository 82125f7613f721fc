"""Sed edits end to end (`memfs edit` and Client.edit): jailed GNU sed composed with
the version check; refused, looping and exploding scripts change nothing and leave the
daemon serving."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from memfs.control.client import Client, MemfsClientError
from tests.jail.tools.conftest import Memory
from tests.support import (
    UID_A,
    UID_B,
    UID_C,
    Daemon,
    connect_as,
    memfs_as,
    public_tmpdir,
    standard_config,
)

_names = itertools.count()


@pytest.fixture
def alice(memory: Memory) -> Iterator[Client]:
    with connect_as(UID_A, memory.socket) as client:
        yield client


@pytest.fixture
def path(alice: Client) -> str:
    """A fresh file of alice's (so she has seen its current version)."""
    name = f"notes/edit/f{next(_names)}.md"
    alice.write(name, "alpha beta\ngamma\n")
    return name


def content(client: Client, path: str) -> str:
    return str(client.read(path)["text"])


def edit(
    memory: Memory, uid: int, path: str, *scripts: str, force: bool = False
) -> tuple[int, str, str]:
    args = ["edit", path]
    for script in scripts:
        args += ["-e", script]
    if force:
        args.append("--force")
    done = memfs_as(uid, memory.socket, *args)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_edit_through_the_cli(memory: Memory, alice: Client, path: str) -> None:
    code, out, err = edit(memory, UID_A, path, "s/alpha/ALPHA/", "2d")
    assert code == 0, err
    assert out.startswith(f"edited {path}")
    assert content(alice, path) == "ALPHA beta\n"


def test_client_edit_then_edit_again(alice: Client, path: str) -> None:
    first = alice.edit(path, ["s/beta/BETA/"])
    assert content(alice, path) == "alpha BETA\ngamma\n"
    second = alice.edit(path, ["$a\\", "delta"])  # its own write counts as seen
    assert second["digest"] != first["digest"]
    assert content(alice, path) == "alpha BETA\ngamma\ndelta\n"


def test_edit_based_on_a_stale_read_is_a_conflict(memory: Memory, alice: Client, path: str) -> None:
    with connect_as(UID_B, memory.socket) as bob:
        bob.read(path)
        bob.write(path, "bob was here\n")
    code, _, err = edit(memory, UID_A, path, "s/bob/BOB/")
    assert code == 3, err
    assert "conflict" in err
    with pytest.raises(MemfsClientError) as caught:
        alice.edit(path, ["s/bob/BOB/"])
    assert caught.value.code == "conflict"
    with connect_as(UID_B, memory.socket) as bob:
        assert content(bob, path) == "bob was here\n"  # unchanged
    code, _, err = edit(memory, UID_A, path, "s/bob/BOB/", force=True)
    assert code == 0, err
    assert content(alice, path) == "BOB was here\n"


@pytest.mark.parametrize(
    "script", ["w /tmp/memfs-sed-escape", "e id", "r /etc/passwd", "s/a/b/e", "s/a/b/w /tmp/x"]
)
def test_refused_scripts_change_nothing(
    memory: Memory, alice: Client, path: str, script: str
) -> None:
    before = alice.stat(path)["digest"]
    code, out, err = edit(memory, UID_A, path, script)
    assert code == 2, (out, err)
    assert "not allowed" in err, err
    assert alice.stat(path)["digest"] == before
    assert not os.path.exists("/tmp/memfs-sed-escape")


def test_sed_syntax_error_is_bad_input(memory: Memory, alice: Client, path: str) -> None:
    code, _, err = edit(memory, UID_A, path, "s/unterminated")
    assert code == 2 and "sed" in err, err
    assert content(alice, path) == "alpha beta\ngamma\n"


def test_looping_script_hits_the_time_limit(memory: Memory, alice: Client, path: str) -> None:
    before = alice.stat(path)["digest"]
    code, _, err = edit(memory, UID_A, path, ":a;ba")
    assert code == 2, err
    assert "took longer than 2 s" in err or "CPU time" in err, err
    assert alice.stat(path)["digest"] == before
    assert memory.daemon.alive()
    alice.edit(path, ["s/alpha/after/"])  # still serving, the jail too
    assert content(alice, path).startswith("after")


def test_exploding_output_hits_the_output_limit() -> None:
    """sed's 64 MiB output cap trips, not the time or CPU limit, however slow the
    machine: its own daemon has the longest time limit (64 MiB take a slow machine far
    more than the shared daemon's 2 s), and the first line is 1 MB long, so that sed
    spends its CPU time on big writes, not on 6 million loop rounds (an emulated VM
    used up the 10 s CPU limit that way)."""
    base = public_tmpdir("memfs-search-")
    daemon = Daemon(standard_config(base, jail={"timeout_seconds": 300}))
    with daemon, connect_as(UID_A, daemon.socket) as alice:
        path = "notes/explode.md"
        alice.write(path, "alpha beta " * 100_000 + "\ngamma\n")
        before = alice.stat(path)["digest"]
        with pytest.raises(MemfsClientError) as caught:
            alice.edit(path, [":a;p;ba"])  # prints the first line forever
        assert caught.value.code == "invalid"
        assert "output exceeds" in caught.value.message
        assert alice.stat(path)["digest"] == before
        assert daemon.alive()


def test_exploding_pattern_space_is_stopped(memory: Memory, alice: Client) -> None:
    """Doubling the pattern space on a big input: stopped by a limit (memory, CPU or
    time, whichever comes first), nothing written."""
    path = f"notes/edit/big{next(_names)}.md"
    alice.write(path, "x" * 1_000_000 + "\n")
    before = alice.stat(path)["digest"]
    with pytest.raises(MemfsClientError) as caught:
        alice.edit(path, [":a;s/x/xx/g;ta"])
    assert caught.value.code == "invalid"
    message = caught.value.message
    assert any(word in message for word in ("memory", "CPU", "took longer", "output")), message
    assert alice.stat(path)["digest"] == before
    assert memory.daemon.alive()
    alice.delete(path)  # 1 MB of x: not for the other tests' searches


def test_read_only_agent_cannot_edit(memory: Memory, path: str) -> None:
    code, _, err = edit(memory, UID_C, path, "s/a/b/")
    assert code == 4, err
    assert "permission denied" in err


def test_edit_of_a_missing_file(memory: Memory) -> None:
    code, _, err = edit(memory, UID_A, "notes/edit/no-such-file.md", "s/a/b/")
    assert code == 5, err
    assert "not found" in err


def test_edit_outside_the_agents_stores(memory: Memory) -> None:
    code, _, err = edit(memory, UID_B, "ops/deploy.md", "s/a/b/")  # bob: ops read-only
    assert code == 4, err
    code, _, err = edit(memory, UID_A, "secret/s.txt", "s/a/b/")  # not alice's: not found
    assert code == 5 and 'no store named "secret"' in err, err
