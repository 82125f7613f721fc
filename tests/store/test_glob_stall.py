"""A glob cannot stall the daemon (issue 12): matching takes time linear in the name
whatever the pattern, so a pathological pattern is answered at once and other agents
are served meanwhile. The regex the globs used to compile to took 8-10 s of held GIL
for ``*a*a*a*a*b`` against a 200-``a`` name, ~40x more per extra ``*a``."""

from __future__ import annotations

import threading
import time

import pytest

from memfs.control.client import InvalidError
from tests.support import UID_A, UID_B, Daemon, connect_as, memfs_as

PATHOLOGICAL = "notes/" + "*a" * 8 + "*b"


def test_a_pathological_glob_is_answered_at_once_and_others_meanwhile(daemon: Daemon) -> None:
    name = "notes/" + "a" * 200
    alice = connect_as(UID_A, daemon.socket)
    bob = connect_as(UID_B, daemon.socket)
    with alice, bob:
        alice.write(name, "x\n")
        listed: list[list[str]] = []
        took: dict[str, float] = {}

        def ls() -> None:
            started = time.monotonic()
            listed.append(alice.list(PATHOLOGICAL))
            took["alice"] = time.monotonic() - started

        def whoami() -> None:  # another agent, meanwhile
            started = time.monotonic()
            assert bob.whoami()["agent"] == "bob"
            took["bob"] = time.monotonic() - started

        threads = [threading.Thread(target=ls, daemon=True),
                   threading.Thread(target=whoami, daemon=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        if any(thread.is_alive() for thread in threads):
            daemon.kill()  # stuck in the matcher, GIL held: not even SIGTERM gets through
            pytest.fail("the glob stalled the daemon")
        # These bounds measure complexity, not speed: the backtracking matcher needed
        # hours here; a linear one needs milliseconds, and 1 s is generous for a slow
        # or busy machine.
        assert listed == [[]]
        assert took["alice"] < 1 and took["bob"] < 1, took
        assert alice.list("notes/" + "*a" * 8 + "*") == [name]
        with pytest.raises(InvalidError, match="longer than"):
            alice.list("notes/" + "*" * 2000)
    done = memfs_as(UID_A, daemon.socket, "ls", PATHOLOGICAL)  # the CLI, as in the issue
    assert done.returncode == 0 and done.stdout == b""
