"""Benchmarks of the HTTP listener (issue 10), each next to the socket client's figure
from the same run and daemon. Run as root: `scripts/bench` or
`.venv/bin/python scripts/bench_http.py`.

* GET of a 1 KiB file over one keep-alive connection (a lean client: http.client)
  vs ``Client.read_bytes`` on the control socket: median latency, ratio (goal <= 2.5,
  issue 23);
  httpx's figure too, for what a typical Python client adds;
* 16 concurrent clients reading for a few seconds: requests/s over HTTP and over the
  socket (goal: HTTP >= 0.6x the socket's);
* the ASGI servers that could serve inside (or next to) the daemon, side by side, each
  serving one bare application that answers 1 KiB from memory
  (scripts/baselines/asgi_servers.py; all but memfs's own from .venv-bench, made by
  `scripts/setup --bench`): GET latency over one keep-alive connection, the server's
  CPU per request (all its threads), in turn, and 16 concurrent clients' requests/s;
  next to "raw", a trio server that answers without parsing HTTP at all;
* what the application costs per request, in this process, without a server: CPU per
  GET of 1 KiB of memfs's Starlette application (its middleware: metrics, origin
  check, the bearer token; the route; the read itself) on an engine of its own, next
  to the read alone (the dispatcher's op), a bare Starlette application with one
  route, and a bare ASGI application, in turn.
"""

from __future__ import annotations

import http.client
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from benchlib import MachineLoad, ProcessCpu, record, timings

from memfs.control.client import Client
from tests.support import UID_A, Daemon, connect_as, public_tmpdir, standard_config

PAYLOAD = os.urandom(512).hex().encode()  # 1 KiB
PATH = "notes/bench/one-kib.txt"
URL = "/v1/stores/notes/files/bench/one-kib.txt"


def us(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e6:7.0f} us"


class Lean:
    """One keep-alive HTTP/1.1 connection with the bearer header."""

    def __init__(self, base: str, token: str) -> None:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, url: str) -> bytes:
        self.conn.request("GET", url, headers=self.headers)
        response = self.conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {body[:200]!r}")
        return body

    def close(self) -> None:
        self.conn.close()


