"""Two daemons on one local root (the single-machine form of several hosts): a change
acknowledged by one is seen through the other's mount within a second, although the
other's kernel had cached the old attributes and a negative entry for 5 s. The same
check on a real GlusterFS volume across hosts: tests/cluster/test_freshness.py."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from tests.fuse.conftest import mount_config
from tests.support import UID_A, Daemon, connect_as, public_tmpdir

BOUND = 1.0


def within(seconds: float, check: Callable[[], bool]) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > seconds + 5:
            break
        time.sleep(0.01)
    return time.monotonic() - start


def test_a_commit_through_one_daemon_refreshes_the_others_mount() -> None:
    base = public_tmpdir("memfs-mount-")
    first = mount_config(base)
    second = {**mount_config(base), "socket": str(base / "b.sock"),
              "mount": str(base / "memory-b")}
    for config in (first, second):  # root reads the mounts as an agent of its own
        config["agents"]["reader"] = {"uid": 0, "stores": {"notes": "read"}}
    a = Daemon(first, mount=True).start()
    b = Daemon(second, mount=True).start()
    try:
        with connect_as(UID_A, a.socket) as client:
            client.write("notes/two/file.txt", b"old\n")
            seen = b.mountpoint / "notes" / "two"
            time.sleep(0.5)
            assert os.stat(seen / "file.txt").st_size == 4  # cached by b's kernel for 5 s
            assert not os.path.exists(seen / "new.txt")  # a negative entry, 5 s
            client.write("notes/two/file.txt", b"new content\n")
            client.write("notes/two/new.txt", b"created\n")
        took_stat = within(BOUND, lambda: os.stat(seen / "file.txt").st_size == 12)
        took_name = within(BOUND, lambda: os.path.exists(seen / "new.txt"))
        assert took_stat <= BOUND and took_name <= BOUND, (took_stat, took_name)
    finally:
        for daemon in (b, a):
            if daemon.alive():
                daemon.stop()
        for point in (b.mountpoint, a.mountpoint):
            if os.path.ismount(point):
                os.system(f"umount -l {point}")
