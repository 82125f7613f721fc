"""Benchmarks of sessions, tasks and decisions (issue 9); each figure next to its
baseline from the same run. Run as root: `scripts/bench` or
`.venv/bin/python scripts/bench_memory.py`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import commands_side_by_side, median_ms, record, timed

from tests.memory.conftest import memory_config
from tests.support import UID_B, Daemon, connect_as, public_tmpdir

PAYLOAD = os.urandom(4096)
SESSIONS, TASKS, DECISIONS = 1000, 1000, 500


def bench_claim(daemon: Daemon, n: int = 300) -> None:
    with connect_as(UID_B, daemon.socket) as bob:
        bob.call("task_add", store="team", task="bench", title="claimed and released")
        bob.write("team/bench/replace.bin", PAYLOAD, force=True)
        cycles, replaces = [], []
        for _ in range(n):
            cycles.append(timed(lambda: (
                bob.call("task_claim", store="team", task="bench", ttl="5m"),
                bob.call("task_release", store="team", task="bench"))))
            replaces.append(timed(lambda: bob.write("team/bench/replace.bin", PAYLOAD)))
    print(f"task claim + release: {median_ms(cycles):.3f} ms; versioned 4 KiB replace: "
          f"{median_ms(replaces):.3f} ms; "
          f"ratio {median_ms(cycles) / median_ms(replaces):.2f} (goal <= 1.5)")
    record("task claim + release over the socket (median)", f"{median_ms(cycles):.3f} ms",
           baseline=f"a versioned 4 KiB replace: {median_ms(replaces):.3f} ms",
           ratio=median_ms(cycles) / median_ms(replaces), goal="<= 1.5")


def fill(daemon: Daemon) -> None:
    def work(kind: str, client_index: int) -> None:
        with clients[client_index] as client:
            if kind == "sessions":
                for n in range(SESSIONS // 2):
                    sid = client.call("session_start", store="team", goal=f"goal {n}")["id"]
                    client.call("session_handoff", store="team", session=sid,
                                summary=f"done {n}", next=f"next {n}")
            elif kind == "tasks":
                for n in range(TASKS):
                    client.call("task_add", store="team", task=f"task-{n:04d}",
                                title=f"task {n}")
            else:
                previous = None
                for n in range(DECISIONS):
                    previous = client.call(
                        "decision_record", store="team", title=f"decision {n}",
                        decision="d", reason="r",
                        supersedes=previous if n % 5 else None)["id"]

    clients = [connect_as(UID_B, daemon.socket) for _ in range(4)]
    jobs = [("sessions", 0), ("sessions", 1), ("tasks", 2), ("decisions", 3)]
    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"filled team with {SESSIONS} sessions, {TASKS} tasks, {DECISIONS} decisions in "
          f"{time.perf_counter() - start:.1f} s")


def bench_brief(daemon: Daemon, n: int = 20) -> None:
    memfs = str(Path(sys.executable).parent / "memfs")
    env = {**os.environ, "MEMFS_SOCKET": str(daemon.socket)}
    brief = [memfs, "--as", "bob", "brief", "team"]
    cat = [memfs, "--as", "bob", "cat", "team/bench/replace.bin"]
    subprocess.run(brief, env=env, check=True, capture_output=True)  # parsed once, cached
    ours, base = commands_side_by_side(brief, cat, env, n)
    print(f"`memfs brief` on {SESSIONS} sessions, {TASKS} tasks, {DECISIONS} decisions, whole "
          f"process: {median_ms(ours):.2f} ms; "
          f"`memfs cat` of a small file: {median_ms(base):.2f} ms; "
          f"ratio {median_ms(ours) / median_ms(base):.2f} (goal <= 3)")
    record(f"`memfs brief` on {SESSIONS} sessions, {TASKS} tasks, {DECISIONS} decisions, "
           "whole process (median)", f"{median_ms(ours):.2f} ms",
           baseline=f"`memfs cat` of a small file: {median_ms(base):.2f} ms",
           ratio=median_ms(ours) / median_ms(base), goal="<= 3")


def main() -> None:
    base = public_tmpdir("memfs-bench-memory-")
    try:
        with Daemon(memory_config(base)) as daemon:
            bench_claim(daemon)
            fill(daemon)
            bench_brief(daemon)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
