"""ASGI servers side by side, each serving the same bare application: what a server
itself costs per request, for choosing the daemon's HTTP server by figures
(scripts/bench_http.py). Not part of memfs.

    python asgi_servers.py SERVER

binds 127.0.0.1 on a free port, prints ``ready PORT`` on stdout, and serves until
SIGTERM. The application answers every request with 1 KiB from memory (status 200,
Content-Type and Content-Length), reading nothing, so that the figures are the
server's own. SERVER is one of:

- ``memfs``: memfs's own HTTP/1.1 server on h11 + trio (control/http/server.py, with
  the listener's default limits), as the daemon runs it (run with memfs's venv);
- ``hypercorn``: Hypercorn's trio worker (h11 too), on a trio loop;
- ``anycorn``: Anycorn, Hypercorn's fork on AnyIO, on a trio loop;
- ``uvicorn-h11`` and ``uvicorn-httptools``: Uvicorn on asyncio (uvloop), with either
  HTTP/1.1 parser: it cannot share the daemon's trio loop (it would need a thread and
  a loop of its own);
- ``granian``: Granian, a server written in Rust, its ASGI interface (one worker, one
  runtime thread): its own process or thread and event loop, too;
- ``raw``: no HTTP at all, the floor of a Python server on trio: reads until the end
  of a request head and writes one fixed answer.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import Any

BODY = os.urandom(512).hex().encode()  # 1 KiB
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", str(len(BODY)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The bare application: 1 KiB from memory, whatever was asked."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def listening() -> socket.socket:
    sock = socket.create_server(("127.0.0.1", 0), backlog=socket.SOMAXCONN)
    sock.set_inheritable(True)
    return sock


def ready(port: int) -> None:
    print(f"ready {port}", flush=True)


def serve_memfs(sock: socket.socket) -> None:
    import trio

    from memfs.control.http.server import HttpLimits, HttpServer

    async def main() -> None:
        stop = trio.Event()
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        async with trio.open_nursery() as nursery:
            await nursery.start(HttpServer(app, HttpLimits()).serve, [listener], stop)
            ready(sock.getsockname()[1])
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    stop.set()
                    break

    trio.run(main)


def serve_hypercorn(sock: socket.socket, package: str) -> None:
    import importlib

    import trio

    config = importlib.import_module(f"{package}.config").Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.accesslog = config.errorlog = None
    # hypercorn.trio.serve; anycorn.serve runs on whichever AnyIO backend is current
    serve = importlib.import_module(package if package == "anycorn" else f"{package}.trio").serve

    async def main() -> None:
        shutdown = trio.Event()

        async def on_sigterm() -> None:
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    shutdown.set()
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_sigterm)
            ready(sock.getsockname()[1])
            await serve(app, config, shutdown_trigger=shutdown.wait)
            nursery.cancel_scope.cancel()

    trio.run(main)


def serve_uvicorn(sock: socket.socket, parser: str) -> None:
    import uvicorn

    config = uvicorn.Config(app, http=parser, loop="uvloop", lifespan="off",
                            access_log=False, log_level="warning")
    server = uvicorn.Server(config)
    ready(sock.getsockname()[1])
    server.run(sockets=[sock])


def serve_granian(sock: socket.socket) -> None:
    from granian.constants import Interfaces
    from granian.server import Server

    port = sock.getsockname()[1]
    sock.close()  # granian binds by address: free the port for it (a bench: no race)
    server = Server(f"{__name__}:app", address="127.0.0.1", port=port, interface=Interfaces.ASGI,
                    workers=1, runtime_threads=1, log_enabled=False)
    ready(port)
    server.serve()


def serve_raw(sock: socket.socket) -> None:
    import trio

    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: "
              + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)

    async def connection(stream: trio.SocketStream) -> None:
        buffer = b""
        with trio.move_on_after(3600):
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
                while b"\r\n\r\n" in buffer:
                    _, buffer = buffer.split(b"\r\n\r\n", 1)
                    await stream.send_all(answer)

    async def main() -> None:
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, connection, [listener])
            ready(sock.getsockname()[1])
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)


def main() -> None:
    which = sys.argv[1]
    sock = listening()
    if which == "memfs":
        serve_memfs(sock)
    elif which in ("hypercorn", "anycorn"):
        serve_hypercorn(sock, which)
    elif which in ("uvicorn-h11", "uvicorn-httptools"):
        serve_uvicorn(sock, which.removeprefix("uvicorn-"))
    elif which == "granian":
        serve_granian(sock)
    elif which == "raw":
        serve_raw(sock)
    else:
        raise SystemExit(f"unknown server {which!r}")


if __name__ == "__main__":
    main()
