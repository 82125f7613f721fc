"""Benchmarks of the write path (issues 2, 14 and 23): each figure next to its baseline
measured in the same run, on the same file system. Run as root: `scripts/bench` or
`.venv/bin/python scripts/bench_write.py [--rounds N]`.

Store ``notes`` keeps history, store ``fast`` does not. The baseline is the bare
durable write: temp file + fsync + rename + fsync of the directory, in this process,
into a directory beside the daemon's root. Rows:

* one 4 KiB replace over the socket, history off and on (random bytes: base64 on the
  wire), and history off of 4 KiB of text, vs the bare write, called in turn (p50 of
  each, and the daemon's CPU per replace from its cgroup);
* writes/s with 1 and 32 clients on distinct files vs the bare loop with 1 and 32
  threads, in alternating rounds (median of the rounds);
* 64 clients mixed (40% read, 20% stat, 20% replace own, 15% append shared, 5% list),
  history off and on: ops/s, p50/p99, errors, the daemon's CPU per operation.

The clients of the concurrent rows run in several processes (8 threads each), so the
clients' own Python is not one interpreter's bottleneck; the bare loop's threads too.
Every row runs twice, each time with the baselines on the same file system: first on a
fresh ext4 made with mkfs's defaults (so with a journal, as on a normal host),
loop-mounted (the headline), then on the machine's own file system (here an ext4
without a journal, whose inode allocation scans every inode freed in the last minute:
its figures drift with the machine's recent churn). The machine is shared: the last
line says how busy it was meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import MachineLoad, ProcessCpu, ThreadCpu, in_turn_split, percentile_ms, record

from memfs.control.client import Client
from tests.support import (
    UID_A,
    Daemon,
    LoopUnavailable,
    connect_as,
    loop_filesystem,
    public_tmpdir,
    standard_config,
)

PAYLOAD = os.urandom(4096)  # binary: travels in base64
TEXT = (b"- 2026-12-01 checkout latency back to normal after the pool resize\n" * 64)[:4096]
THREADS_PER_PROCESS = 8
STORES = {"off": "fast", "on": "notes"}  # history -> store


def bare_durable_write(directory: Path, name: str, data: bytes) -> None:
    """The baseline: temp file + fsync + rename + fsync of the directory."""
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, directory / name)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


# -- one replace ----------------------------------------------------------------------


def bench_replace(daemon: Daemon, meter: ProcessCpu, base: Path, n: int, where: str) -> None:
    bare_dir = base / "bare-replace"
    bare_dir.mkdir()
    with connect_as(UID_A, daemon.socket) as client:
        for store in STORES.values():
            client.write(f"{store}/bench/replace.bin", PAYLOAD, force=True)
        client.write("fast/bench/replace.md", TEXT, force=True)
        calls: list[Callable[[], object]] = [
            lambda: client.write("fast/bench/replace.bin", PAYLOAD),
            lambda: client.write("notes/bench/replace.bin", PAYLOAD),
            lambda: bare_durable_write(bare_dir, "replace.bin", PAYLOAD),
            lambda: client.write("fast/bench/replace.md", TEXT)]
        seconds, cpu, split = in_turn_split(n, calls, [meter, meter, ThreadCpu(), meter])
    off, on, bare, text = (statistics.median(s) for s in seconds)
    cpu_off, cpu_on, cpu_bare, cpu_text = (statistics.median(c) * 1e6 for c in cpu)
    (user_off, sys_off), (user_on, sys_on) = (
        (user * 1e6, system * 1e6) for user, system in split[:2])
    print(f"4 KiB replace via socket, {n} each in turn (p50; CPU: the daemon's, median, "
          "and its user + system, mean):")
    print(f"  bare durable write (tmp + fsync + rename + dir fsync): {ms(bare)}; CPU in "
          f"its thread {cpu_bare:.0f} us")
    print(f"  history off: {ms(off)}, ratio {off / bare:.2f} (goal <= 1.5); daemon CPU "
          f"{cpu_off:.0f} us ({user_off:.0f} + {sys_off:.0f}) a replace (goal <= 400), the "
          f"bare write's + {cpu_off - cpu_bare:.0f} us")
    print(f"  history on:  {ms(on)}, ratio {on / bare:.2f} (goal <= 2.0); daemon CPU "
          f"{cpu_on:.0f} us ({user_on:.0f} + {sys_on:.0f}); on / off {on / off:.2f}")
    print(f"  history off, 4 KiB of text (sent as text, not base64): {ms(text)}, ratio "
          f"{text / bare:.2f}; daemon CPU {cpu_text:.0f} us")
    bare_text = f"a bare durable write (temp file, fsync, rename, fsync of the folder): {ms(bare)}"
    for history, p50, cpu_us, goal in (("off", off, cpu_off, "<= 1.5"),
                                       ("on", on, cpu_on, "<= 2.0")):
        record(f"a 4 KiB replace over the socket, history {history}, {where} (p50)",
               f"{ms(p50)} (daemon CPU {cpu_us:.0f} us)", baseline=bare_text,
               ratio=p50 / bare, goal=goal)
    record(f"the daemon's CPU per 4 KiB replace, history off, {where} (median)",
           f"{cpu_off:.0f} us", goal="<= 400 us", met=cpu_off <= 400)


# -- writes/s -------------------------------------------------------------------------


def _write_loop(kind: str, target: str, first: int, threads: int, start_at: float,
                seconds: float, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """One process of a throughput round: ``threads`` writers from ``start_at`` (a
    CLOCK_MONOTONIC time, shared by all processes) for ``seconds``; puts the count of
    writes finished in that window. ``kind`` "bare": bare durable writes into the
    directory ``target``; else versioned replaces through the socket ``target`` into
    store ``kind``."""
    counts = [0] * threads
    deadline = start_at + seconds

    def bare(index: int) -> None:
        directory, name = Path(target), f"tp-{first + index}.bin"
        _wait_until(start_at)
        while (done := _timed_out(lambda: bare_durable_write(directory, name, PAYLOAD),
                                  deadline)) is not None:
            counts[index] += done

    def versioned(index: int, client: Client) -> None:
        path = f"{kind}/bench/tp-{first + index}.bin"
        with client:
            client.write(path, PAYLOAD, force=True)  # seen by this connection
            _wait_until(start_at)
            while (done := _timed_out(lambda: client.write(path, PAYLOAD),
                                      deadline)) is not None:
                counts[index] += done

    if kind == "bare":
        workers = [threading.Thread(target=bare, args=(i,)) for i in range(threads)]
    else:  # connected one after another: connect_as switches the process's uid meanwhile
        clients = [connect_as(UID_A, target) for _ in range(threads)]
        workers = [threading.Thread(target=versioned, args=(i, client))
                   for i, client in enumerate(clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put(sum(counts))


def _wait_until(moment: float) -> None:
    while (left := moment - time.monotonic()) > 0:
        time.sleep(left)


def _timed_out(call: Callable[[], object], deadline: float) -> int | None:
    """1 if ``call`` finished before ``deadline``, 0 if after, None if it was not begun
    (the deadline had passed)."""
    if time.monotonic() >= deadline:
        return None
    call()
    return 1 if time.monotonic() <= deadline else 0


def _round(kind: str, target: str, clients: int, seconds: float) -> float:
    """Writes/s of one round of ``clients`` writers of ``kind``."""
    processes_n = max(1, clients // THREADS_PER_PROCESS)
    per = clients // processes_n
    results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    start_at = time.monotonic() + 0.5 + 0.05 * processes_n  # once all are connected
    processes = [multiprocessing.Process(
        target=_write_loop, args=(kind, target, i * per, per, start_at, seconds, results))
        for i in range(processes_n)]
    for process in processes:
        process.start()
    total = sum(results.get(timeout=seconds + 120) for _ in processes)
    for process in processes:
        process.join()
    return total / seconds


def bench_throughput(daemon: Daemon, meter: ProcessCpu, base: Path, rounds: int, where: str,
                     seconds: float = 1.5) -> None:
    bare_dir = base / "bare-throughput"
    bare_dir.mkdir()
    kinds = {"bare": str(bare_dir), "off": str(daemon.socket), "on": str(daemon.socket)}
    print(f"writes/s of 4 KiB on distinct files, {rounds} alternating rounds of "
          f"{seconds:.1f} s (median; daemon CPU per write):")
    for clients in (1, 32):
        rates: dict[str, list[float]] = {kind: [] for kind in kinds}
        cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
        for round_ in range(rounds):
            order = list(kinds)[round_ % 3:] + list(kinds)[:round_ % 3]
            for kind in order:
                store = STORES.get(kind, "bare")
                before = meter.ns()
                rate = _round(store, kinds[kind], clients, seconds)
                rates[kind].append(rate)
                cpu[kind].append((meter.ns() - before) / 1e3 / max(1.0, rate * seconds))
        bare, off, on = (statistics.median(rates[k]) for k in kinds)
        label = f"{clients} client" + ("s" if clients > 1 else "")
        print(f"  {label:>10}: bare loop ({clients} thread{'s' if clients > 1 else ''}) "
              f"{bare:6.0f}/s; history off {off:6.0f}/s ({off / bare:.2f}x, "
              f"{statistics.median(cpu['off']):.0f} us); history on {on:6.0f}/s "
              f"({on / bare:.2f}x, {statistics.median(cpu['on']):.0f} us); on / off "
              f"{on / off:.2f}")
        if clients > 1:
            print("              goals at 32: history off >= 0.8x the bare loop, "
                  "history on >= 0.7x history off")
        record(f"4 KiB writes/s, {label} on distinct files, history off, {where} (median)",
               f"{off:,.0f}/s", baseline=f"the bare durable-write loop, {clients} "
               f"thread{'s' if clients > 1 else ''}: {bare:,.0f}/s", ratio=off / bare,
               goal=">= 0.8" if clients > 1 else "")
        record(f"4 KiB writes/s, {label} on distinct files, history on, {where} (median)",
               f"{on:,.0f}/s", baseline=f"history off: {off:,.0f}/s", ratio=on / off,
               goal=">= 0.7" if clients > 1 else "")


# -- the mixed workload ---------------------------------------------------------------

MIXED_CLIENTS, MIXED_SECONDS = 64, 4.0


def _mixed_worker(socket: str, store: str, index: int, threads: int, seconds: float,
                  results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """One process of the mixed workload: ``threads`` clients; puts (latencies by
    op, errors) on ``results``."""
    latencies: dict[str, list[float]] = {}
    errors: list[str] = []
    deadline = time.monotonic() + seconds

    def client_loop(number: int, client: Client) -> None:
        rng = random.Random(number)
        own = f"{store}/mixed/own-{number}.md"
        with client:
            client.read_bytes(own)  # seen, so its replaces need no force
            while time.monotonic() < deadline:
                roll = rng.random()
                op, call = (
                    ("read", lambda: client.read_bytes(
                        f"{store}/mixed/own-{rng.randrange(MIXED_CLIENTS)}.md"))
                    if roll < 0.40 else
                    ("stat", lambda: client.stat(
                        f"{store}/mixed/own-{rng.randrange(MIXED_CLIENTS)}.md"))
                    if roll < 0.60 else
                    ("replace", lambda: client.write(own, PAYLOAD))
                    if roll < 0.80 else
                    ("append", lambda: client.write(f"{store}/mixed/shared.log",
                                                    f"line from {number}\n", append=True))
                    if roll < 0.95 else
                    ("list", lambda: client.list(f"{store}/mixed/*")))
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


def bench_mixed(daemon: Daemon, meter: ProcessCpu, history: str, where: str) -> None:
    store = STORES[history]
    with connect_as(UID_A, daemon.socket) as client:  # every own file exists first
        for number in range(MIXED_CLIENTS):
            client.write(f"{store}/mixed/own-{number}.md", PAYLOAD, force=True)
        client.write(f"{store}/mixed/shared.log", "start\n", force=True)
    results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    processes_n = MIXED_CLIENTS // THREADS_PER_PROCESS
    processes = [multiprocessing.Process(
        target=_mixed_worker,
        args=(str(daemon.socket), store, i, THREADS_PER_PROCESS, MIXED_SECONDS, results))
        for i in range(processes_n)]
    cpu_before = meter.ns()
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
    daemon_cpu = (meter.ns() - cpu_before) / 1e9
    p50, p99 = percentile_ms(everything, 0.5), percentile_ms(everything, 0.99)
    goal = " (goal >= 3000 ops/s, p99 <= 50 ms, 0 errors)" if history == "off" else ""
    print(f"{MIXED_CLIENTS} clients mixed (40% read, 20% stat, 20% replace own, 15% append "
          f"shared, 5% list), history {history}: {len(everything) / MIXED_SECONDS:.0f} "
          f"ops/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms, {len(errors)} errors{goal}")
    print(f"  the daemon used {daemon_cpu / MIXED_SECONDS:.2f} CPUs, "
          f"{daemon_cpu / max(1, len(everything)) * 1e6:.0f} us of CPU per operation; "
          "by operation (p50 / p99 ms): " + ", ".join(
              f"{op} {percentile_ms(samples, 0.5):.1f} / {percentile_ms(samples, 0.99):.1f}"
              for op, samples in sorted(by_op.items())))
    if errors:
        print(f"  first errors: {errors[:3]}")
    rate = len(everything) / MIXED_SECONDS
    record(f"{MIXED_CLIENTS} clients mixed (40% read, 20% stat, 20% replace, 15% append to a "
           f"shared file, 5% list), history {history}, {where}",
           f"{rate:,.0f} ops/s, p99 {p99:.1f} ms, {len(errors)} errors",
           goal=">= 3,000 ops/s, p99 <= 50 ms, 0 errors" if history == "off" else "",
           met=(rate >= 3000 and p99 <= 50 and not errors) if history == "off" else None)


def _own_cpu_seconds() -> float:
    """CPU of this process and of its children that ended (the client processes, and
    the daemon once stopped)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _filesystem(path: Path) -> str:
    """The type and options of the file system ``path`` is on (/proc/self/mounts)."""
    best = ("", "?", "", "")
    for line in Path("/proc/self/mounts").read_text().splitlines():
        device, mount, kind, options, *_ = line.split()
        if path.is_relative_to(mount) and len(mount) >= len(best[0]):
            best = (mount, kind, options, device)
    mount, kind, options, device = best
    journal = Path("/sys/fs/ext4", Path(device).name, "journal_task")
    if kind == "ext4" and journal.exists():  # without one, fsync and inode reuse differ
        options += ", journal: " + ("none" if "none" in journal.read_text() else "yes")
    return f"{kind} on {mount} ({options})"


