"""Benchmarks of the HTTP listener (issue 10), each next to the socket client's figure
from the same run and daemon. Run as root: `scripts/bench` or
`.venv/bin/python scripts/bench_http.py`.

* GET of a 1 KiB file over one keep-alive connection (a lean client: http.client)
  vs ``Client.read_bytes`` on the control socket: median latency, ratio (goal <= 3);
  httpx's figure too, for what a typical Python client adds;
* 16 concurrent clients reading for a few seconds: requests/s over HTTP and over the
  socket.
"""

from __future__ import annotations

import http.client
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from benchlib import timings

from control.client import Client
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
    print(f"  ratio               {ratio:7.2f}    {'OK' if ratio <= 3 else 'ABOVE GOAL'}"
          " (goal <= 3)")
    print(f"  HTTP (httpx)        {us(over_httpx)}   (a typical Python client, for reference)")


def bench_concurrent(daemon: Daemon, token: str, clients_n: int = 16,
                     seconds: float = 4.0) -> None:
    def run(make: Callable[[], Callable[[], object]], closers: list[Callable[[], None]]
            ) -> float:
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
    print(f"  socket client  {socket_rate:8.0f} requests/s   (ratio {socket_rate / http_rate:.2f})")


def main() -> int:
    if os.geteuid() != 0:
        print("run as root (the socket client connects as uid 2001)", file=sys.stderr)
        return 1
    config = standard_config(public_tmpdir("memfs-bench-http-"))
    config["http"] = {"listen": "127.0.0.1:0"}
    with Daemon(config) as daemon:
        token = daemon.token("alice", "--label", "bench")
        with connect_as(UID_A, daemon.socket) as client:
            client.write(PATH, PAYLOAD)
        bench_latency(daemon, token)
        bench_concurrent(daemon, token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