def bench_latency(daemon: Daemon, token: str, n: int = 600) -> None:
    lean = Lean(daemon.http_url, token)
    with connect_as(UID_A, daemon.socket) as socket_client, httpx.Client(
            base_url=daemon.http_url, headers={"Authorization": f"Bearer {token}"}) as typical:
        assert lean.get(URL) == PAYLOAD and socket_client.read_bytes(PATH)[0] == PAYLOAD
        assert typical.get(URL).content == PAYLOAD
        timings(lambda: lean.get(URL), 50)  # warm up both
        timings(lambda: socket_client.read_bytes(PATH), 50)
        over_http, over_socket, over_httpx = [], [], []
        for _ in range(n // 20):  # interleaved: both see the same machine load
            over_http += timings(lambda: lean.get(URL), 20)
            over_socket += timings(lambda: socket_client.read_bytes(PATH), 20)
            over_httpx += timings(lambda: typical.get(URL), 20)
    lean.close()
    ratio = statistics.median(over_http) / statistics.median(over_socket)
    print(f"GET 1 KiB, one keep-alive connection, median of {len(over_http)}:")
    print(f"  HTTP (http.client)  {us(over_http)}")
    print(f"  socket client       {us(over_socket)}")
    print(f"  ratio               {ratio:7.2f}    {'OK' if ratio <= 2.5 else 'ABOVE GOAL'}"
          " (goal <= 2.5)")
    print(f"  HTTP (httpx)        {us(over_httpx)}   (a typical Python client, for reference)")
    record("HTTP GET of 1 KiB, one keep-alive connection (median)",
           f"{statistics.median(over_http) * 1e6:.0f} us",
           baseline=f"the socket client's read: {statistics.median(over_socket) * 1e6:.0f} us",
           ratio=ratio, goal="<= 2.5")


def bench_concurrent(daemon: Daemon, token: str, clients_n: int = 16,
                     seconds: float = 4.0) -> None:
    def run(make: Callable[[], Callable[[], object]], closers: list[Callable[[], None]]
            ) -> float:
        return concurrent_rate(make, closers, clients_n, seconds)

    lean: list[Lean] = []
    sockets: list[Client] = []

    def http_reader() -> Callable[[], object]:
        lean.append(Lean(daemon.http_url, token))
        return lambda conn=lean[-1]: conn.get(URL)

    def socket_reader() -> Callable[[], object]:
        sockets.append(connect_as(UID_A, daemon.socket))
        return lambda client=sockets[-1]: client.read_bytes(PATH)

    http_rate = run(http_reader, [c.close for c in lean])
    socket_rate = run(socket_reader, [c.close for c in sockets])
    print(f"{clients_n} concurrent clients reading 1 KiB for {seconds:.0f} s (same run):")
    print(f"  HTTP           {http_rate:8.0f} requests/s")
    ratio = http_rate / socket_rate
    print(f"  socket client  {socket_rate:8.0f} requests/s")
    print(f"  ratio HTTP / socket {ratio:5.2f}   {'OK' if ratio >= 0.6 else 'BELOW GOAL'}"
          " (goal >= 0.6)")
    record(f"{clients_n} clients reading 1 KiB over HTTP", f"{http_rate:,.0f} requests/s",
           baseline=f"{clients_n} socket clients: {socket_rate:,.0f} requests/s", ratio=ratio,
           goal=">= 0.6")


REPO = Path(__file__).resolve().parent.parent
SERVERS = Path(__file__).resolve().parent / "baselines" / "asgi_servers.py"
BENCH_PYTHON = REPO / ".venv-bench" / "bin" / "python"
CANDIDATES = ["memfs", "hypercorn", "anycorn", "uvicorn-h11", "uvicorn-httptools", "granian",
              "raw"]


class Candidate:
    """One server of scripts/baselines/asgi_servers.py, running, with its CPU meter."""

    def __init__(self, name: str) -> None:
        python = sys.executable if name == "memfs" else str(BENCH_PYTHON)
        self.name = name
        self.proc = subprocess.Popen([python, str(SERVERS), name], stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if line[:1] != ["ready"]:
            self.stop()
            raise SystemExit(f"the server {name} did not start")
        self.base = f"http://127.0.0.1:{line[1]}"
        self.meter: ProcessCpu | None = None  # made once it serves (granian's worker)
        self.seconds: list[float] = []
        self.cpu_ns = 0

    def stop(self) -> None:
        if getattr(self, "meter", None) is not None:
            self.meter.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def bench_servers(n: int = 400, clients_n: int = 16, seconds: float = 2.0) -> None:
    if not BENCH_PYTHON.exists():
        print("ASGI servers: skipped (no .venv-bench: scripts/setup --bench makes it)")
        return
    load = MachineLoad()
    running: list[Candidate] = []
    try:
        for name in CANDIDATES:
            running.append(Candidate(name))
        conns = {c.name: Lean(c.base, "unused") for c in running}
        for c in running:  # warm up
            timings(lambda c=c: conns[c.name].get("/"), 50)
            c.meter = ProcessCpu(c.proc.pid, f"memfs-bench-{c.name}")
        # Each server's CPU over all its requests: what it does after an answer went
        # out would fall in the next server's call if read around each call.
        started = {c.name: c.meter.ns() for c in running if c.meter is not None}
        for i in range(n):  # in turn, each round starting one further along
            for k in range(len(running)):
                c = running[(i + k) % len(running)]
                c.seconds += timings(lambda c=c: conns[c.name].get("/"), 1)
        for c in running:
            assert c.meter is not None
            c.cpu_ns = c.meter.ns() - started[c.name]
        for conn in conns.values():
            conn.close()
        rates = {}
        for c in running:
            readers: list[Lean] = []

            def reader(c: Candidate = c, readers: list[Lean] = readers) -> Callable[[], object]:
                conn = Lean(c.base, "unused")
                readers.append(conn)
                return lambda: conn.get("/")

            rates[c.name] = concurrent_rate(reader, [], clients_n, seconds)
            for conn in readers:
                conn.close()
        cpu = sum(c.meter.ns() for c in running if c.meter is not None) / 1e9
    finally:
        for c in running:
            c.stop()
    ours = next(c for c in running if c.name == "memfs")
    print(f"ASGI servers, one bare application answering 1 KiB (GET, one keep-alive "
          f"connection, {n} in turn; then {clients_n} clients for {seconds:.0f} s each):")
    print(f"  {'server':18s} {'median':>9s} {'CPU/request':>12s} {'vs memfs':>9s} "
          f"{'concurrent':>14s}")
    for c in running:
        median = statistics.median(c.seconds)
        print(f"  {c.name:18s} {median * 1e6:6.0f} us {c.cpu_ns / n / 1e3:8.0f} us "
              f"{median / statistics.median(ours.seconds):8.2f}x {rates[c.name]:9.0f} req/s")
    print(f"  {load.report(cpu)}")


def concurrent_rate(make: Callable[[], Callable[[], object]], closers: list[Callable[[], None]],
                    clients_n: int, seconds: float) -> float:
    """Requests/s of ``clients_n`` threads, each calling the reader ``make`` gives it
    for ``seconds``."""
    counts = [0] * clients_n
    readers = [make() for _ in range(clients_n)]
    start_line = threading.Barrier(clients_n + 1)
    stop = [0.0]

    def work(index: int) -> None:
        read = readers[index]
        start_line.wait()
        while time.monotonic() < stop[0]:
            read()
            counts[index] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients_n)]
    for thread in threads:
        thread.start()
    stop[0] = time.monotonic() + seconds
    start_line.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    for close in closers:
        close()
    return sum(counts) / elapsed


