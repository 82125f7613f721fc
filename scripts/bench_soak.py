"""A soak run (issue 16): a few minutes of mixed load on one daemon with history on,
printing the daemon's RSS, open descriptors and the store's packs at the start, at
intervals and at the end. Run as root: `scripts/bench` (3 minutes), `scripts/bench
--soak=30` or `.venv/bin/python scripts/bench_soak.py --minutes 30`.

The load: socket clients writing and appending (forced: they never conflict),
history reads (log, show of an older version), HTTP GETs (keep-alive, a new
connection every 50 requests), and reads through the mount as an agent. The goal:
the RSS of the last third of the run within +10% of its start (the figure a 30-minute
run gives for its last 10 minutes).
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import record

from memfs.control.client import Client
from tests.support import PYTHON, UID_A, Daemon, connect_as, public_tmpdir, standard_config

WRITERS, HTTP_READERS = 4, 2
FILES = 40  # per writer
GOAL = 1.10  # RSS at the end / RSS at the start of the last third

MOUNT_READER = r"""
import os, sys, time
directory, until = sys.argv[1], float(sys.argv[2])
reads = 0
while time.time() < until:
    for name in os.listdir(directory):
        try:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        except FileNotFoundError:
            continue
        while os.read(fd, 65536):
            pass
        os.close(fd)
        reads += 1
