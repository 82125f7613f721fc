#!/usr/bin/env python3
"""Benchmark the unprivileged daemon, in both of its layouts, against the root daemon it
replaces (issue 20; run as root).

Three daemons run side by side, each with a root of its own holding the same files
(scripts/bench_mount.py's 2,000 files of 4 KiB and a 64 MiB file), all three on one
fresh ext4 file system (loop-mounted; see `bench_disk`), each in a cgroup of its own
for its CPU time:

* root: the root daemon of the baseline commit (``--baseline``, default 1205cc6, main
  before issue 20 was merged), exported with ``git archive`` into a temporary directory
  and run with this checkout's venv;
* system: this checkout's, started as root with a system config, which drops to the
  service user ``memfs`` once its privileged phase is done (memfs/daemon/privilege.py);
* personal: this checkout's ``memfs serve --personal --config F``, started by a normal
  user itself (``memfs-bench``, made with useradd if missing and then removed again),
  with HOME and XDG_RUNTIME_DIR of its own: no privilege anywhere.

Every read and call is that user's: agent alice is its uid in the two system configs,
and in personal mode the socket calls name agent alice and the mount is read through
its view ``MOUNT/alice/...``. Interleaved, median of N, each with the daemon's CPU
time (all its threads and the jail's runs, from its cgroup: far less noisy than wall
time on a shared machine):

* a versioned 4 KiB replace through the socket (history on);
* a jailed search, ``rg -c`` over the 2,000 files, through the socket;
* open+read+close of the 2,000 files through the mount (warm), with the FUSE requests
  per file (the daemon's own counters, from /metrics);
* and, for the record (no goal: an unprivileged daemon cannot raise its mount's
  readahead, which root could), a sequential read of the 64 MiB file with the mount's
  pages dropped.

Goal (issue 20): each ratio system / root and personal / root <= 1.1.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import pwd
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_mount import BIG, FILES, PATTERN, child, plant  # noqa: E402
from benchlib import ProcessCpu, in_turn_measured, record  # noqa: E402

from memfs.control.client import Client  # noqa: E402
from tests.support import (  # noqa: E402
    Daemon,
    LoopUnavailable,
    connect_as,
    daemon_ids,
    loop_filesystem,
    public_tmpdir,
    standard_config,
)

BASELINE = "1205cc6"  # main before issue 20 merged: the root daemon, with all of issue 19
USER = "memfs-bench"
AGENT = "alice"
PAYLOAD = os.urandom(4096)
GOAL = 1.1
NAMES = ("root", "system", "personal")
PASSES = 3  # timed passes over the files per child run (after one that warms the caches)
HTTP = {"listen": "127.0.0.1:0", "public_metrics": True}
STORES: dict[str, dict[str, object]] = {"notes": {}, "ops": {}}


@contextlib.contextmanager
def bench_user() -> Iterator[pwd.struct_passwd]:
    """The normal user ``USER``: made (useradd) if the machine has none, and then
    removed again afterwards; one that was there is used and left as it was."""
    made = False
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--user-group", "--no-create-home", "--home-dir",
                        "/nonexistent", "--shell", "/usr/sbin/nologin", USER],
                       check=True, capture_output=True)
        made = True
        entry = pwd.getpwnam(USER)
    try:
        yield entry
    finally:
        if made:
            subprocess.run(["userdel", USER], check=False, capture_output=True)


def export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` of this repository, unpacked in ``into``, readable by
    every uid (agents and the daemon import from it)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True,
                             capture_output=True).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run(["chmod", "-R", "o+rX", str(into)], check=True)
    return into


def system_daemon(base: Path, uid: int, tree: Path | None) -> Daemon:
    """A mounting daemon on ``base`` with the planted files and agent alice = ``uid``:
    this checkout's (``tree`` None) or the one of ``tree``, run from there (its memfs
    is imported first)."""
    agents = {AGENT: {"uid": uid, "stores": {store: "read_write" for store in STORES}}}
    config = standard_config(base, stores=STORES, agents=agents, http=HTTP)
    plant(base)
    if tree is None:
        return Daemon(config, mount=True).start()
    return Daemon(config, mount=True, wrapper=["env", "-C", str(tree)],
                  env={"PYTHONPATH": str(tree)}).start()


def personal_daemon(base: Path, user: pwd.struct_passwd) -> Daemon:
    """``memfs serve --personal --config F`` run by ``user`` itself on ``base``, with the
    planted files: its home and runtime directory are under ``base``, F names the
    places there (the socket where --personal looks for it) and the stores."""
    home = base / "home"
    runtime = home / "run"
    config = {"root": str(base / "root"), "mount": str(home / "memory"),
              "socket": str(runtime / "memfs" / "control.sock"), "stores": STORES,
              "http": HTTP}
    plant(base)
    (runtime / "memfs").mkdir(parents=True, mode=0o700)  # the daemon's log goes there
    for path in [base, *base.rglob("*")]:  # what a user's own daemon finds: all the user's
        os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    # The wrapper execs `memfs serve --config F --personal` (the daemon keeps its pid).
    return Daemon(config, mount=True, config_path=base / "personal.toml", user=user.pw_name,
                  wrapper=["sh", "-c", 'exec "$@" --personal', "sh"],
                  env={"HOME": str(home), "XDG_RUNTIME_DIR": str(runtime),
                       "USER": user.pw_name, "LOGNAME": user.pw_name}).start()


def fuse_requests(daemon: Daemon) -> collections.Counter[str]:
    """The FUSE requests the daemon served so far, by handler (its /metrics)."""
    text = httpx.get(f"{daemon.http_url}/metrics", timeout=60).text
    return collections.Counter({
        found[1]: float(found[2]) for found in re.finditer(
            r'^memfs_fuse_requests_total\{handler="(\w+)"\} (\S+)$', text, re.M)})


def pid(daemon: Daemon) -> int:
    assert daemon.proc is not None
    return daemon.proc.pid


def verdict(ratio: float) -> str:
    return f"{'OK' if ratio <= GOAL else 'ABOVE GOAL'} (goal <= {GOAL})"


def report(what: str, samples: list[list[float]], unit: str = "ms", scale: float = 1e3,
           *, goal: bool = True) -> None:
    """One figure: the median of each daemon's ``samples`` (root, system, personal),
    and each ratio to root's."""
    root, system, personal = (statistics.median(s) for s in samples)
    print(f"{what}:\n  root {root * scale:9.2f} {unit}   system {system * scale:9.2f} {unit}"
          f"   personal {personal * scale:9.2f} {unit}")
    ratios = (f"system/root {system / root:5.2f}", f"personal/root {personal / root:5.2f}")
    if goal:
        print(f"  {ratios[0]} {verdict(system / root)}   {ratios[1]} "
              f"{verdict(personal / root)}")
    else:
        print(f"  {ratios[0]}   {ratios[1]}   (for the record: no goal)")
    for name, value in (("the system daemon (unprivileged)", system),
                        ("a personal daemon (started by a user)", personal)):
        record(f"{what.strip()} (median), {name}", f"{value * scale:.2f} {unit}",
               baseline=f"the root daemon it replaces: {root * scale:.2f} {unit}",
               ratio=value / root, goal=f"<= {GOAL}" if goal else "")


