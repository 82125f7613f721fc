"""Mounting and unmounting: clean unmount on SIGTERM/SIGINT, a stale mount (left when
a daemon and its fusermount3 auto_unmount helper are both killed with SIGKILL) is
cleared by the next ``memfs serve``, an unusable mount point is a clear start-up
error, and slow work never stalls the control socket."""

from __future__ import annotations

import os
import signal
import stat
import threading
import time
from pathlib import Path

import pytest

from memfs.control.client import Client
from tests.fuse.conftest import Mounted, mount_config, stop_mounted
from tests.support import (
    UID_A,
    UID_C,
    Daemon,
    children,
    connect_as,
    plant,
    public_tmpdir,
    run_as,
    scaled,
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_unmounts_cleanly(fresh_mount: Mounted, sig: int) -> None:
    fresh_mount.write(UID_A, "notes/a.md", b"a\n")
    assert run_as(UID_A, ["cat", fresh_mount.path("notes/a.md")]).stdout == b"a\n"
    assert fresh_mount.daemon.stop(sig) == 0
    assert not os.path.ismount(fresh_mount.mount)
    assert fresh_mount.mount.is_dir() and os.listdir(fresh_mount.mount) == []
    assert "unmounted" in fresh_mount.daemon.log()


@pytest.mark.slow
def test_sigkill_leaves_a_stale_mount_that_the_next_daemon_clears(fresh_mount: Mounted) -> None:
    fresh_mount.write(UID_A, "notes/durable.md", b"still here\n")
    assert fresh_mount.daemon.proc is not None
    daemon_pid = fresh_mount.daemon.proc.pid
    for child in children(daemon_pid):  # its fusermount3 and the mount's guardian first:
        # the daemon alone leaves no mount
        if Path(f"/proc/{child}/comm").read_text().strip() == "fusermount3" or \
                b"guardian.py" in Path(f"/proc/{child}/cmdline").read_bytes():
            os.kill(child, signal.SIGKILL)
    fresh_mount.daemon.kill()
    done = run_as(UID_A, ["ls", str(fresh_mount.mount)])
    assert done.returncode != 0 and b"Transport endpoint is not connected" in done.stderr
    daemon = Daemon(fresh_mount.daemon.config, mount=True).start()
    try:
        assert "stale mount" in daemon.log()
        done = run_as(UID_C, ["cat", fresh_mount.path("notes/durable.md")])
        assert done.stdout == b"still here\n", done
    finally:
        assert daemon.stop() == 0
    assert not os.path.ismount(fresh_mount.mount)


def _start_fails(config: dict[str, object]) -> str:
    daemon = Daemon(config, mount=True)
    with pytest.raises(RuntimeError, match="exited with 1") as failure:
        daemon.start()  # waits for the exit (the default bound suits slow machines)
    return str(failure.value)


def test_busy_mount_point_is_a_clear_error(fresh_mount: Mounted) -> None:
    config = dict(fresh_mount.daemon.config)
    config["socket"] = str(fresh_mount.base / "second.sock")
    log = _start_fails(config)
    assert "memfs: cannot start:" in log and "busy" in log
    # the first daemon is unharmed
    fresh_mount.write(UID_A, "notes/ok.md", b"ok\n")
    assert run_as(UID_A, ["cat", fresh_mount.path("notes/ok.md")]).stdout == b"ok\n"


def test_mount_point_that_is_a_file_is_a_clear_error() -> None:
    base = public_tmpdir()
    try:
        config = mount_config(base)
        Path(str(config["mount"])).write_text("not a directory")
        log = _start_fails(config)
        assert "memfs: cannot start:" in log and "not a directory" in log
        assert "Traceback" not in log
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def test_missing_mount_point_is_created() -> None:
    base = public_tmpdir()
    config = mount_config(base)
    config["mount"] = str(base / "deeper" / "memory")
    os.umask(0o077)  # the mount point must not depend on the daemon's umask
    try:
        running = Daemon(config, mount=True)
        running.start()
    finally:
        os.umask(0o022)
    mounted = Mounted(running, base, Path(config["mount"]), Path(config["socket"]),
                      Path(config["root"]))
    try:
        assert os.path.ismount(mounted.mount)
        running.stop()
        assert stat.S_IMODE(mounted.mount.stat().st_mode) == 0o755
    finally:
        stop_mounted(mounted)


@pytest.mark.slow
def test_hashing_a_big_planted_file_does_not_stall_the_socket(fresh_mount: Mounted) -> None:
    """A 16 MiB file planted by hand is hashed at its first open; meanwhile the control
    socket keeps answering (the pin runs in a worker thread)."""
    names = [f"notes/big{i}.bin" for i in range(4)]
    for name in names:
        plant(fresh_mount.backing(name), os.urandom(16 * 1024 * 1024))
    latencies: list[float] = []
    done = threading.Event()

    client = connect_as(UID_A, fresh_mount.socket)  # seteuid is process-wide: not in a thread

    def ping() -> None:
        with client:
            while not done.is_set():
                started = time.monotonic()
                client.whoami()
                latencies.append(time.monotonic() - started)
                time.sleep(0.002)

    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        for name in names:
            result = run_as(UID_C, ["sh", "-c", f"head -c 1 {fresh_mount.path(name)} | wc -c"])
            assert result.stdout.strip() == b"1"
    finally:
        done.set()
        pinger.join()
    # a pin on the event loop stalls the socket for a whole hash; a slow machine only
    # slows each call
    assert latencies and max(latencies) < scaled(0.25), max(latencies)


def test_client_is_unaffected_by_the_mount(fresh_mount: Mounted) -> None:
    # root (a delegate) uses the socket normally while it sees an empty mount
    with Client(str(fresh_mount.socket), as_agent="carol") as client:
        assert client.whoami()["agent"] == "carol"
    assert os.listdir(fresh_mount.mount) == []
