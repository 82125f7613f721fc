"""One jailed run, from the client's side: feed the tool's stdin, drain its stdout and
stderr through pipes, then read the launcher's verdict on the reply socket (see
``jail.wire``)."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import time
from typing import TYPE_CHECKING, Any

from jail.errors import JailError

if TYPE_CHECKING:
    from jail.settings import JailSettings

GRACE_SECONDS = 5.0  # how long past the timeout we wait for the launcher's verdict


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
            for key, _ in selector.select(remaining):
                fd = int(key.fd)
                if fd == stdin_w:
                    try:
                        pending = pending[os.write(stdin_w, pending[:65536]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # the tool stopped reading: fine
                        pending = memoryview(b"")
                    if not pending:
                        done_with(stdin_w)
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    done_with(fd)
                elif fd == stderr_r:
                    err += chunk[: max(0, settings.stderr_limit_bytes - len(err))]
                elif not over:
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
