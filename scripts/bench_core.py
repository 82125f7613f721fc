"""Benchmarks of the control socket and engine (issues 2 and 14): appends and `memfs cat`;
each figure next to its baseline measured in the same run. Run as root: `scripts/bench`
or `.venv/bin/python scripts/bench_core.py`. The replace, writes/s and mixed-workload
rows are in scripts/bench_write.py.

Store ``notes`` keeps history, store ``fast`` does not."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import record, timings

from tests.support import UID_A, Daemon, connect_as, public_tmpdir, standard_config

PAYLOAD = os.urandom(4096)


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.3f} ms"


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
            record(f"append of 100 B to a 4 MiB file, history {history}", ms(on_big),
                   baseline=f"the same append to a 4 KiB file: {ms(on_small)}", ratio=ratio,
                   goal="<= 2" if store == "fast" else "")


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
    record("`memfs cat` of a small file, whole process (median)", ms(ours),
           baseline=f"`python3 -c pass`: {ms(base)}", ratio=ratio, goal="<= 2")


def main() -> None:
    base = public_tmpdir("memfs-bench-")
    config = standard_config(base)
    config["stores"]["fast"] = {"history": False}
    config["agents"]["alice"]["stores"]["fast"] = "read_write"
    try:
        with Daemon(config) as daemon:
            bench_append(daemon)
            bench_cat_startup(daemon)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