def main() -> int:
    if os.geteuid() != 0:
        print("run as root (the socket client connects as uid 2001)", file=sys.stderr)
        return 1
    base = public_tmpdir("memfs-bench-http-")
    config = standard_config(base)
    config["http"] = {"listen": "127.0.0.1:0"}
    load = MachineLoad()
    with Daemon(config) as daemon:
        token = daemon.token("alice", "--label", "bench")
        with connect_as(UID_A, daemon.socket) as client:
            client.write(PATH, PAYLOAD)
        bench_latency(daemon, token)
        bench_concurrent(daemon, token)
    print(f"  {load.report()}")
    shutil.rmtree(base, ignore_errors=True)
    bench_servers()
    bench_app_cost()
    return 0


async def _call(app: Any, scope: dict[str, Any]) -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(dict(scope), receive, send)
    assert sent[0]["status"] == 200, sent


def bench_app_cost(rounds: int = 30, calls: int = 100) -> None:
    import trio
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from memfs.config import parse_config
    from memfs.control.http.app import build_app
    from memfs.control.http.metrics import MeasuredDispatcher, Metrics
    from memfs.store.engine import Engine
    from memfs.store.fs.paths import parse_path

    base = public_tmpdir("memfs-bench-http-app-")
    config = standard_config(base)
    config["http"] = {"listen": "127.0.0.1:0"}
    engine = Engine.of(parse_config(config))
    try:
        engine.recover()
        metrics = Metrics()
        dispatcher = MeasuredDispatcher(engine, None, None, None, None, metrics=metrics)
        engine.write("alice", parse_path(PATH), PAYLOAD)
        token, _ = dispatcher.tokens.create("alice")
        memfs_app = build_app(dispatcher, engine.config.http, metrics)

        async def bare(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(PAYLOAD)).encode())]})
            await send({"type": "http.response.body", "body": PAYLOAD})

        async def one(_: Request) -> Response:
            return Response(PAYLOAD)

        starlette = Starlette(routes=[Route("/v1/stores/{store}/files/{path:path}", one)])
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": URL, "raw_path": URL.encode(),
                 "query_string": b"", "root_path": "", "client": ("127.0.0.1", 5000),
                 "server": ("127.0.0.1", 7800), "state": {},
                 "headers": [(b"host", b"127.0.0.1:7800"),
                             (b"authorization", f"Bearer {token}".encode())]}
        fields = {"path": PATH, "encoding": "bytes"}

        async def op() -> None:
            dispatcher.run("alice", "read", fields)

        async def main() -> dict[str, list[float]]:
            async with memfs_app.router.lifespan_context(memfs_app):
                cases: dict[str, Callable[[], Any]] = {
                    "memfs application": lambda: _call(memfs_app, scope),
                    "  its read alone (the op)": op,
                    "bare Starlette, one route": lambda: _call(starlette, scope),
                    "bare ASGI application": lambda: _call(bare, scope)}
                for case in cases.values():
                    for _ in range(calls):
                        await case()
                cpu: dict[str, list[float]] = {name: [] for name in cases}
                names = list(cases)
                for i in range(rounds):
                    for k in range(len(names)):
                        name = names[(i + k) % len(names)]
                        start = time.thread_time_ns()
                        for _ in range(calls):
                            await cases[name]()
                        cpu[name].append((time.thread_time_ns() - start) / calls / 1e3)
            return cpu

        load = MachineLoad()
        cpu = trio.run(main)
    finally:
        engine.close()
        shutil.rmtree(base, ignore_errors=True)
    print(f"the application's CPU per GET of 1 KiB, in process, no server (median of "
          f"{rounds} rounds of {calls}, in turn):")
    for name, values in cpu.items():
        print(f"  {name:28s} {statistics.median(values):7.1f} us")
    print(f"  {load.report()}")


def servers_only() -> int:
    bench_servers()
    bench_app_cost()
    return 0


if __name__ == "__main__":
    sys.exit(servers_only() if sys.argv[1:] == ["--servers"] else main())
