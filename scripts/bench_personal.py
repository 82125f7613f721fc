#!/usr/bin/env python3
"""Personal mode vs system mode (issue 20), side by side in one run: two daemons on
the same disk, one with a system config (agent alice = uid 2001), one in personal mode
(owner uid 2001, agent claude named on every call, its view ``MOUNT/claude/...``);
each figure interleaved between the two. Run as root: both daemons are started by
root here (the unprivileged start is measured once it exists, see the issue).

* versioned 4 KiB replace via the socket (history on);
* jailed search (``rg -c``) over 500 files via the socket;
* open+read+close of those 500 files of 4 KiB through the mount (warm), timed in a
  child process as uid 2001, with the daemon's CPU time per file (all its threads:
  far less noisy than wall time on a shared machine) and the FUSE requests per file
  (the daemon's own counters, from /metrics).

Goal: each ratio personal / system <= 1.1.
"""

from __future__ import annotations

import collections
import json
import os
import re
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_mount import cpu_ns
from benchlib import timed

from tests.support import PYTHON, UID_A, Daemon, connect_as, public_tmpdir, run_as, standard_config

FILES = 500
PAYLOAD = os.urandom(4096)
ROUNDS = 9
CHILD = r"""
import json, os, sys, time
names = [os.path.join(sys.argv[1], f"f{i:04d}.md") for i in range(int(sys.argv[2]))]
start = time.perf_counter()
for name in names:
    fd = os.open(name, os.O_RDONLY)
    while os.read(fd, 65536):
        pass
    os.close(fd)
print(json.dumps(time.perf_counter() - start))
"""


def ratio(ours: list[float], base: list[float]) -> str:
    r = statistics.median(ours) / statistics.median(base)
    return f"ratio {r:.2f} (goal <= 1.1: {'ok' if r <= 1.1 else 'MISSED'})"


def files_seconds(directory: Path, daemon: Daemon) -> tuple[float, float]:
    """Seconds of one warm open+read+close of every file, and the daemon's CPU
    seconds per file meanwhile."""
    assert daemon.proc is not None
    before = cpu_ns(daemon.proc.pid)
    done = run_as(UID_A, [PYTHON, "-c", CHILD, str(directory), str(FILES)], timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"benchmark child failed: {done.stderr.decode()}")
    seconds: float = json.loads(done.stdout)
    return seconds, (cpu_ns(daemon.proc.pid) - before) / FILES / 1e9


def fuse_requests(daemon: Daemon) -> collections.Counter[str]:
    """The FUSE requests the daemon served so far, by handler (its /metrics)."""
    text = httpx.get(f"{daemon.http_url}/metrics", timeout=60).text
    return collections.Counter({
        found[1]: float(found[2]) for found in re.finditer(
            r'^memfs_fuse_requests_total\{handler="(\w+)"\} (\S+)$', text, re.M)})


def per_file(daemon: Daemon, directory: Path) -> str:
    before = fuse_requests(daemon)
    files_seconds(directory, daemon)
    after = fuse_requests(daemon)
    return ", ".join(f"{handler} {(after[handler] - before[handler]) / FILES:.2f}"
                     for handler in sorted(after) if after[handler] > before[handler])


def main() -> None:
    base = public_tmpdir("memfs-bench-personal-")
    system_config = standard_config(base / "system")
    personal_config = {"root": str(base / "personal" / "root"),
                       "mount": str(base / "personal" / "memory"),
                       "socket": str(base / "personal" / "control.sock"),
                       "stores": {"notes": {"structured": True}},
                       "personal": {"owner": UID_A}}
    for config in (system_config, personal_config):
        Path(config["socket"]).parent.mkdir(parents=True, exist_ok=True)
        config["http"] = {"listen": "127.0.0.1:0", "public_metrics": True}
    with Daemon(system_config, mount=True) as system, \
            Daemon(personal_config, mount=True) as personal, \
            connect_as(UID_A, system.socket) as alice, \
            connect_as(UID_A, personal.socket, as_agent="claude") as claude:
        for client in (alice, claude):
            client.write("notes/bench/replace.bin", PAYLOAD)
            for i in range(FILES):
                client.write(f"notes/files/f{i:04d}.md", f"needle {i}\n".encode() * 400)
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(300):
            theirs.append(timed(lambda: alice.write("notes/bench/replace.bin", PAYLOAD)))
            ours.append(timed(lambda: claude.write("notes/bench/replace.bin", PAYLOAD)))
        print(f"versioned 4 KiB replace via socket: personal {statistics.median(ours) * 1e3:.3f}"
              f" ms, system {statistics.median(theirs) * 1e3:.3f} ms; {ratio(ours, theirs)}")
        ours, theirs = [], []
        for _ in range(30):
            theirs.append(timed(lambda: alice.search(["-c", "needle", "notes/files"])))
            ours.append(timed(lambda: claude.search(["-c", "needle", "notes/files"])))
        print(f"jailed rg -c over {FILES} files: personal {statistics.median(ours) * 1e3:.2f} "
              f"ms, system {statistics.median(theirs) * 1e3:.2f} ms; {ratio(ours, theirs)}")
        system_dir = Path(system_config["mount"]) / "notes" / "files"
        personal_dir = Path(personal_config["mount"]) / "claude" / "notes" / "files"
        files_seconds(system_dir, system), files_seconds(personal_dir, personal)  # warm
        ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
        for _ in range(ROUNDS):
            seconds, cpu = files_seconds(system_dir, system)
            theirs.append(seconds)
            theirs_cpu.append(cpu)
            seconds, cpu = files_seconds(personal_dir, personal)
            ours.append(seconds)
            ours_cpu.append(cpu)
        print(f"open+read+close of {FILES} files through the mount: personal "
              f"{FILES / statistics.median(ours):,.0f} files/s, system "
              f"{FILES / statistics.median(theirs):,.0f} files/s; {ratio(ours, theirs)}")
        print(f"    daemon CPU per file: personal {statistics.median(ours_cpu) * 1e6:.1f} us, "
              f"system {statistics.median(theirs_cpu) * 1e6:.1f} us; "
              f"{ratio(ours_cpu, theirs_cpu)}")
        print(f"    FUSE requests per file, warm: personal {per_file(personal, personal_dir)}; "
              f"system {per_file(system, system_dir)}")


if __name__ == "__main__":
    main()
