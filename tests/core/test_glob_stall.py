"""A glob cannot stall the daemon (issue 12): matching takes time linear in the name
whatever the pattern, so a pathological pattern is answered at once and other agents
are served meanwhile. The regex the globs used to compile to took 8-10 s of held GIL
for ``*a*a*a*a*b`` against a 200-``a`` name, ~40x more per extra ``*a``."""

from __future__ import annotations

import threading
import time

import pytest

from control.client import InvalidError
from tests.support import UID_A, UID_B, Daemon, connect_as, memfs_as

PATHOLOGICAL = "notes/" + "*a" * 8 + "*b"


def test_a_pathological_glob_is_answered_at_once_and_others_meanwhile(daemon: Daemon) -> None:
    name = "notes/" + "a" * 200
    alice = connect_as(UID_A, daemon.socket)
    bob = connect_as(UID_B, daemon.socket)
    with alice, bob:
        alice.write(name, "x\n")
        listed: list[list[str]] = []
        took: list[float] = []

        def ls() -> None:
            started = time.monotonic()
            listed.append(alice.list(PATHOLOGICAL))
            took.append(time.monotonic() - started)

        lister = threading.Thread(target=ls, daemon=True)
        lister.start()
        started = time.monotonic()
        assert bob.whoami()["agent"] == "bob"  # another agent, meanwhile
        bob_took = time.monotonic() - started
        lister.join(60)
        if lister.is_alive():
            daemon.kill()  # stuck in the matcher: nothing else would stop it
            pytest.fail("the glob stalled the daemon")
        # These bounds measure complexity, not speed: the backtracking matcher needed
        # hours here; a linear one needs milliseconds, and 1 s is generous for a slow
        # or busy machine.
        assert listed == [[]]
        assert took[0] < 1 and bob_took < 1, (took, bob_took)
        assert alice.list("notes/" + "*a" * 8 + "*") == [name]
        with pytest.raises(InvalidError, match="longer than"):
            alice.list("notes/" + "*" * 2000)
    done = memfs_as(UID_A, daemon.socket, "ls", PATHOLOGICAL)  # the CLI, as in the issue
    assert done.returncode == 0 and done.stdout == b""
