"""Benchmarks of the history (issue 8); each figure next to its baseline from the same
run. Run as root: `scripts/bench` or `.venv/bin/python scripts/bench_history.py`. A
replace with history on vs off is in scripts/bench_write.py."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pygit2
from benchlib import commands_side_by_side, median_ms, record, timed

from memfs.control.client import Client
from memfs.store.history import gitobjects
from memfs.store.history.repo import Change
from memfs.store.history.store_history import StoreHistory
from tests.support import (
    UID_A,
    Daemon,
    connect_as,
    public_tmpdir,
    standard_config,
)

PAYLOAD = os.urandom(4096)
EDITS, FILES = 10_000, 100


def bench_commit_fsync(base: Path, n: int = 200) -> None:
    """Why commits are not fsynced one by one: libgit2's fsync option vs none."""
    results = {}
    for fsync in (False, True):
        pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, fsync)
        history = StoreHistory(base / f"fsync-{fsync}.git", "bench")
        samples = []
        for i in range(n):
            data = os.urandom(4096)
            samples.append(timed(lambda data=data, i=i, history=history: history.commit(
                [Change(f"dir/f{i % 10}.md", history.blob(data))], author="a",
                email="a@memfs.invalid", message="m\n")))
        results[fsync] = median_ms(samples)
    pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, False)
    record("one history commit, in process (median)", f"{results[False]:.3f} ms",
           baseline=f"libgit2 fsyncing each object and the ref: {results[True]:.3f} ms",
           ratio=results[False] / results[True])
    print(f"one history commit in-process: {results[False]:.3f} ms as memfs makes it; "
          f"{results[True]:.3f} ms with libgit2 fsyncing each object and the ref "
          f"({results[True] / results[False]:.1f}x); memfs syncs once a second instead")


def _in_place(directory: str, name: str, body: bytes) -> None:
    """How objects were written before: created under their name, then written (a kill
    in between left an empty object file)."""
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    os.write(fd, body)
    os.close(fd)


def _unnamed_then_linked(directory: str, name: str, body: bytes) -> None:
    fd = os.open(directory, os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC, 0o444)
    os.write(fd, body)
    gitobjects._link(fd, os.path.join(directory, name))
    os.close(fd)


def _renamed(directory: str, name: str, body: bytes) -> None:
    gitobjects._replace(os.path.join(directory, name), body, sync=False)


def bench_object_writes(base: Path, n: int = 3000) -> None:
    """CPU per loose object of each way to write one (a commit of a file one folder
    deep writes 4: blob, two trees, commit), interleaved in rounds."""
    body = zlib.compress(b"blob 4096\0" + os.urandom(4096), 1)
    ways: dict[str, Callable[[str, str, bytes], None]] = {
        "created in place (before; a kill could leave it empty)": _in_place,
        "O_TMPFILE + link (memfs)": _unnamed_then_linked,
        "tmp_obj_ + rename (without O_TMPFILE: FUSE, GlusterFS)": _renamed}
    cpu = dict.fromkeys(ways, 0.0)
    for round_ in range(10):
        for index, (label, way) in enumerate(ways.items()):
            directory = base / "objects" / f"{round_}-{index}"
            directory.mkdir(parents=True)
            names = [secrets.token_hex(19) for _ in range(n // 10)]
            start = time.process_time()
            for name in names:
                way(str(directory), name, body)
            cpu[label] += time.process_time() - start
    before = cpu["created in place (before; a kill could leave it empty)"] / n
    print("writing a 4 KiB loose object, CPU per object (x4 per commit):")
    for label, seconds in cpu.items():
        per = seconds / n
        print(f"  {label:56s} {per * 1e6:6.1f} us  ({(per - before) * 4e6:+6.1f} us a commit)")


def make_edits(daemon: Daemon) -> None:
    def worker(index: int, client: Client) -> None:
        with client:
            for n in range(index, EDITS, 4):
                path = f"notes/edits/f{n % FILES:03d}.md"
                client.write(path, f"# note {n % FILES}\n\nedit {n}: {'x' * (n % 200)}\n",
                             force=True)

    # connected one after another: connect_as switches the process's uid meanwhile
    clients = [connect_as(UID_A, daemon.socket) for _ in range(4)]
    threads = [threading.Thread(target=worker, args=(i, client))
               for i, client in enumerate(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"made {EDITS} edits of {FILES} files in {time.perf_counter() - start:.1f} s")


def bench_log(daemon: Daemon, n: int = 20) -> None:
    memfs = str(Path(sys.executable).parent / "memfs")
    env = {**os.environ, "MEMFS_SOCKET": str(daemon.socket)}
    log = [memfs, "--as", "alice", "log", "-n", "20", "notes"]
    cat = [memfs, "--as", "alice", "cat", "notes/edits/f000.md"]
    ours, base = commands_side_by_side(log, cat, env, n)
    print(f"`memfs log -n 20 notes` on {EDITS}+ commits, whole process: "
          f"{median_ms(ours):.2f} ms; `memfs cat` of a small file: {median_ms(base):.2f} ms; "
          f"ratio {median_ms(ours) / median_ms(base):.2f} (goal <= 2)")
    record(f"`memfs log -n 20 notes` on {EDITS:,}+ commits, whole process (median)",
           f"{median_ms(ours):.2f} ms",
           baseline=f"`memfs cat` of a small file: {median_ms(base):.2f} ms",
           ratio=median_ms(ours) / median_ms(base), goal="<= 2")


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bench_size(root: Path, base: Path) -> None:
    repo = root / "state" / "history" / "notes.git"
    ours = du(repo)
    copy = base / "gc-copy.git"
    shutil.copytree(repo, copy)
    subprocess.run(["git", "--git-dir", str(copy), "gc", "-q", "--prune=now"], check=True)
    packed = du(copy)
    print(f"history on disk after {EDITS} small edits: {ours / 1e6:.2f} MB as memfs keeps it; "
          f"{packed / 1e6:.2f} MB after `git gc` (ratio {ours / packed:.1f})")
    record(f"history on disk after {EDITS:,} small edits", f"{ours / 1e6:.2f} MB",
           baseline=f"the same after `git gc`: {packed / 1e6:.2f} MB", ratio=ours / packed)


def main() -> None:
    base = public_tmpdir("memfs-bench-history-")
    config = standard_config(base)
    config["stores"]["scratch"] = {"history": False}
    config["agents"]["alice"]["stores"]["scratch"] = "read_write"
    try:
        with Daemon(config) as daemon:
            bench_commit_fsync(base)
            bench_object_writes(base)
            make_edits(daemon)
            time.sleep(2)  # the daemon's maintenance: sync, pack
            bench_log(daemon)
        # copied once the daemon is stopped: a live repository's merges remove packs
        # while they are copied
        bench_size(Path(config["root"]), base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
