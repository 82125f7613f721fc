"""The Unix-socket server: trio accepts and admits connections; each admitted
connection is then served on a thread of its own, one reply per request line.

The caller's identity is the uid the kernel reports for the peer (SO_PEERCRED), read
once per connection. A connection's thread reads its requests, has the Dispatcher
carry them out and writes the replies, so a slow disk or a slow client never stalls
other clients or the FUSE loop, and no request pays for a hand-over between threads.
A request that started always finishes, even if its client vanished: when the daemon
stops, each connection stops reading, the request under way (if any) is finished and
answered, and its thread is waited for.

What one client can do to the others is bounded (``ServerLimits``):

- connections: in all, per uid, and far fewer for a uid mapped to no agent; over a
  limit the connection is accepted, sent one ``busy`` error line and closed (never
  left in the backlog), and a rate-limited warning is logged;
- request lines: each connection's unfinished line is capped (an unknown uid's much
  lower), scanned for its newline once per byte, and the bytes held for unfinished
  lines by all connections together are capped; a line over a cap gets ``too_large``
  (or ``busy`` for the shared cap), the rest of it is read and dropped, and the
  connection carries on;
- failures: any exception while decoding, dispatching or encoding one request becomes
  an error reply and a log line, and any exception in one connection's task ends that
  connection only. Nothing a client sends ends the server.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket as stdsocket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from memfs.control import protocol as p
from memfs.control.ops.dispatcher import Dispatcher
from memfs.control.ops.registry import decode_request
from memfs.control.ratelimit import RateLimitedLog

log = logging.getLogger("memfs.control")

READ_CHUNK = 256 * 1024
# A read that starts a new line goes into a buffer of this size that the connection
# keeps: most requests fit, and a recv() of READ_CHUNK would allocate (and fault in)
# 256 KiB for each of them (~15 us a request). Longer lines go on with READ_CHUNK.
FIRST_READ = 16 * 1024
# Requests carried out at once, by all connections together (as trio's default thread
# limiter did before connections got threads of their own): a bound on the memory and
# disk work that clients can start together.
ACTIVE_REQUESTS = 40
# When the daemon stops, how long a request under way may take to be answered before
# its client's connection is cut (the request still finishes; only the reply is lost).
STOP_REPLY_SECONDS = 5.0
# An unfinished line this small never counts against the shared buffer cap, so small
# requests are never refused for lack of buffer space.
SMALL_LINE = 64 * 1024
# Errors of accept() that mean "out of something": wait a moment, then go on.
_ACCEPT_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_ACCEPT_ROUTINE = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR, errno.EAGAIN}


class SocketInUse(Exception):
    """Another live daemon already listens on the socket path."""


@dataclass(frozen=True)
class ServerLimits:
    """The resolved limits of one server (see memfs.config.LimitsConfig)."""

    max_line: int  # longest request line from an agent or delegate uid
    max_file_size: int | None = None  # the config's, which max_line is made for
    max_line_unknown_uid: int = 64 * 1024
    max_connections: int = 1024
    max_connections_per_uid: int = 64
    max_connections_unknown_uid: int = 4
    max_connections_unknown: int = 64
    max_buffered_bytes: int = 256 * 1024 * 1024


def peer_uid(sock: trio.socket.SocketType) -> int:
    creds = sock.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def max_line_bytes(max_file_size: int) -> int:
    """Longest request line accepted: a full file in base64 plus room for the rest."""
    return max_file_size * 4 // 3 + 64 * 1024


def _clear_stale_socket(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return
    with stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM) as probe:
        probe.setblocking(False)  # a live daemon's socket accepts (or is full) at once
        try:
            probe.connect(os.fspath(path))
        except OSError as error:
            if error.errno == errno.EAGAIN:  # its backlog is full: it is alive
                raise SocketInUse(f"{path} is in use by another running daemon") from None
            if error.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
                raise
            path.unlink(missing_ok=True)  # left by a dead daemon
            return
    raise SocketInUse(f"{path} is in use by another running daemon")


def bind_listener(path: Path) -> stdsocket.socket:
    """Bind and listen on the control socket (mode 0666: any local uid may connect;
    the kernel tells us who it is). Clears a stale socket file; raises SocketInUse for
    a live one. Blocking, no event loop needed: a daemon started as root binds it
    before it drops root (memfs/daemon/privilege.py); serve it with
    ``trio.SocketListener(trio.socket.from_stdlib_socket(sock))``."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    _clear_stale_socket(path)
    sock = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    try:
        sock.bind(os.fspath(path))
        os.chmod(path, 0o666)
        sock.listen(256)
    except BaseException:
        sock.close()
        raise
    return sock


