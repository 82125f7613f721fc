"""Benchmarks of the control socket and engine (issue 2); each figure next to its
baseline measured in the same run. Run as root: `scripts/bench` or
`.venv/bin/python scripts/bench_core.py`."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from control.client import Client
from tests.support import UID_A, Daemon, connect_as, public_tmpdir, standard_config

PAYLOAD = os.urandom(4096)


def bare_durable_write(directory: Path, name: str, data: bytes) -> None:
    """The baseline: temp file + fsync + rename + fsync of the directory."""
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, directory / name)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)


def timed(fn, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.3f} ms"


def bench_replace(daemon: Daemon, base: Path, n: int = 300) -> None:
    bare_dir = base / "bare"
    bare_dir.mkdir()
    with connect_as(UID_A, daemon.socket) as client:
        client.write("notes/bench/replace.bin", PAYLOAD)
        ours, bare = [], []
        for _ in range(n):  # interleaved, so both see the same disk conditions
            ours += timed(lambda: client.write("notes/bench/replace.bin", PAYLOAD), 1)
            bare += timed(lambda: bare_durable_write(bare_dir, "replace.bin", PAYLOAD), 1)
    ratio = statistics.median(ours) / statistics.median(bare)
    print(f"versioned 4 KiB replace via socket: median {ms(ours)}; "
          f"bare durable write: {ms(bare)}; ratio {ratio:.2f} (goal <= 2.0)")


def bench_throughput(daemon: Daemon, seconds: float = 2.0) -> None:
    for clients_n in (1, 8, 32):
        clients = [connect_as(UID_A, daemon.socket) for _ in range(clients_n)]
        counts = [0] * clients_n
        deadline = time.monotonic() + seconds

        def work(client: Client, index: int, deadline: float, counts: list[int]) -> None:
            path = f"notes/bench/tp-{len(counts)}-{index}.bin"
            while time.monotonic() < deadline:
                client.write(path, PAYLOAD)
                counts[index] += 1

        threads = [threading.Thread(target=work, args=(clients[i], i, deadline, counts))
                   for i in range(clients_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for client in clients:
            client.close()
        print(f"throughput, {clients_n:2d} concurrent clients on distinct files: "
              f"{sum(counts) / seconds:8.0f} versioned 4 KiB writes/s")


def bench_cat_startup(daemon: Daemon, n: int = 30) -> None:
    memfs = [str(Path(sys.executable).parent / "memfs")]
    env = {**os.environ, "MEMFS_SOCKET": str(daemon.socket)}
    with connect_as(0, daemon.socket, as_agent="alice") as client:
        client.write("notes/bench/small.md", "hello\n")
    cat = [*memfs, "--as", "alice", "cat", "notes/bench/small.md"]
    baseline = ["/usr/bin/python3", "-c", "pass"]
    ours, base = [], []
    for _ in range(n):
        ours += timed(lambda: subprocess.run(cat, env=env, check=True, capture_output=True), 1)
        base += timed(lambda: subprocess.run(baseline, check=True), 1)
    ratio = statistics.median(ours) / statistics.median(base)
    print(f"`memfs cat` small file, whole process: median {ms(ours)}; "
          f"`python3 -c pass`: {ms(base)}; ratio {ratio:.2f} (goal <= 2.0)")


def main() -> None:
    base = public_tmpdir("memfs-bench-")
    try:
        with Daemon(standard_config(base)) as daemon:
            bench_replace(daemon, base)
            bench_throughput(daemon)
            bench_cat_startup(daemon)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