print(reads)
"""


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: dict[str, int] = {}
        self.errors: list[str] = []

    def add(self, kind: str) -> None:
        with self.lock:
            self.done[kind] = self.done.get(kind, 0) + 1


def status(pid: int) -> dict[str, int]:
    """The daemon's VmRSS, RssAnon and RssFile (kB) and its open descriptors."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0])
    fields["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return fields


def packs_of(root: Path, store: str) -> tuple[int, int]:
    """The store repository's packs and loose objects (none without history)."""
    objects = root / "state" / "history" / f"{store}.git" / "objects"
    if not objects.exists():
        return 0, 0
    packs = len(list((objects / "pack").glob("*.idx")))
    loose = sum(len(os.listdir(d)) for d in objects.iterdir()
                if len(d.name) == 2 and d.is_dir())
    return packs, loose


def writer(client: Client, index: int, until: float, counts: Counts, history: bool) -> None:
    rng = random.Random(index)
    with client:
        n = 0
        while time.monotonic() < until:
            n += 1
            name = f"notes/soak/w{index}-{n % FILES:02d}.md"
            try:
                if n % 4 == 0:
                    client.write(f"notes/soak/w{index}.log", f"line {n}\n", append=True)
                    counts.add("append")
                else:
                    size = rng.choice([100, 1000, 4000, 20000])
                    client.write(name, os.urandom(size // 2).hex(), force=True)
                    counts.add("write")
                if history and n % 50 == 0:
                    client.log("notes/soak", limit=20)
                    older = client.log(name, limit=3)
                    if len(older) > 1:  # its full id: a short one becomes ambiguous
                        client.show(name, older[-1]["rev"], limit=5)
                    counts.add("history read")
            except Exception as error:  # counted and reported
                counts.errors.append(f"writer {index}: {error}")


def http_reader(daemon: Daemon, token: str, until: float, counts: Counts) -> None:
    host, port = daemon.http_url.removeprefix("http://").rsplit(":", 1)
    headers = {"Authorization": f"Bearer {token}"}
    rng = random.Random(port)
    conn: http.client.HTTPConnection | None = None
    n = 0
    while time.monotonic() < until:
        if conn is None or n % 50 == 0:  # a new connection now and then, as clients do
            if conn is not None:
                conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
        n += 1
        url = (f"/v1/stores/notes/files/soak/w{rng.randrange(WRITERS)}-"
               f"{rng.randrange(FILES):02d}.md")
        try:
            conn.request("GET", url, headers=headers)
            response = conn.getresponse()
            response.read()
            counts.add("http get" if response.status == 200 else f"http {response.status}")
        except (OSError, http.client.HTTPException) as error:
            counts.errors.append(f"http: {error}")
            conn = None
    if conn is not None:
        conn.close()


def sample(daemon: Daemon, root: Path, began: float, counts: Counts) -> dict[str, int]:
    assert daemon.proc is not None
    found = status(daemon.proc.pid)
    packs, loose = packs_of(root, "notes")
    done = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.done.items()))
    print(f"  {time.monotonic() - began:6.0f} s  RSS {found['VmRSS'] / 1024:6.1f} MB "
          f"(anon {found['RssAnon'] / 1024:5.1f}, file {found['RssFile'] / 1024:5.1f})  "
          f"fds {found['fds']:4d}  packs {packs:3d}  loose {loose:5d}  | {done}", flush=True)
    return found


def soak(minutes: float, interval: float, history: bool) -> int:
    base = public_tmpdir("memfs-bench-soak-")
    try:
        return run(base, minutes, interval, history)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(base: Path, minutes: float, interval: float, history: bool) -> int:
    config = standard_config(base)
    config["http"] = {"listen": "127.0.0.1:0"}
    root = Path(config["root"])
    if not history:
        config["stores"]["notes"] = {"history": False}
    with Daemon(config, mount=True) as daemon:
        token = daemon.token("alice", "--label", "soak")
        with connect_as(UID_A, daemon.socket) as client:  # every file exists from the start
            for index in range(WRITERS):
                for n in range(FILES):
                    client.write(f"notes/soak/w{index}-{n:02d}.md", "start\n", force=True)
        counts = Counts()
        seconds = minutes * 60
        began = time.monotonic()
        until = began + seconds
        print(f"soak: {minutes:g} min of {WRITERS} socket writers (writes, appends"
              f"{', history reads' if history else ''}), {HTTP_READERS} HTTP readers, "
              f"1 mount reader; history {'on' if history else 'off'}")
        # Connected here: connect_as switches the whole process's uid meanwhile.
        clients = [connect_as(UID_A, daemon.socket) for _ in range(WRITERS)]
        jobs: list[Callable[[], None]] = [
            *(lambda i=i: writer(clients[i], i, until, counts, history)
              for i in range(WRITERS)),
            *(lambda: http_reader(daemon, token, until, counts) for _ in range(HTTP_READERS))]
        threads = [threading.Thread(target=job) for job in jobs]
        mount = subprocess.Popen(
            [PYTHON, "-c", MOUNT_READER, str(Path(config["mount"]) / "notes" / "soak"),
             str(time.time() + seconds)], stdout=subprocess.PIPE, text=True,
            user=UID_A, group=UID_A, extra_groups=[], cwd="/")
        for thread in threads:
            thread.start()
        samples = [(0.0, sample(daemon, root, began, counts))]
        while time.monotonic() < until:
            time.sleep(min(interval, max(0.0, until - time.monotonic())))
            samples.append((time.monotonic() - began, sample(daemon, root, began, counts)))
        for thread in threads:
            thread.join()
        mount_reads = mount.communicate(timeout=120)[0].strip()
        counts.done["mount read"] = int(mount_reads or 0)
        end = sample(daemon, root, began, counts)
    third = min(samples, key=lambda s: abs(s[0] - seconds * 2 / 3))
    first = samples[0][1]
    growth = end["VmRSS"] / third[1]["VmRSS"]
    print(f"start: RSS {first['VmRSS'] / 1024:.1f} MB, fds {first['fds']}; end: RSS "
          f"{end['VmRSS'] / 1024:.1f} MB, fds {end['fds']}, packs {packs_of(root, 'notes')[0]}")
    print(f"RSS over the last third (from {third[0]:.0f} s): {third[1]['VmRSS'] / 1024:.1f} -> "
          f"{end['VmRSS'] / 1024:.1f} MB ({growth - 1:+.1%}; "
          f"{'OK' if growth <= GOAL else 'ABOVE GOAL'}, goal <= {GOAL - 1:+.0%})")
    if counts.errors:
        print(f"{len(counts.errors)} errors, first: {counts.errors[:3]}")
    record(f"the daemon's RSS over the last third of a {minutes:g}-minute soak",
           f"{end['VmRSS'] / 1024:.1f} MB at the end ({len(counts.errors)} errors)",
           baseline=f"at {third[0]:.0f} s: {third[1]['VmRSS'] / 1024:.1f} MB", ratio=growth,
           goal=f"<= {GOAL}", met=growth <= GOAL and not counts.errors)
    return 0 if not counts.errors else 1


def main() -> int:
    if os.geteuid() != 0:
        print("run as root (the clients connect as uid 2001)", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=None,
                        help="seconds between samples (default: a tenth of the run)")
    parser.add_argument("--no-history", action="store_true",
                        help="the same load on a store without history, to compare")
    args = parser.parse_args()
    return soak(args.minutes, args.interval or args.minutes * 6, not args.no_history)


if __name__ == "__main__":
    sys.exit(main())
