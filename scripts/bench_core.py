"""Benchmarks of the control socket and engine (issues 2 and 14); each figure next to
its baseline measured in the same run. Run as root: `scripts/bench` or
`.venv/bin/python scripts/bench_core.py`.

Store ``notes`` keeps history, store ``fast`` does not. The mixed workload runs 64
clients in 8 processes (8 threads each), so the clients' own Python is not one
interpreter's bottleneck."""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import percentile_ms, timings

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


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.3f} ms"


def bench_replace(daemon: Daemon, base: Path, n: int = 300) -> None:
    bare_dir = base / "bare"
    bare_dir.mkdir()
    with connect_as(UID_A, daemon.socket) as client:
        for store in ("notes", "fast"):
            client.write(f"{store}/bench/replace.bin", PAYLOAD)
        on, off, bare = [], [], []
        for _ in range(n):  # interleaved, so all three see the same disk conditions
            on += timings(lambda: client.write("notes/bench/replace.bin", PAYLOAD), 1)
            off += timings(lambda: client.write("fast/bench/replace.bin", PAYLOAD), 1)
            bare += timings(lambda: bare_durable_write(bare_dir, "replace.bin", PAYLOAD), 1)
    base_ms = statistics.median(bare)
    print(f"versioned 4 KiB replace via socket, history off: median {ms(off)}; "
          f"bare durable write: {ms(bare)}; ratio {statistics.median(off) / base_ms:.2f} "
          "(goal <= 1.5)")
    print(f"versioned 4 KiB replace via socket, history on:  median {ms(on)}; "
          f"bare durable write: {ms(bare)}; ratio {statistics.median(on) / base_ms:.2f} "
          "(goal <= 2.0)")


def bench_append(daemon: Daemon, n: int = 100) -> None:
    """100 bytes appended to a 4 MiB file vs to a 4 KiB file, interleaved."""
    extra = b"x" * 99 + b"\n"
    with connect_as(UID_A, daemon.socket) as client:
        for store in ("fast", "notes"):
            big, small = f"{store}/bench/append-big.log", f"{store}/bench/append-small.log"
            client.write(big, os.urandom(4 * 1024 * 1024))
            client.write(small, PAYLOAD)
            on_big, on_small = [], []
            for _ in range(n):
                on_big += timings(lambda p=big: client.write(p, extra, append=True), 1)
                on_small += timings(lambda p=small: client.write(p, extra, append=True), 1)
            ratio = statistics.median(on_big) / statistics.median(on_small)
            history = "on" if store == "notes" else "off"
            goal = "(goal <= 2)" if store == "fast" else "(git keeps whole blobs: each " \
                "commit stores the whole new file)"
            print(f"append of 100 B, history {history:3s}: to a 4 MiB file {ms(on_big)}; "
                  f"to a 4 KiB file {ms(on_small)}; ratio {ratio:.2f} {goal}")


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
        ours += timings(lambda: subprocess.run(cat, env=env, check=True, capture_output=True), 1)
        base += timings(lambda: subprocess.run(baseline, check=True), 1)
    ratio = statistics.median(ours) / statistics.median(base)
    print(f"`memfs cat` small file, whole process: median {ms(ours)}; "
          f"`python3 -c pass`: {ms(base)}; ratio {ratio:.2f} (goal <= 2.0)")


MIXED_CLIENTS, MIXED_PROCESSES, MIXED_SECONDS = 64, 8, 4.0


def _mixed_worker(socket: str, index: int, threads: int, seconds: float,
                  results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """One process of the mixed workload: ``threads`` clients; puts (latencies by
    op, errors) on ``results``."""
    latencies: dict[str, list[float]] = {}
    errors: list[str] = []
    deadline = time.monotonic() + seconds

    def client_loop(number: int, client: Client) -> None:
        rng = random.Random(number)
        own = f"fast/mixed/own-{number}.md"
        with client:
            client.read_bytes(own)  # seen, so its replaces need no force
            while time.monotonic() < deadline:
                roll = rng.random()
                op, call = (
                    ("read", lambda: client.read_bytes(f"fast/mixed/own-{rng.randrange(64)}.md"))
                    if roll < 0.40 else
                    ("stat", lambda: client.stat(f"fast/mixed/own-{rng.randrange(64)}.md"))
                    if roll < 0.60 else
                    ("replace", lambda: client.write(own, PAYLOAD))
                    if roll < 0.80 else
                    ("append", lambda: client.write("fast/mixed/shared.log",
                                                    f"line from {number}\n", append=True))
                    if roll < 0.95 else
                    ("list", lambda: client.list("fast/mixed/*")))
                start = time.perf_counter()
                try:
                    call()
                except Exception as error:  # counted, reported
                    errors.append(f"{op}: {error}")
                    continue
                latencies.setdefault(op, []).append(time.perf_counter() - start)

    # connected one after another: connect_as switches the process's uid meanwhile
    clients = [connect_as(UID_A, socket) for _ in range(threads)]
    workers = [threading.Thread(target=client_loop, args=(index * threads + t, client))
               for t, client in enumerate(clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put((latencies, errors))


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far, every thread (exited ones too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_mixed(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as client:  # every own file exists first
        for number in range(MIXED_CLIENTS):
            client.write(f"fast/mixed/own-{number}.md", PAYLOAD)
        client.write("fast/mixed/shared.log", "start\n")
    results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    per = MIXED_CLIENTS // MIXED_PROCESSES
    processes = [multiprocessing.Process(
        target=_mixed_worker, args=(str(daemon.socket), i, per, MIXED_SECONDS, results))
        for i in range(MIXED_PROCESSES)]
    assert daemon.proc is not None
    cpu_before = process_cpu_seconds(daemon.proc.pid)
    for process in processes:
        process.start()
    everything: list[float] = []
    by_op: dict[str, list[float]] = {}
    errors: list[str] = []
    for _ in processes:
        latencies, failed = results.get(timeout=MIXED_SECONDS + 120)
        errors += failed
        for op, samples in latencies.items():
            everything += samples
            by_op.setdefault(op, []).extend(samples)
    for process in processes:
        process.join()
    daemon_cpu = process_cpu_seconds(daemon.proc.pid) - cpu_before
    p50, p99 = percentile_ms(everything, 0.5), percentile_ms(everything, 0.99)
    print(f"{MIXED_CLIENTS} clients, mixed (40% read, 20% stat, 20% replace own, 15% append "
          f"shared, 5% list), history off: {len(everything) / MIXED_SECONDS:.0f} ops/s, "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, {len(errors)} errors "
          "(goal >= 3000 ops/s, p99 <= 50 ms, 0 errors)")
    print(f"  the daemon used {daemon_cpu / MIXED_SECONDS:.2f} CPUs meanwhile, "
          f"{daemon_cpu / len(everything) * 1e6:.0f} us of CPU per operation "
          f"(this machine has {os.cpu_count()} CPUs, shared with the 8 client processes)")
    print("  by operation (p50 / p99 ms): " + ", ".join(
        f"{op} {percentile_ms(samples, 0.5):.1f} / {percentile_ms(samples, 0.99):.1f}"
        for op, samples in sorted(by_op.items())))
    if errors:
        print(f"  first errors: {errors[:3]}")


def main() -> None:
    base = public_tmpdir("memfs-bench-")
    config = standard_config(base)
    config["stores"]["fast"] = {"history": False}
    config["agents"]["alice"]["stores"]["fast"] = "read_write"
    try:
        with Daemon(config) as daemon:
            bench_replace(daemon, base)
            bench_append(daemon)
            bench_throughput(daemon)
            bench_mixed(daemon)
            bench_cat_startup(daemon)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