@contextlib.contextmanager
def bench_disk(scratch: Path, mib: int) -> Iterator[Path]:
    """Where the three daemons keep their roots: one fresh ext4 file system of their
    own (loop-mounted), so that no daemon is slowed by where an aged file system puts
    its inodes (on this machine's root file system creating one costs 0.15 to 1.2 ms,
    depending on the directory; on a fresh one 30 us); scratch itself, with a note,
    where the machine cannot loop-mount."""
    try:
        with loop_filesystem(scratch / "disk", scratch / "disk.img", mib) as disk:
            yield disk
    except LoopUnavailable as error:
        print(f"(no fresh file system: {error}; the roots are in {scratch})")
        yield scratch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default=BASELINE, help="the root daemon's commit")
    parser.add_argument("--n", type=int, default=200, help="samples of each replace")
    parser.add_argument("--searches", type=int, default=60, help="samples of each search")
    parser.add_argument("--runs", type=int, default=9, help="runs of each mount workload")
    parser.add_argument("--disk-mib", type=int, default=4096,
                        help="size of the fresh file system the roots are on")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("run as root (the root daemon is the baseline)", file=sys.stderr)
        return 2
    scratch = public_tmpdir("memfs-bench-privilege-")
    daemons: list[Daemon] = []
    try:
        with bench_user() as user, bench_disk(scratch, args.disk_mib) as disk:
            try:
                tree = export(args.baseline, scratch / "baseline")
                daemons.append(system_daemon(disk / "root", user.pw_uid, tree))
                daemons.append(system_daemon(disk / "system", user.pw_uid, None))
                daemons.append(personal_daemon(disk / "personal", user))
                measure(args, daemons, user)
            finally:
                for daemon in daemons:
                    if daemon.alive():
                        daemon.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def measure(args: argparse.Namespace, daemons: list[Daemon],
            user: pwd.struct_passwd) -> None:
    root, system, personal = daemons
    for daemon, uid in ((root, 0), (system, daemon_ids()[0]), (personal, user.pw_uid)):
        found = Path(f"/proc/{pid(daemon)}/status").read_text()
        assert f"Uid:\t{uid}\t" in found, f"a daemon does not run as uid {uid}"
    print(f"root: {args.baseline}, as root; system: this checkout, as user memfs; personal: "
          f"this checkout, started by user {user.pw_name} (uid {user.pw_uid})")
    with contextlib.ExitStack() as stack:
        meters = [ProcessCpu(pid(daemon), f"memfs-bench-{name}")
                  for daemon, name in zip(daemons, NAMES, strict=True)]
        for meter in meters:
            stack.callback(meter.close)
        print("daemon CPU: " + ("each daemon's own cgroup (all threads, the jail's runs "
                                "included)" if all(m.exact for m in meters)
                                else "its live threads only (no cgroup v2 here)"))
        measure_calls(args, daemons, meters, user, stack)
        measure_mount(args, daemons, meters, user)