def run_on(base: Path, args: argparse.Namespace, where: str) -> None:
    """Every row asked for, with a daemon whose root is in ``base`` and the bare
    baselines beside it (on the same file system)."""
    config = standard_config(base)
    config["stores"]["fast"] = {"history": False}
    config["agents"]["alice"]["stores"]["fast"] = "read_write"
    with Daemon(config) as daemon:
        assert daemon.proc is not None
        meter = ProcessCpu(daemon.proc.pid, "memfs-bench-write")
        try:
            if args.only in (None, "replace"):
                bench_replace(daemon, meter, base, args.replaces, where)
            if args.only in (None, "throughput"):
                bench_throughput(daemon, meter, base, args.rounds, where)
            if args.only in (None, "mixed"):
                bench_mixed(daemon, meter, "off", where)
                bench_mixed(daemon, meter, "on", where)
        finally:
            meter.close()
    print(f"file system: {_filesystem(base)}")


@contextlib.contextmanager
def places(args: argparse.Namespace) -> Iterator[list[tuple[str, Path]]]:
    """Where the rows run, headline first: a fresh ext4 made with mkfs's defaults (so
    with a journal, as on a normal host), loop-mounted; then the machine's own file
    system (/tmp), or ``--base``."""
    with contextlib.ExitStack() as stack:
        found: list[tuple[str, Path]] = []
        if args.fs in ("loop", "both"):
            scratch = public_tmpdir("memfs-bench-write-disk-")
            stack.callback(shutil.rmtree, scratch, True)
            try:
                disk = stack.enter_context(
                    loop_filesystem(scratch / "disk", scratch / "disk.img", args.disk_mib))
                found.append(("a fresh ext4 (mkfs defaults, loop-mounted)", disk))
            except LoopUnavailable as error:
                print(f"(no fresh file system: {error})")
        if args.fs in ("root", "both"):
            found.append(("the machine's own file system" if args.base is None
                          else str(args.base), args.base or Path("/tmp")))
        yield found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    parser.add_argument("--replaces", type=int, default=300, help="replaces of each kind")
    parser.add_argument("--only", choices=("replace", "throughput", "mixed"),
                        help="run one part only")
    parser.add_argument("--fs", choices=("loop", "root", "both"), default="both",
                        help="where: a fresh loop-mounted ext4 (the headline), the "
                        "machine's own file system, or both (default)")
    parser.add_argument("--disk-mib", type=int, default=4096,
                        help="size of the fresh file system")
    parser.add_argument("--base", type=Path, help="instead of /tmp for the machine's own "
                        "file system (e.g. /dev/shm to see memfs's own CPU without the "
                        "disk's)")
    args = parser.parse_args()
    load = MachineLoad()
    own_before = _own_cpu_seconds()
    with places(args) as where:
        for label, place in where:
            print(f"-- on {label}")
            base = Path(tempfile.mkdtemp(prefix="memfs-bench-write-", dir=place))
            base.chmod(0o755)
            try:
                run_on(base, args, "on " + (
                    "a fresh ext4" if label.startswith("a fresh") else label))
            finally:
                shutil.rmtree(base, ignore_errors=True)
    print(load.report(_own_cpu_seconds() - own_before))

if __name__ == "__main__":
    main()
