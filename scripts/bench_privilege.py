#!/usr/bin/env python3
"""Benchmark the unprivileged daemon against the root daemon it replaces (run as root).

Two daemons run side by side, each with a root of its own holding the same files
(scripts/bench_mount.py's 2,000 files of 4 KiB and a 64 MiB file): this checkout's,
which drops to the service user ``memfs`` once its privileged phase is done
(memfs/privilege.py), and the root daemon of the baseline commit (``--baseline``,
default 9fe77d6, the commit before the drop), exported with ``git archive`` into a
temporary directory and run with this checkout's venv. Interleaved, median of N:

* a versioned 4 KiB replace through the socket (history on);
* a jailed search, ``rg -c`` over the 2,000 files, through the socket;
* open+read+close of the 2,000 files through the mount, as agent alice (uid 2001);
* and, for the record (no goal: the unprivileged daemon cannot raise its mount's
  readahead, which root could), a sequential read of the 64 MiB file with the mount's
  pages dropped.

Goal (issue 20): each ratio unprivileged / root <= 1.1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_jail import interleaved  # noqa: E402
from bench_mount import BIG, FILES, PATTERN, child, plant  # noqa: E402
from benchlib import median_ms  # noqa: E402

from tests.support import (  # noqa: E402
    UID_A,
    Daemon,
    connect_as,
    daemon_ids,
    public_tmpdir,
    standard_config,
)

BASELINE = "9fe77d6"
PAYLOAD = os.urandom(4096)
GOAL = 1.1


def export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` of this repository, unpacked in ``into``, readable by
    every uid (agents and the daemon import from it)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True,
                             capture_output=True).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run(["chmod", "-R", "o+rX", str(into)], check=True)
    return into


def start(base: Path, tree: Path | None) -> Daemon:
    """A mounting daemon on ``base`` with the planted files: this checkout's (``tree``
    None) or the one of ``tree``, run from there (its memfs is imported first)."""
    config = standard_config(base)
    plant(base)
    if tree is None:
        return Daemon(config, mount=True).start()
    return Daemon(config, mount=True, wrapper=["env", "-C", str(tree)],
                  env={"PYTHONPATH": str(tree)}).start()


def ratio_line(what: str, ours: list[float], base: list[float], *, goal: bool = True) -> None:
    mine, theirs = median_ms(ours), median_ms(base)
    verdict = ("OK" if mine / theirs <= GOAL else "ABOVE GOAL") if goal else "no goal"
    print(f"{what}:\n  unprivileged {mine:9.2f} ms   root {theirs:9.2f} ms   "
          f"ratio {mine / theirs:5.2f}   {verdict}{f' (goal <= {GOAL})' if goal else ''}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default=BASELINE, help="the root daemon's commit")
    parser.add_argument("--n", type=int, default=60, help="samples of each socket call")
    parser.add_argument("--runs", type=int, default=7, help="runs of each mount workload")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("run as root (the root daemon is the baseline)", file=sys.stderr)
        return 2
    scratch = public_tmpdir("memfs-bench-privilege-")
    daemons: list[Daemon] = []
    try:
        tree = export(args.baseline, scratch / "baseline")
        ours = start(scratch / "ours", None)
        daemons.append(ours)
        root = start(scratch / "root", tree)
        daemons.append(root)
        for daemon, uid in ((ours, daemon_ids()[0]), (root, 0)):
            assert daemon.proc is not None
            found = Path(f"/proc/{daemon.proc.pid}/status").read_text()
            assert f"Uid:\t{uid}\t" in found, f"the daemon does not run as uid {uid}"
        print(f"unprivileged: this checkout, as user memfs; root: {args.baseline}, as root")
        with connect_as(UID_A, ours.socket) as mine, connect_as(UID_A, root.socket) as theirs:
            a, b = interleaved(args.n, lambda: mine.write("notes/replace.bin", PAYLOAD),
                               lambda: theirs.write("notes/replace.bin", PAYLOAD))
            ratio_line("versioned 4 KiB replace via socket, history on", a, b)
            search = ["-c", PATTERN, "notes"]
            a, b = interleaved(args.n, lambda: mine.search(search),
                               lambda: theirs.search(search))
            ratio_line(f"jailed search (rg -c) over {FILES} files via socket", a, b)
        a, b = [], []
        for _ in range(args.runs):  # whole child runs in turn, each its median
            for daemon, into in ((ours, a), (root, b)):
                folder = str(daemon.mountpoint / "notes" / "bench")
                into.append(statistics.median(child(UID_A, "files", folder, "3", str(FILES))))
        ratio_line(f"open+read+close of {FILES} x 4 KiB through the mount (all files)", a, b)
        a, b = [], []
        for _ in range(args.runs):
            for daemon, into in ((ours, a), (root, b)):
                big = str(daemon.mountpoint / "ops" / "big.bin")
                into.append(statistics.median(child(UID_A, "bigcold", big, "1")))
        ratio_line(f"sequential read of {BIG >> 20} MiB through the mount, pages dropped",
                   a, b, goal=False)
    finally:
        for daemon in daemons:
            if daemon.alive():
                daemon.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
