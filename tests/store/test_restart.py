"""The per-agent record survives a restart (clean or kill -9) and still decides."""

from __future__ import annotations

import signal

import pytest

from memfs.control.client import ConflictError
from tests.support import UID_A, UID_B, Daemon, connect_as, public_tmpdir, standard_config


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_recorded_digests_survive_restart(how: str) -> None:
    daemon = Daemon(standard_config(public_tmpdir())).start()
    try:
        with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
            alice.write("notes/r.md", "v1\n")
            bob.read("notes/r.md")  # bob saw v1
            alice.write("notes/r.md", "v2\n")  # alice saw v2
            alice.write("notes/q.md", "q1\n")
            bob.read("notes/q.md")
        if how == "sigkill":
            daemon.kill()
        else:
            assert daemon.stop(signal.SIGTERM) == 0
        daemon.start()
        with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
            with pytest.raises(ConflictError):
                bob.write("notes/r.md", "stale from bob\n")
            bob.write("notes/q.md", "q2 from bob\n")  # his record of q1 is still current
            alice.write("notes/r.md", "v3\n")
            assert bob.read("notes/r.md")["changed_since_last_read"] is True
            assert alice.read("notes/q.md")["text"] == "q2 from bob\n"
    finally:
        if daemon.alive():
            daemon.stop()


def test_two_daemons_one_root_behave_as_one_store() -> None:
    base = public_tmpdir()
    first = standard_config(base)
    second = standard_config(base, socket=str(base / "second.sock"),
                             mount=str(base / "memory2"))
    with (
        Daemon(first) as one,
        Daemon(second) as two,
        connect_as(UID_A, one.socket) as alice1,
        connect_as(UID_B, two.socket) as bob2,
        connect_as(UID_B, one.socket) as bob1,
    ):
        alice1.write("notes/shared.md", "v1\n")
        bob2.read("notes/shared.md")
        alice1.read("notes/shared.md")
        alice1.write("notes/shared.md", "v2 via one\n")
        with pytest.raises(ConflictError):  # bob's base v1 was replaced through daemon one
            bob2.write("notes/shared.md", "stale via two\n")
        bob1.read("notes/shared.md")  # reading through one is recorded for two as well:
        with connect_as(UID_B, two.socket) as bob2_later:  # e.g. the next `memfs write`
            bob2_later.write("notes/shared.md", "v3 via two\n")
        assert alice1.read("notes/shared.md")["text"] == "v3 via two\n"
