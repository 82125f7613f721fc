"""The daemon's HTTP/1.1 server: an ASGI 3 application served on the daemon's trio
loop, plain or TLS (trio.SSLStream); the HTTP/1.1 framing is control/http/h1.py's
(request heads parsed by llhttp, in C).

What one client can do to the others is bounded (``HttpLimits``, from ``[limits]``):

- connections: in all and per client address. A new connection over a limit closes
  the connection of all (or of its address) that has waited longest for a request
  (an idle keep-alive one, or one still sending its head); when every connection is
  inside a request, the new one gets a short 503 (problem+json, ``Retry-After``) and
  is closed, never left in the backlog. Refusals log a rate-limited warning, and an
  accept() out of descriptors waits 0.1 s (never spins);
- time: a connection waits ``idle_seconds`` for a request; a request head must be
  whole within ``head_seconds`` of its first byte (TLS handshake included) and at
  most ``max_head_bytes`` long; a request body, or a response write, that makes no
  progress for ``body_seconds`` ends the connection;
- framing: a request with both Transfer-Encoding and Content-Length (RFC 9112 §6.3,
  how request smuggling starts) gets 400 and the connection is closed, and so does a
  target whose percent-encoded bytes are not UTF-8 (it would name something other
  than what was sent: ``%FF`` is no character, not U+FFFD).

A connection is closed as soon as its client has closed it. A client that goes away
mid-body or mid-response is not an error: the application sees ``http.disconnect``,
and its exception, if it raises one, is one short rate-limited line. A response that
declares its Content-Length goes out in one write, head and body together.

When ``stop`` is set: no new connections, idle ones are closed, requests in flight
get GRACEFUL_SECONDS (their connections close after the response), then the rest
are cancelled.
"""

from __future__ import annotations

import contextlib
import email.utils
import http
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

import trio
from starlette.types import ASGIApp, Message, Scope

from memfs.control.http import h1
from memfs.control.http.problems import problem
from memfs.control.ratelimit import RateLimitedLog
from memfs.control.socket.server import accept, send_and_close

log = logging.getLogger("memfs.http")

READ_CHUNK = 64 * 1024
# An unread request body (an answer given before the body was needed) is read and
# dropped up to this much, so that the client reads its answer instead of a reset.
DRAIN_LIMIT = 1024 * 1024
# What a stream raises once its client has gone (or the socket was closed to make room).
CLOSED = (trio.BrokenResourceError, trio.ClosedResourceError)
GRACEFUL_SECONDS = 3.0  # in-flight requests get this long when the daemon stops


@dataclass(frozen=True)
class HttpLimits:
    """The resolved limits of the listener (see memfs.config.LimitsConfig)."""

    max_connections: int = 1024
    max_connections_per_address: int = 256
    head_seconds: float = 10.0
    max_head_bytes: int = 16 * 1024
    body_seconds: float = 30.0
    idle_seconds: float = 30.0


class _Connection:
    """One accepted connection: its socket, the client's address and port, ours."""

    __slots__ = ("address", "client", "server", "sock")

    def __init__(self, sock: trio.socket.SocketType, client: tuple[str, int],
                 server: tuple[str, int]) -> None:
        self.sock = sock
        self.client = client
        self.server = server
        self.address = client[0]


class ConnectionTable:
    """The open connections, in all and per address, and which of them wait for a
    request (oldest first). Used from the trio thread only."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.open: set[_Connection] = set()
        self.by_address: dict[str, int] = {}
        self.waiting: dict[_Connection, None] = {}  # insertion order: longest waiting first
        self.emptied = trio.Event()  # set (and renewed) each time the last one closes

    def admit(self, conn: _Connection) -> str | None:
        """Count ``conn`` and return None, closing a waiting connection if that makes
        room; or return why it is refused (and count nothing)."""
        limits = self.limits
        mine = self.by_address.get(conn.address, 0)
        if mine >= limits.max_connections_per_address:
            victim = next((c for c in self.waiting if c.address == conn.address), None)
            if victim is None:
                return (f"{conn.address} has its maximum of "
                        f"{limits.max_connections_per_address} connections open")
            self.close(victim)
        elif len(self.open) >= limits.max_connections:
            victim = next(iter(self.waiting), None)
            if victim is None:
                return f"the listener has its maximum of {limits.max_connections} connections open"
            self.close(victim)
        self.open.add(conn)
        self.by_address[conn.address] = self.by_address.get(conn.address, 0) + 1
        self.waiting[conn] = None
        return None

    def wait(self, conn: _Connection) -> None:
        """``conn`` waits for a request: it may be closed to make room."""
        if conn in self.open:
            self.waiting[conn] = None

    def busy(self, conn: _Connection) -> None:
        """``conn`` is inside a request."""
        self.waiting.pop(conn, None)

    def close(self, conn: _Connection) -> None:
        """Close ``conn``'s socket now (its task, if waiting on it, wakes up with
        ClosedResourceError) and forget it."""
        conn.sock.close()
        self.release(conn)

    def release(self, conn: _Connection) -> None:
        """Forget ``conn`` (again: nothing)."""
        if conn not in self.open:
            return
        self.open.discard(conn)
        self.waiting.pop(conn, None)
        left = self.by_address[conn.address] - 1
        if left:
            self.by_address[conn.address] = left
        else:
            del self.by_address[conn.address]
        if not self.open:
            self.emptied.set()
            self.emptied = trio.Event()


_date_cache: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    """The Date header's value, formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, email.utils.formatdate(now, usegmt=True).encode())
    return _date_cache[1]