def measure_calls(args: argparse.Namespace, daemons: list[Daemon], meters: list[ProcessCpu],
                  user: pwd.struct_passwd, stack: contextlib.ExitStack) -> None:
    """The socket calls, as alice: a replace and a jailed search."""
    root, system, personal = daemons
    clients: list[Client] = [
        stack.enter_context(connect_as(user.pw_uid, root.socket)),
        stack.enter_context(connect_as(user.pw_uid, system.socket)),
        stack.enter_context(connect_as(user.pw_uid, personal.socket, as_agent=AGENT))]
    replaces = [functools.partial(c.write, "notes/replace.bin", PAYLOAD) for c in clients]
    seconds, cpu = in_turn_measured(args.n, replaces, meters)
    report("versioned 4 KiB replace via socket, history on", seconds)
    report("  daemon CPU per replace", cpu, "us", 1e6)
    searches = [functools.partial(c.search, ["-c", PATTERN, "notes"]) for c in clients]
    seconds, cpu = in_turn_measured(args.searches, searches, meters)
    report(f"jailed search (rg -c) over {FILES} files via socket", seconds)
    report("  daemon CPU per search (the jail's included)", cpu)


def measure_mount(args: argparse.Namespace, daemons: list[Daemon], meters: list[ProcessCpu],
                  user: pwd.struct_passwd) -> None:
    """The mount, as alice: the personal view names the agent (registered by the calls
    before)."""
    uid, gid = user.pw_uid, user.pw_gid
    root, system, personal = daemons
    views = [root.mountpoint, system.mountpoint, personal.mountpoint / AGENT]
    seconds: list[list[float]] = [[], [], []]
    cpu: list[list[float]] = [[], [], []]
    for run in range(args.runs):  # whole child runs in turn, each its median
        for k in range(3):
            at = (run + k) % 3
            files = str(views[at] / "notes" / "bench")
            # a pass just before, so that the measured one's first pass is warm too
            # (the kernel's entries last ENTRY_TIMEOUT, memfs/fuse/nodes.py)
            child(uid, "files", files, "0", str(FILES), gid=gid)
            before = meters[at].ns()
            times = child(uid, "files", files, str(PASSES), str(FILES), gid=gid)
            cpu[at].append((meters[at].ns() - before) / ((PASSES + 1) * FILES) / 1e9)
            seconds[at].append(statistics.median(times))
    report(f"open+read+close of {FILES} x 4 KiB through the mount (all files)", seconds)
    report("  daemon CPU per file", cpu, "us", 1e6)
    counts = []
    for daemon, view in zip(daemons, views, strict=True):
        served = fuse_requests(daemon)
        child(uid, "files", str(view / "notes" / "bench"), "0", str(FILES), gid=gid)
        served = fuse_requests(daemon) - served
        counts.append(", ".join(f"{handler} {served[handler] / FILES:.2f}"
                                for handler in sorted(served)))
    print("  FUSE requests per file, warm: " + "; ".join(
        f"{name} {found}" for name, found in zip(NAMES, counts, strict=True)))
    cold: list[list[float]] = [[], [], []]
    for run in range(args.runs):
        for k in range(3):
            at = (run + k) % 3
            cold[at].append(statistics.median(
                child(uid, "bigcold", str(views[at] / "ops" / "big.bin"), "1", gid=gid)))
    report(f"sequential read of {BIG >> 20} MiB through the mount, pages dropped", cold,
           goal=False)


if __name__ == "__main__":
    raise SystemExit(main())