class ConnectionTable:
    """Counts open connections per uid and admits new ones within the limits.

    Pure bookkeeping, used from the trio thread only. ``known(uid)`` tells an agent or
    delegate uid from an unknown one.
    """

    def __init__(self, limits: ServerLimits, known: Callable[[int], bool]) -> None:
        self.limits = limits
        self.known = known
        self.total = 0
        self.unknown = 0
        self.by_uid: dict[int, int] = {}

    def admit(self, uid: int) -> str | None:
        """Count a new connection from ``uid`` and return None, or return why it is
        refused (and count nothing)."""
        limits = self.limits
        mine = self.by_uid.get(uid, 0)
        known = self.known(uid)
        if self.total >= limits.max_connections:
            return f"the daemon has its maximum of {limits.max_connections} connections open"
        if known and mine >= limits.max_connections_per_uid:
            return f"uid {uid} has its maximum of {limits.max_connections_per_uid} connections open"
        if not known:
            if mine >= limits.max_connections_unknown_uid:
                return (f"uid {uid} is not mapped to any agent and has its maximum of "
                        f"{limits.max_connections_unknown_uid} connections open")
            if self.unknown >= limits.max_connections_unknown:
                return ("uids not mapped to any agent have their maximum of "
                        f"{limits.max_connections_unknown} connections open")
            self.unknown += 1
        self.total += 1
        self.by_uid[uid] = mine + 1
        return None

    def release(self, uid: int) -> None:
        """Forget one connection of ``uid`` admitted before."""
        self.total -= 1
        if not self.known(uid):
            self.unknown -= 1
        left = self.by_uid[uid] - 1
        if left:
            self.by_uid[uid] = left
        else:
            del self.by_uid[uid]


