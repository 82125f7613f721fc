"""One real daemon (no mount) for the search and edit tests, shared by the session:
standard_config (alice rw notes+ops, bob rw notes + read ops, carol read notes, store
`secret` attached to nobody), a 2 s jail time limit, seeded through real clients."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import (
    UID_A,
    UID_B,
    Daemon,
    connect_as,
    memfs_as,
    public_tmpdir,
    standard_config,
)
from tests.support import plant as plant_file

SECRET = "SECRET-PAYLOAD-7f3a"  # only ever written into the backing dir of `secret`
SHADOW_MARK = "root:"  # the first field of /etc/shadow's first line


class Memory:
    """The running daemon and where its stores live."""

    def __init__(self, daemon: Daemon, root: Path) -> None:
        self.daemon = daemon
        self.socket = daemon.socket
        self.stores = root / "stores"

    def grep(self, uid: int, *args: str) -> tuple[int, str, str]:
        done = memfs_as(uid, self.socket, "grep", *args)
        return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.fixture(scope="session")
def memory() -> Iterator[Memory]:
    base = public_tmpdir("memfs-search-")
    config = standard_config(base, jail={"timeout_seconds": 2})
    try:
        with Daemon(config) as daemon:
            root = Path(config["root"])
            with connect_as(UID_A, daemon.socket) as alice:
                alice.write("notes/queue.md", "the payments queue is slow\nretry later\n")
                alice.write("notes/team/oncall.md", "Oncall: Alice\nPayments owner: Bob\n")
                alice.write(
                    "notes/runbook.md",
                    "step one\nstep two\nrestart the payments worker\nstep four\nstep five\n",
                )
                alice.write("notes/.hidden.md", "hidden payments note\n")
                alice.write("ops/deploy.md", "deploy payments on friday\n")
            with connect_as(UID_B, daemon.socket) as bob:
                bob.write("notes/bob.txt", "a.b literal and axb\npayment\n")
            plant(root / "stores")
            yield Memory(daemon, root)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def plant(stores: Path) -> None:
    """What an attacker with access to the backing directory could leave in `notes`:
    symlinks into the `secret` store and to /etc/shadow. `secret` holds SECRET."""
    secret = stores / "secret"
    plant_file(secret / "s.txt", f"{SECRET}\npayments secret\n")  # the daemon's own file
    notes = stores / "notes"
    (notes / "leak.md").symlink_to(secret / "s.txt")
    (notes / "leak-dir").symlink_to(secret)
    (notes / "shadow").symlink_to("/etc/shadow")
    (notes / "relative-leak.md").symlink_to(os.path.relpath(secret / "s.txt", notes))
