"""Socket load never starves the mount (issue 12): thousands of idle connections from
a uid mapped to no agent leave agents served on the socket and through the mount.

The daemon starts with a low soft open-file limit (1024, hard 4096), as on many
systems: it raises the soft limit to the hard one, admits only a few connections
from an unknown uid, and answers the rest with one ``busy`` line and a close, so its
descriptors stay free for the mount's open files."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuse.conftest import Mounted, cat, mount_config, stop_mounted
from tests.support import UID_A, UID_B, UID_UNKNOWN, Daemon, as_euid, memfs_as, public_tmpdir

IDLE = 2100


@pytest.fixture
def low_fd_mount() -> Iterator[Mounted]:
    base = public_tmpdir("memfs-mount-")
    config = mount_config(base)
    daemon = Daemon(config, mount=True, nofile=(1024, 4096))
    mounted = Mounted(daemon, base, Path(config["mount"]), Path(config["socket"]),
                      Path(config["root"]))
    try:
        daemon.start()
        yield mounted
    finally:
        stop_mounted(mounted)


@pytest.fixture
def many_fds() -> Iterator[None]:
    """Room in this test process for IDLE sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = IDLE + 512
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def reply_line(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while not data.endswith(b"\n") and (chunk := sock.recv(4096)):
            data += chunk
    return data


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_idle_connections_from_a_non_agent_starve_neither_socket_nor_mount(
    low_fd_mount: Mounted, many_fds: None
) -> None:
    m = low_fd_mount
    m.write(UID_A, "notes/a.md", b"agents are served\n")
    assert m.daemon.proc is not None
    pid = m.daemon.proc.pid
    limits = Path(f"/proc/{pid}/limits").read_text()
    assert any(line.startswith("Max open files") and line.split()[3:5] == ["4096", "4096"]
               for line in limits.splitlines()), limits  # soft raised to hard
    socks: list[socket.socket] = []
    began = time.monotonic()  # the first refusal comes after this
    try:
        with as_euid(UID_UNKNOWN):
            for _ in range(IDLE):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                socks.append(sock)
                # A daemon out of descriptors leaves us in its backlog: a blocking
                # connect waits, here at most SO_SNDTIMEO.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 120, 0))
                sock.connect(str(m.socket))
                sock.settimeout(120)
        # An agent connects and is served; the mount still opens files.
        done = memfs_as(UID_A, m.socket, "cat", "notes/a.md")
        assert done.returncode == 0, done.stderr
        assert done.stdout == b"agents are served\n"
        assert cat(m, UID_B, "notes/a.md") == b"agents are served\n"
        assert open_files(pid) < 400  # not one descriptor per idle connection
        # The few admitted connections are answered; every other one was told why.
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.sendall(b'{"op": "whoami"}\n')
        replies = [reply_line(sock) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    denied = sum(b'"permission_denied"' in reply for reply in replies)
    busy = sum(b'"busy"' in reply and b"too many connections" in reply for reply in replies)
    assert (denied, busy) == (4, IDLE - 4)
    log = m.daemon.log()
    # rate-limited warnings: one, then at most one per 10 s, however long this took
    assert log.count("refused a connection") <= 1 + (time.monotonic() - began) / 10, \
        log[-2000:]
    assert "Traceback" not in log
