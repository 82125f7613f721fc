"""The stdio transport of ``memfs mcp`` without a thread hop per line.

The SDK's ``stdio_server`` reads stdin and writes stdout through ``anyio.wrap_file``:
every request line read, every reply written and every flush is a trip to a worker
thread and back. When stdin and stdout are pipes or sockets (as an MCP client starts
a server) this module serves the same two streams from the event loop itself
(asyncio's pipe transports: non-blocking reads and writes), and ``executor_runner``
gives the tools a plain executor hop instead of anyio's ``to_thread.run_sync``.

It keeps what the SDK's transport promises: while serving, fd 0 reads the null
device and fd 1 writes to stderr (stray output of a library never corrupts the wire),
both are restored on exit; input is UTF-8 with bad bytes replaced; one JSON line
per message. Anything else (a terminal, a regular file, an SDK without the hooks
used here) runs the SDK's own ``server.run("stdio")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")

MAX_LINE = 1 << 30  # a request line may carry a whole file; the SDK's reader has no cap


def pipe_like(fd: int) -> bool:
    """Whether ``fd`` is a pipe or a socket: a stream the event loop can watch without
    changing a terminal's shared flags (a regular file cannot be watched at all)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def fast_path_available(server: Any) -> bool:
    return (pipe_like(0) and pipe_like(1)
            and getattr(server, "_lowlevel_server", None) is not None)


@contextlib.contextmanager
def claimed_stdio() -> Iterator[tuple[int, int]]:
    """Private duplicates of fds 0 and 1 (the wire) for the duration; meanwhile fd 0
    reads /dev/null and fd 1 writes to stderr. Restores both (and the blocking mode
    of the wire) on exit."""
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    saved_in, saved_out = os.get_blocking(wire_in), os.get_blocking(wire_out)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield wire_in, wire_out
    finally:
        os.close(null)
        for fd, wire, blocking in ((0, wire_in, saved_in), (1, wire_out, saved_out)):
            with contextlib.suppress(OSError):
                os.set_blocking(wire, blocking)
                os.dup2(wire, fd)
            os.close(wire)


class LineReader:
    """``async for line in reader``: the wire's lines, decoded (bad UTF-8 replaced),
    with their newline, as the SDK's stdin reader expects."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        reader = self._reader
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as error:
            line = error.partial  # the last line without its newline, or EOF
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


class LineWriter:
    """``await write(text)`` then ``await flush()``: the text goes out at once when
    the pipe has room (no thread), else the loop sends it as the pipe drains."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


@contextlib.asynccontextmanager
async def open_streams(wire_in: int, wire_out: int) -> AsyncIterator[tuple[LineReader, LineWriter]]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE, loop=loop)
    read_file = os.fdopen(wire_in, "rb", buffering=0, closefd=False)
    write_file = os.fdopen(wire_out, "wb", buffering=0, closefd=False)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), read_file)
    write_transport, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), write_file)
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    try:
        yield LineReader(reader), LineWriter(writer)
    finally:
        read_transport.close()
        with contextlib.suppress(Exception):
            await writer.drain()
        write_transport.close()


async def serve_stdio(server: Any) -> None:
    """Serve ``server`` (an MCPServer) over the claimed stdio through the SDK's own
    message loop, fed by :class:`LineReader` and :class:`LineWriter`."""
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server
    with claimed_stdio() as (wire_in, wire_out):
        async with open_streams(wire_in, wire_out) as (lines, out), stdio_server(
            stdin=lines, stdout=out  # type: ignore[arg-type]  # duck-typed AsyncFile
        ) as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream,
                               lowlevel.create_initialization_options())


def run_stdio(server: Any) -> None:
    """Run ``server`` over stdio: the fast path when it applies, else the SDK's."""
    if not fast_path_available(server):
        server.run("stdio")
        return
    import anyio

    anyio.run(serve_stdio, server)


def executor_runner(executor: Executor) -> Callable[..., Awaitable[Any]]:
    """A ``run(fn, *args)`` that carries out ``fn`` in ``executor`` and awaits it from
    asyncio: one hop there and back, without anyio's per-call bookkeeping (capacity
    limiter, cancel scopes). A cancelled call lets ``fn`` finish in its thread, as
    anyio's non-abandoning hop does; only its result is dropped."""

    async def run(fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    return run