def raw_problem(status: int, code: str, message: str) -> bytes:
    """A whole problem+json response that closes the connection, for answers given
    outside any request (a refused connection, an unreadable head)."""
    answer = problem(code, message, status=status)
    head = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}".encode()]
    head += [name + b": " + value for name, value in answer.raw_headers]
    head += [b"date: " + _date(), b"Connection: close"]
    return b"\r\n".join(head) + b"\r\n\r\n" + answer.body


class _Gone(Exception):
    """The client went away, or stalled past body_seconds."""


class _Exchange:
    """One request and its response: the ASGI ``receive`` and ``send``."""

    def __init__(self, server: HttpServer, stream: trio.abc.Stream, parser: h1.Connection,
                 request: h1.Request) -> None:
        self.server = server
        self.stream = stream
        self.parser = parser
        self.head_only = request.method == b"HEAD"
        self.body_started = False  # the application asked for the request body
        self.body_done = False  # the whole request body was handed to the application
        self.gone = False  # the client went away: nothing more is sent or read
        self.started = False  # http.response.start was sent by the application
        self.held: bytes | None = None  # a sized response's head, until its body
        self.done = False  # the response is complete, or the client has gone
        self.ended = trio.Event()  # set once gone or done
        self._waiting: trio.CancelScope | None = None  # a receive() waiting for the end

    async def receive(self) -> Message:
        if self.gone or self.done:
            return {"type": "http.disconnect"}
        if not self.body_done:
            try:
                return await self._body()
            except _Gone:
                self._end(gone=True)
                return {"type": "http.disconnect"}
        await self._until_ended()
        return {"type": "http.disconnect"}

    async def _body(self) -> Message:
        parser = self.parser
        self.body_started = True
        if parser.waiting_for_continue:
            await self._write(parser.informational(100))
        while True:
            try:
                event = parser.next_event()
            except h1.ProtocolError:  # cut short, or a broken chunk
                raise _Gone from None
            if event is h1.NEED_DATA:
                parser.receive_data(await self._read(self.server.limits.body_seconds))
            elif isinstance(event, h1.Data):
                return {"type": "http.request", "body": event.data, "more_body": True}
            elif event is h1.END:
                self.body_done = True
                return {"type": "http.request", "body": b"", "more_body": False}
            else:
                raise _Gone

    async def _read(self, seconds: float) -> bytes:
        """Some bytes from the client; _Gone when it stalls past ``seconds``, closes
        or breaks the connection."""
        with trio.move_on_after(seconds):
            try:
                data = await self.stream.receive_some(READ_CHUNK)
            except CLOSED:
                raise _Gone from None
            if not data:
                raise _Gone
            return bytes(data)
        raise _Gone

    async def _until_ended(self) -> None:
        """Wait (reading, so that a client that closes is noticed) until the response
        is complete or the client has gone."""
        if self._waiting is not None:  # another task reads already
            await self.ended.wait()
            return
        with trio.CancelScope() as self._waiting:
            try:
                # Bytes of a pipelined next request are kept for it, up to a head's worth.
                while self.parser.unparsed <= self.server.limits.max_head_bytes:
                    data = await self.stream.receive_some(READ_CHUNK)
                    if not data:
                        self._end(gone=True)
                        break
                    self.parser.receive_data(bytes(data))
            except CLOSED:
                self._end(gone=True)
            finally:
                self._waiting = None
        await self.ended.wait()

    def _end(self, *, gone: bool) -> None:
        self.gone = self.gone or gone
        self.done = True
        self.ended.set()
        if self._waiting is not None:
            self._waiting.cancel()

    async def send(self, message: Message) -> None:
        if self.gone:
            return  # nobody reads it any more (ASGI: the application sees http.disconnect)
        parser = self.parser
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            headers = [*message.get("headers", ()), (b"date", _date())]
            head = parser.response(message["status"], headers, head_only=self.head_only)
            if any(name.lower() == b"content-length" for name, _ in headers):
                self.held = head  # sent with the body, in one write
            else:
                await self._write(head)
        elif kind == "http.response.body":
            if not self.started or self.done:
                raise RuntimeError("http.response.body out of turn")
            out = b""
            if self.held is not None:
                out, self.held = self.held, None
            out += parser.data(message.get("body", b""))
            more = message.get("more_body", False)
            if not more:
                out += parser.end()
            if out:
                await self._write(out)
            if not more:
                self._end(gone=False)
        else:
            raise RuntimeError(f"unknown ASGI message {kind!r}")

    async def _write(self, data: bytes) -> None:
        with trio.move_on_after(self.server.limits.body_seconds):
            try:
                await self.stream.send_all(data)
                return
            except CLOSED:
                pass
        self._end(gone=True)


