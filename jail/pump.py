"""One jailed run, from the client's side: feed the tool's stdin, drain its stdout and
stderr through pipes, then read the launcher's verdict on the reply socket (see
``jail.wire``).

Output comes in many small writes: parallel rg writes each file's results at once,
one ``write`` per file (2,000 files with a match: 2,000 writes of ~30 bytes). Woken
for each, the reader spent more than rg itself. So after a read that did not fill
the buffer, and once stdin is fed, the pump lets output gather for up to
``GATHER_SECONDS`` before reading again, waking at once when the launcher's verdict
comes (the tool has exited: everything it wrote is in the pipe); the stdout pipe is
made big enough (``PIPE_BYTES``) that the tool never waits on the pump meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import selectors
import socket
import time
from typing import TYPE_CHECKING, Any

from memfs.jail.errors import JailError

if TYPE_CHECKING:
    from memfs.jail.settings import JailSettings

GRACE_SECONDS = 5.0  # how long past the timeout we wait for the launcher's verdict
GATHER_SECONDS = 0.002  # longest pause for output to gather after a short read
PIPE_BYTES = 1 << 20  # the stdout pipe's size (Linux's default cap for unprivileged users)
_CHUNK = 65536


def pump(
    fds: list[int],
    stdin: bytes | None,
    limit: int,
    reply_sock: socket.socket,
    settings: JailSettings,
) -> tuple[bytes, bytes, bool]:
    """Feed stdin and drain stdout/stderr concurrently until both reach EOF (the
    tool exited or was killed). Closes the three fds."""
    stdin_w, stdout_r, stderr_r = fds
    out = bytearray()
    err = bytearray()
    over = False
    pending = memoryview(stdin or b"")
    deadline = time.monotonic() + settings.timeout_seconds + GRACE_SECONDS
    selector = selectors.DefaultSelector()
    open_fds = set(fds)
    gather = False  # the last stdout read was short: let more output gather first
    verdict_sent = select.poll()
    verdict_sent.register(reply_sock, select.POLLIN)
    with contextlib.suppress(OSError):  # a smaller pipe only means more wake-ups
        fcntl.fcntl(stdout_r, fcntl.F_SETPIPE_SZ, PIPE_BYTES)

    def done_with(fd: int) -> None:
        selector.unregister(fd)
        os.close(fd)
        open_fds.discard(fd)

    try:
        if pending:
            os.set_blocking(stdin_w, False)
            selector.register(stdin_w, selectors.EVENT_WRITE)
        else:
            os.close(stdin_w)
            open_fds.discard(stdin_w)
        selector.register(stdout_r, selectors.EVENT_READ)
        selector.register(stderr_r, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise JailError("the jail launcher did not stop the tool in time")
            if gather and not pending:
                # Until the verdict (the tool exited) or a short pause, whichever first.
                verdict_sent.poll(min(GATHER_SECONDS, remaining) * 1000)
                gather = False
            for key, _ in selector.select(remaining):
                fd = int(key.fd)
                if fd == stdin_w:
                    try:
                        pending = pending[os.write(stdin_w, pending[:_CHUNK]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # the tool stopped reading: fine
                        pending = memoryview(b"")
                    if not pending:
                        done_with(stdin_w)
                    continue
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    done_with(fd)
                elif fd == stderr_r:
                    err += chunk[: max(0, settings.stderr_limit_bytes - len(err))]
                elif not over:
                    gather = len(chunk) < _CHUNK
                    out += chunk
                    if len(out) > limit:
                        over = True  # more than we keep: have the launcher kill it
                        with contextlib.suppress(OSError):
                            reply_sock.shutdown(socket.SHUT_WR)
    finally:
        selector.close()
        for fd in open_fds:
            os.close(fd)
    return bytes(out), bytes(err), over


def verdict(reply_sock: socket.socket, settings: JailSettings) -> dict[str, Any]:
    """The launcher's one JSON reply on ``reply_sock`` (see ``jail.wire``)."""
    reply_sock.settimeout(settings.timeout_seconds + GRACE_SECONDS)
    try:
        data = reply_sock.recv(65536)
    except (TimeoutError, OSError) as error:
        raise JailError(f"no answer from the jail launcher: {error}") from error
    if not data:
        raise JailError("the jail launcher is gone")
    reply: dict[str, Any] = json.loads(data)
    return reply
