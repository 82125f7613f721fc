"""Stopping the daemon (SIGTERM) with clients connected: idle, half-way through a line,
or never reading their replies, it still stops promptly (a client that reads no
replies is cut off after STOP_REPLY_SECONDS); a request already being
carried out is finished and answered first (each connection has a thread of its own,
which the stop wakes and then waits for). And how many requests run at once."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from memfs.control.client import Client
from memfs.control.socket.server import ACTIVE_REQUESTS, STOP_REPLY_SECONDS
from tests.support import (
    UID_A,
    UID_B,
    Daemon,
    as_euid,
    connect_as,
    public_tmpdir,
    scaled,
    standard_config,
)


@contextlib.contextmanager
def holding_the_store_lock(base: Path, store: str = "notes") -> Iterator[int]:
    """Hold STORE's lock as a second daemon on the root would, so the daemon's writes
    to it wait inside the daemon; yields the lock's fd (flock LOCK_UN lets them go
    early). Released on exit."""
    fd = os.open(base / "root" / "state" / "locks" / f"{store}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def test_stop_is_prompt_with_idle_half_sent_and_unread_connections() -> None:
    daemon = Daemon(standard_config(public_tmpdir())).start()
    idle = [connect_as(UID_A, daemon.socket) for _ in range(3)]
    with as_euid(UID_B):
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(str(daemon.socket))
        flooder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        flooder.connect(str(daemon.socket))
    silent.sendall(b'{"op": "whoami", "id": ')  # and never the rest

    def flood() -> None:  # its replies fill the socket buffers: the daemon's send blocks
        try:
            for _ in range(2000):
                flooder.sendall(b'{"op": "whoami"}\n')
        except OSError:
            pass

    flooding = threading.Thread(target=flood, daemon=True)
    flooding.start()
    time.sleep(0.5)
    start = time.monotonic()
    try:
        assert daemon.stop(signal.SIGTERM, timeout=20) == 0
        # the flooder reads no replies: its connection is cut after the grace period
        assert time.monotonic() - start < STOP_REPLY_SECONDS + scaled(5), \
            "the stop waited on idle or stuck clients"
    finally:
        for sock in (silent, flooder):
            sock.close()
        for client in idle:
            client.close()
        flooding.join(10)
        if daemon.alive():
            daemon.kill()


def test_a_write_under_way_at_stop_is_finished_and_answered() -> None:
    """The test holds the store's lock (as a second daemon on the root would), so the
    write waits inside the daemon; SIGTERM then arrives; the daemon must neither drop
    the write nor exit before it is answered."""
    base = public_tmpdir()
    daemon = Daemon(standard_config(base)).start()
    replies: list[object] = []
    try:
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/kept.md", "v1\n")
            with holding_the_store_lock(base):
                writer = threading.Thread(
                    target=lambda: replies.append(alice.write("notes/kept.md", "v2\n")))
                writer.start()
                _until_waiting_for_a_lock(daemon)
                daemon.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
                time.sleep(1.0)
                assert daemon.alive(), "the daemon exited with a write under way"
            writer.join(20)
        assert daemon.proc.wait(20) == 0  # type: ignore[union-attr]
        assert len(replies) == 1 and replies[0]["digest"], replies  # type: ignore[index]
        daemon.start()
        with connect_as(UID_B, daemon.socket) as bob:
            assert bob.read("notes/kept.md")["text"] == "v2\n"
    finally:
        if daemon.alive():
            daemon.stop()


def test_a_second_sigterm_ends_the_daemon_at_once() -> None:
    """A write stuck under way (the test holds the store's lock) keeps the first SIGTERM
    waiting; the second one ends the daemon without waiting (the write was never
    acknowledged, so nothing acknowledged is lost)."""
    base = public_tmpdir()
    daemon = Daemon(standard_config(base)).start()

    def write_unanswered(alice: Client) -> None:
        with contextlib.suppress(Exception):  # the daemon dies before it answers
            alice.write("notes/stuck.md", "never acknowledged\n")

    try:
        with connect_as(UID_A, daemon.socket) as alice, holding_the_store_lock(base):
            writer = threading.Thread(target=write_unanswered, args=(alice,), daemon=True)
            writer.start()
            _until_waiting_for_a_lock(daemon)
            daemon.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            time.sleep(1.0)
            assert daemon.alive()
            start = time.monotonic()
            assert daemon.stop(signal.SIGTERM, timeout=10) == -signal.SIGTERM
            assert time.monotonic() - start < scaled(5)
            writer.join(10)
    finally:
        if daemon.alive():
            daemon.kill()


def _until_waiting_for_a_lock(daemon: Daemon) -> None:
    """Until the daemon waits for a file lock (a blocked waiter shows in /proc/locks
    with ``->`` and its pid): its write is then under way, not still on the wire."""
    assert daemon.proc is not None
    deadline = time.monotonic() + scaled(20)
    while time.monotonic() < deadline:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "->" in fields and str(daemon.proc.pid) in fields:
                return
        time.sleep(0.02)
    raise AssertionError("the daemon never waited for the store lock")


def test_at_most_40_requests_are_carried_out_at_once() -> None:
    """With the store lock held by the test, writes pile up inside the daemon: 39 of
    them leave room for a whoami, 40 take every slot (ACTIVE_REQUESTS) until the lock
    is released."""
    base = public_tmpdir()
    daemon = Daemon(standard_config(base)).start()
    clients = [connect_as(UID_A, daemon.socket) for _ in range(ACTIVE_REQUESTS)]
    probe = connect_as(UID_B, daemon.socket)
    answered: list[str] = []
    try:
        with holding_the_store_lock(base) as lock:
            writers = [threading.Thread(target=lambda c=c, n=n: c.write(f"notes/w{n}.md", "x\n"))
                       for n, c in enumerate(clients)]
            for writer in writers[:-1]:
                writer.start()
            _until_waiting_for_a_lock(daemon)
            time.sleep(scaled(0.5))  # the other 38 reach the daemon's own lock too
            assert probe.whoami()["agent"] == "bob"  # 39 busy: a slot is left
            writers[-1].start()
            time.sleep(scaled(1.0))
            asking = threading.Thread(target=lambda: answered.append(probe.whoami()["agent"]))
            asking.start()
            asking.join(2.0)
            assert answered == [], "a 41st request ran while 40 were under way"
            fcntl.flock(lock, fcntl.LOCK_UN)
            asking.join(scaled(20))
            assert answered == ["bob"]
            for writer in writers:
                writer.join(scaled(20))
            assert not any(writer.is_alive() for writer in writers)
    finally:
        for client in [*clients, probe]:
            client.close()
        daemon.stop()