class HttpServer:
    """Serves ``app`` on the listeners given to `serve` (see the module doc)."""

    def __init__(self, app: ASGIApp, limits: HttpLimits, *, tls: ssl.SSLContext | None = None,
                 counted: Callable[[int], None] | None = None) -> None:
        """``counted(+1 / -1)``: told of each connection opened and closed."""
        self.app = app
        self.limits = limits
        self.tls = tls
        self.counted = counted
        self.table = ConnectionTable(limits)
        self.stopping = False
        self._refusals = RateLimitedLog(log)
        self._accept_errors = RateLimitedLog(log)
        self._gone = RateLimitedLog(log, level=logging.INFO)
        self._failures = RateLimitedLog(log, level=logging.ERROR)

    async def serve(self, listeners: list[trio.SocketListener], stop: trio.Event, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept and serve until ``stop`` is set, then stop gracefully (module doc)."""
        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(self._accept, listener, connections)
                task_status.started()
                await stop.wait()
                accepting.cancel_scope.cancel()
            self.stopping = True
            for conn in list(self.table.waiting):
                self.table.close(conn)
            with trio.move_on_after(GRACEFUL_SECONDS):
                while self.table.open:
                    await self.table.emptied.wait()
            connections.cancel_scope.cancel()

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        try:
            while True:
                sock = await accept(listener.socket, self._accept_errors, "http")
                if sock is not None:
                    self._admit(sock, nursery)
        finally:
            listener.socket.close()

    def _admit(self, sock: trio.socket.SocketType, nursery: trio.Nursery) -> None:
        try:
            conn = _Connection(sock, sock.getpeername()[:2], sock.getsockname()[:2])
        except OSError:
            sock.close()
            return
        refused = self.table.admit(conn)
        if refused is None:
            nursery.start_soon(self._connection, conn)
            return
        self._refusals.log("http: refused a connection from %s: %s", conn.address, refused)
        # (a TLS client would need a handshake first: it is just closed)
        send_and_close(sock, b"" if self.tls else raw_problem(
            503, "busy", f"too many connections: {refused}"))

    async def _connection(self, conn: _Connection) -> None:
        if conn not in self.table.open:
            return  # closed to make room before it was served
        if self.counted is not None:
            self.counted(+1)
        try:
            stream: trio.abc.Stream = trio.SocketStream(conn.sock)
            if self.tls is not None:
                stream = trio.SSLStream(stream, self.tls, server_side=True,
                                        https_compatible=True)
                with trio.move_on_after(self.limits.head_seconds) as handshake:
                    await stream.do_handshake()
                if handshake.cancelled_caught:
                    return
            await self._requests(conn, stream)
        except CLOSED:
            pass  # the client went away, or its connection was closed to make room
        except Exception as error:  # this connection only: never the listener
            self._failures.log("http: a connection from %s ended by an error", conn.address,
                               exc_info=error)
        finally:
            self.table.release(conn)
            conn.sock.close()
            if self.counted is not None:
                self.counted(-1)

    async def _requests(self, conn: _Connection, stream: trio.abc.Stream) -> None:
        parser = h1.Connection(self.limits.max_head_bytes)
        base = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "scheme": "https" if self.tls is not None else "http", "root_path": "",
            "client": conn.client, "server": conn.server,
        }
        while not self.stopping:
            self.table.wait(conn)
            request = await self._head(parser, stream)
            if request is None:
                return
            self.table.busy(conn)
            if not await self._exchange(parser, stream, request, base, conn.address):
                return
            if not parser.start_next_cycle():
                return

    async def _head(self, parser: h1.Connection, stream: trio.abc.Stream) -> h1.Request | None:
        """The next request's head, or None when the connection is to be closed (the
        client closed it, stayed idle or slow too long, or sent a bad head: answered
        400 or 431 first)."""
        deadline = trio.current_time() + self.limits.idle_seconds
        started = False
        while True:
            try:
                event = parser.next_event()
            except h1.ProtocolError as error:
                status = error.status
                await _send_quietly(stream, self.limits.body_seconds, raw_problem(
                    status, "head_too_large" if status == 431 else "invalid", str(error)))
                return None
            if isinstance(event, h1.Request):
                return event
            if event is not h1.NEED_DATA:
                return None  # the client closed the connection
            if not started and parser.unparsed:
                started = True
                deadline = trio.current_time() + self.limits.head_seconds
            # never more than a head's worth unparsed: the parser then refuses it (431)
            room = self.limits.max_head_bytes + 1 - parser.unparsed
            with trio.move_on_at(deadline):
                parser.receive_data(bytes(await stream.receive_some(max(room, 1))))
                continue
            return None

    async def _exchange(self, parser: h1.Connection, stream: trio.abc.Stream,
                        request: h1.Request, base: dict[str, Any], address: str) -> bool:
        """Run the application for ``request``; True if the connection may serve the
        next request."""
        refusal = _refusal(request)
        if refusal is not None:
            await _send_quietly(stream, self.limits.body_seconds,
                                raw_problem(400, "invalid", refusal))
            return False
        raw_path, _, query = request.target.partition(b"?")
        scope: Scope = {
            **base, "http_version": request.http_version.decode(),
            "method": request.method.decode(), "path": unquote(raw_path.decode("ascii")),
            "raw_path": raw_path, "query_string": query, "headers": list(request.headers),
            "state": {},
        }
        exchange = _Exchange(self, stream, parser, request)
        expected_continue = parser.waiting_for_continue
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception as error:
            if exchange.gone:
                self._gone.log("http: a client (%s) went away during its request", address)
            else:
                self._failures.log("http: %s %s failed", scope["method"], scope["path"],
                                       exc_info=error)
                if not exchange.started:
                    await problem("internal", f"internal error: {type(error).__name__}")(
                        scope, exchange.receive, exchange.send)
            return False
        if exchange.gone or not exchange.done:  # (an application that never finished)
            return False
        if not parser.their_done:
            if expected_continue and not exchange.body_started:
                return False  # the client waits for a 100 it will never get
            return await _drain(parser, stream, self.limits.body_seconds)
        return not parser.must_close


def _refusal(request: h1.Request) -> str | None:
    """Why ``request`` is refused before the application sees it, or None."""
    names = {name for name, _ in request.headers}
    if b"transfer-encoding" in names and b"content-length" in names:
        return ("a request may not have both Transfer-Encoding and Content-Length "
                "(RFC 9112 section 6.3)")
    if not request.target.isascii():
        return "the request target is not ASCII (percent-encode it)"
    path, _, query = request.target.partition(b"?")
    try:
        unquote_to_bytes(path).decode("utf-8")
        unquote_to_bytes(query.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        return "the request target is not UTF-8 once percent-decoded"
    return None


async def _drain(parser: h1.Connection, stream: trio.abc.Stream, seconds: float) -> bool:
    """Read and drop the rest of a request body the application left unread (up to
    DRAIN_LIMIT, each read within ``seconds``); True if the connection can go on."""
    dropped = 0
    while dropped <= DRAIN_LIMIT:
        try:
            event = parser.next_event()
        except h1.ProtocolError:
            return False
        if event is h1.END:
            return not parser.must_close
        if isinstance(event, h1.Data):
            dropped += len(event.data)
        elif event is h1.NEED_DATA:
            with trio.move_on_after(seconds):
                data = await stream.receive_some(READ_CHUNK)
                if not data:
                    return False
                parser.receive_data(bytes(data))
                continue
            return False
        else:
            return False
    return False


async def _send_quietly(stream: trio.abc.Stream, seconds: float, data: bytes) -> None:
    """Send an answer before closing (within ``seconds``); a client that left gets
    nothing."""
    with trio.move_on_after(seconds), contextlib.suppress(*CLOSED):
        await stream.send_all(data)
