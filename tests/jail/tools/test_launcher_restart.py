"""The jail launcher of a real daemon is killed: the next search restarts it, the daemon
stays up, and the dead launcher's work directory is cleaned up."""

from __future__ import annotations

import glob
import os
import signal
import tempfile
import time
from pathlib import Path

from tests.jail.tools.conftest import Memory
from tests.support import UID_A, UID_C, connect_as


def launcher_of(daemon_pid: int) -> int:
    for task in Path(f"/proc/{daemon_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"memfs.jail.launcher" in cmdline:
                return int(child)
    raise AssertionError("no jail launcher under the daemon")


def test_killed_launcher_is_restarted(memory: Memory) -> None:
    assert memory.daemon.proc is not None
    with connect_as(UID_A, memory.socket) as alice:
        assert alice.search(["-l", "retry", "notes"])["output"] == "notes/queue.md\n"
        old = launcher_of(memory.daemon.proc.pid)
        work_dirs = glob.glob(os.path.join(tempfile.gettempdir(), f"memfs-jail-{old}-*"))
        assert len(work_dirs) == 1
        os.kill(old, signal.SIGKILL)
        time.sleep(0.1)
        # The very next calls work, through a new launcher.
        assert alice.search(["-l", "retry", "notes"])["output"] == "notes/queue.md\n"
        alice.write("notes/restart.md", "one\n")
        alice.edit("notes/restart.md", ["s/one/two/"])
        assert alice.read("notes/restart.md")["text"] == "two\n"
        new = launcher_of(memory.daemon.proc.pid)
        assert new != old
        assert not os.path.exists(work_dirs[0])
    assert memory.daemon.alive()
    with connect_as(UID_C, memory.socket) as carol:
        assert carol.search(["-c", "retry"])["output"] == "notes/queue.md:1\n"
