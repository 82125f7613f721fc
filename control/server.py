"""The trio Unix-socket server: one task per client, one reply per request line.

The caller's identity is the uid the kernel reports for the peer (SO_PEERCRED), read
once per connection. Requests are decoded here and carried out by the Dispatcher in
a worker thread, so a slow disk never stalls other clients or the FUSE loop, and a
commit that started always finishes (worker threads are not abandoned on cancel),
even if its client vanished. A malformed or oversized line gets an error reply; the
rest of an oversized line is read and dropped, and the connection carries on.
"""

from __future__ import annotations

import errno
import logging
import os
import socket as stdsocket
import struct
from pathlib import Path

import trio

from control import protocol as p
from control.dispatch import Dispatcher

log = logging.getLogger("memfs.control")

READ_CHUNK = 256 * 1024


class SocketInUse(Exception):
    """Another live daemon already listens on the socket path."""


def peer_uid(sock: trio.socket.SocketType) -> int:
    creds = sock.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def max_line_bytes(max_file_size: int) -> int:
    """Longest request line accepted: a full file in base64 plus room for the rest."""
    return max_file_size * 4 // 3 + 64 * 1024


async def _clear_stale_socket(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return
    probe = trio.socket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    try:
        await probe.connect(os.fspath(path))
    except OSError as error:
        if error.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            raise
        path.unlink(missing_ok=True)  # left by a dead daemon
        return
    finally:
        probe.close()
    raise SocketInUse(f"{path} is in use by another running daemon")


async def open_listener(path: Path) -> trio.SocketListener:
    """Bind the control socket (mode 0666: any local uid may connect; the kernel tells
    us who it is). Clears a stale socket file; raises SocketInUse for a live one."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    await _clear_stale_socket(path)
    sock = trio.socket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    await sock.bind(os.fspath(path))
    os.chmod(path, 0o666)
    sock.listen(256)
    return trio.SocketListener(sock)


class ControlServer:
    def __init__(self, dispatcher: Dispatcher, max_line: int) -> None:
        self.dispatcher = dispatcher
        self.max_line = max_line

    async def serve(
        self,
        listener: trio.SocketListener,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        await trio.serve_listeners(self._client, [listener])

    async def _client(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                uid = peer_uid(stream.socket)
                await self._loop(stream, uid)
            except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
                pass  # the client went away; nothing of ours is left half-done

    async def _loop(self, stream: trio.SocketStream, uid: int) -> None:
        buffer = bytearray()
        discarding = False  # inside an oversized line: drop bytes up to its newline
        while True:
            newline = buffer.find(b"\n")
            if discarding:
                if newline < 0:
                    buffer.clear()
                else:
                    del buffer[: newline + 1]
                    discarding = False
                    continue
            elif newline > self.max_line or (newline < 0 and len(buffer) > self.max_line):
                message = f"request line longer than {self.max_line} bytes"
                await stream.send_all(p.encode_error(None, "too_large", message))
                discarding = True
                continue
            elif newline >= 0:
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                if line.strip():
                    await stream.send_all(await self._reply(uid, line))
                continue
            chunk = await stream.receive_some(READ_CHUNK)
            if not chunk:
                return
            buffer += chunk

    async def _reply(self, uid: int, line: bytes) -> bytes:
        try:
            request = p.decode_request(line)
        except p.ProtocolError as error:
            return p.encode_error(error.request_id, error.code, error.message)
        return await trio.to_thread.run_sync(self.dispatcher.handle, uid, request)
