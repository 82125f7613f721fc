"""A slow or stuck client never blocks the others."""

from __future__ import annotations

import socket
import threading
import time

from tests.support import UID_A, UID_B, Daemon, as_euid, connect_as, scaled


def test_stuck_clients_do_not_block_others(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/big.md", "x" * 60000 + "\n")
    stuck = []
    with as_euid(UID_B):
        # one that never reads its replies (the daemon's send to it blocks) ...
        flooder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        flooder.connect(str(daemon.socket))
        # ... and one that sends half a request and goes silent
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(str(daemon.socket))
    stuck += [flooder, silent]
    silent.sendall(b'{"op": "read", "path": "notes/big')
    request = b'{"op": "read", "path": "notes/big.md"}\n'

    def flood() -> None:
        try:
            for _ in range(500):
                flooder.sendall(request)
        except OSError:
            pass

    flooding = threading.Thread(target=flood, daemon=True)
    flooding.start()
    time.sleep(0.5)  # long enough for the flooder's replies to fill every buffer
    try:
        with connect_as(UID_A, daemon.socket) as alice:
            start = time.monotonic()
            for n in range(20):
                alice.write(f"notes/other-{n}.md", f"{n}\n")
                assert alice.read(f"notes/other-{n}.md")["text"] == f"{n}\n"
            assert time.monotonic() - start < scaled(10)  # not stuck behind the flooder
    finally:
        for sock in stuck:
            sock.shutdown(socket.SHUT_RDWR)  # wakes the flooding thread's blocked send
            sock.close()
        flooding.join(10)
    with connect_as(UID_B, daemon.socket) as bob:  # and the daemon is fine afterwards
        assert bob.whoami()["agent"] == "bob"