class ControlServer:
    def __init__(self, dispatcher: Dispatcher, max_line: int | ServerLimits) -> None:
        self.dispatcher = dispatcher
        self.limits = max_line if isinstance(max_line, ServerLimits) else ServerLimits(max_line)
        config = dispatcher.engine.config
        self.connections = ConnectionTable(self.limits, config.known_uid)
        self.buffered = 0  # bytes of unfinished lines held by all connections
        self._buffered_lock = threading.Lock()  # connection threads share the count
        self._active = threading.BoundedSemaphore(ACTIVE_REQUESTS)
        self._refusals = RateLimitedLog()
        self._accept_errors = RateLimitedLog()

    async def serve(
        self,
        listener: trio.SocketListener,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept connections until cancelled; never ends for anything a client does."""
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    sock = await accept(listener.socket, self._accept_errors, "control socket")
                    if sock is not None:
                        self._admit(nursery, sock)
        finally:
            listener.socket.close()

    def _admit(self, nursery: trio.Nursery, sock: trio.socket.SocketType) -> None:
        try:
            uid = peer_uid(sock)
        except OSError:
            sock.close()
            return
        refused = self.connections.admit(uid)
        if refused is not None:
            self._refusals.log("control socket: refused a connection from uid %d: %s",
                               uid, refused)
            send_and_close(sock, p.encode_error(None, "busy", f"too many connections: {refused}"))
            return
        nursery.start_soon(self._client, sock, uid)

    async def _client(self, sock: trio.socket.SocketType, uid: int) -> None:
        """Serve one connection on a thread of its own (see `_serve`) until the client
        leaves; if the daemon stops first, wake that thread (shut the socket down) and
        wait until the request it is carrying out, if any, has finished."""
        conn = stdsocket.socket(fileno=sock.detach())
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def serve() -> None:
            try:
                self._serve(conn, uid)
            finally:
                token.run_sync_soon(done.set)  # trio is still running: we wait for it

        try:
            try:
                conn.setblocking(True)
                threading.Thread(target=serve, name=f"memfs control uid {uid}",
                                 daemon=True).start()
            except (OSError, RuntimeError) as error:  # no thread to be had: this one only
                self._refusals.log("control socket: cannot serve uid %d: %s", uid, error)
                return
            await _until_served(conn, done)
        finally:
            conn.close()
            self.connections.release(uid)

    def _serve(self, conn: stdsocket.socket, uid: int) -> None:
        """The connection's thread: read request lines and answer each in turn, in
        this thread (a request costs no hand-over between threads: measured at ~0.27
        ms a request on a 2-CPU VM). At most ``ACTIVE_REQUESTS`` requests of all
        connections are carried out at once. Never raises."""
        try:
            self._loop(conn, uid)
        except OSError:
            pass  # the client went away, or the daemon is stopping: nothing is half-done
        except Exception:
            log.exception("control socket: connection from uid %d ended by an error", uid)

    def _loop(self, conn: stdsocket.socket, uid: int) -> None:
        """Read request lines and answer each in turn. The newline search covers each
        byte once (``scanned``); an unfinished line never holds more than the
        connection's cap plus one byte (reads are sized to the room left), and no
        line over the cap is decoded."""
        known = self.connections.known(uid)
        max_line = self.limits.max_line if known else self.limits.max_line_unknown_uid
        too_long = self._too_long(known, max_line)
        buffer = bytearray()
        scanned = 0  # buffer[:scanned] holds no newline
        held = 0  # this connection's share of self.buffered
        discarding = False  # inside a refused line: drop bytes up to its newline
        first = memoryview(bytearray(FIRST_READ))
        try:
            while True:
                if discarding:
                    dropped = conn.recv(READ_CHUNK)
                    if not dropped:
                        return
                    newline = dropped.find(b"\n")
                    if newline < 0:
                        continue
                    buffer += dropped[newline + 1 :]
                    discarding = False
                else:
                    room = min(READ_CHUNK, max_line + 1 - len(buffer))
                    if buffer:
                        chunk = conn.recv(room)
                        if not chunk:
                            return
                        buffer += chunk
                    else:
                        got = conn.recv_into(first, min(FIRST_READ, room))
                        if not got:
                            return
                        buffer += first[:got]
                start = 0
                while (newline := buffer.find(b"\n", scanned)) >= 0:
                    with memoryview(buffer) as view:
                        line = bytes(view[start:newline])
                    start = scanned = newline + 1
                    if len(line) > max_line:  # only just after a dropped line
                        conn.sendall(too_long)
                    elif line and not line.isspace():
                        conn.sendall(self._reply(uid, line))
                del buffer[:start]
                scanned = len(buffer)
                refusal = None
                with self._buffered_lock:
                    if len(buffer) > max_line:
                        refusal = too_long
                    elif (len(buffer) > SMALL_LINE and self.buffered - held + len(buffer)
                          > self.limits.max_buffered_bytes):
                        refusal = p.encode_error(
                            None, "busy", "the daemon holds too many large unfinished "
                            "requests; retry later")
                    if refusal is not None:
                        buffer = bytearray()
                        scanned = 0
                        discarding = True
                    self.buffered += len(buffer) - held
                    held = len(buffer)
                if refusal is not None:
                    conn.sendall(refusal)
        finally:
            with self._buffered_lock:
                self.buffered -= held

    def _too_long(self, known: bool, max_line: int) -> bytes:
        """The reply to a request line over ``max_line``: for an agent's (``known``)
        connection, with the config's ``max_file_size`` in its details, so that a
        client can say how large a file may be (the size it sent is its own to say)."""
        details = {}
        if known and self.limits.max_file_size is not None:
            details["max_file_size"] = self.limits.max_file_size
        return p.encode_error(None, "too_large", f"request line longer than {max_line} bytes",
                              details)

    def _reply(self, uid: int, line: bytes) -> bytes:
        """The reply line to one request line; never raises."""
        request_id: int | str | None = None
        try:
            try:
                request = decode_request(line)
            except p.ProtocolError as error:
                return p.encode_error(error.request_id, error.code, error.message)
            request_id = request.id
            with self._active:
                return self.dispatcher.handle(uid, request)
        except Exception:
            log.exception("control socket: request from uid %d failed", uid)
            return p.fallback_line(request_id)


async def _until_served(conn: stdsocket.socket, done: trio.Event) -> None:
    """Until the connection's thread is done (``done``). If cancelled (the daemon
    stops): no new requests (the thread's next read ends) and the one under way is
    answered; a client that reads no replies is cut off after STOP_REPLY_SECONDS.
    The request itself always finishes: the thread is waited for in any case."""
    try:
        await done.wait()
    except BaseException:
        with contextlib.suppress(OSError):
            conn.shutdown(stdsocket.SHUT_RD)
        with trio.CancelScope(shield=True):
            with trio.move_on_after(STOP_REPLY_SECONDS):
                await done.wait()
            with contextlib.suppress(OSError):
                conn.shutdown(stdsocket.SHUT_RDWR)
            await done.wait()
        raise


async def accept(listener: trio.socket.SocketType, errors: RateLimitedLog, what: str
                 ) -> trio.socket.SocketType | None:
    """One connection from ``listener``, or None after a failed accept(): at once for
    the routine errors; for any other, after a warning (rate-limited by ``errors``)
    and a pause (0.1 s when out of descriptors or memory), so that a loop calling
    this never spins."""
    try:
        sock, _ = await listener.accept()
    except OSError as error:
        if error.errno in _ACCEPT_ROUTINE:
            return None
        # Should not happen (fd_reserve keeps descriptors free); never spin on it.
        errors.log("%s: accept failed: %s", what, error)
        await trio.sleep(0.1 if error.errno in _ACCEPT_EXHAUSTED else 0.01)
        return None
    return sock


def send_and_close(sock: trio.socket.SocketType, data: bytes) -> None:
    """Send ``data`` (a refusal) without waiting, then close the connection. A
    client on the Unix socket reads it even if it had sent a request (it is queued
    before the reset)."""
    raw = stdsocket.socket(fileno=sock.detach())
    with raw:
        raw.setblocking(False)
        with contextlib.suppress(OSError):
            raw.send(data)
