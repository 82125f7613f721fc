"""The daemon serves unprivileged (memfs/daemon/privilege.py, docs/operate/privilege.md):
started as root, every process of a serving daemon (mount, socket, HTTP listener, jail in use)
but the fusermount3 auto_unmount helper runs as the service user with no capability,
no_new_privs and not dumpable; the privileged phase opens no store file; a root an
older root-run memfs left is adopted (never a hard link, a symlink or a file of
another owner); a daemon that is SIGKILLed leaves no mount behind; a daemon started by
a normal user has no privileged phase at all."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memfs.jail.kernel import SIMULATE_ABI
from memfs.store.crashpoints import ENV
from tests.support import (
    DAEMON_USER,
    MEMFS,
    REPO,
    UID_A,
    UID_B,
    UID_UNKNOWN,
    Daemon,
    children,
    connect_as,
    daemon_ids,
    dump_toml,
    is_mounted,
    plant,
    public_tmpdir,
    run_as,
    scaled,
    standard_config,
)

NO_CAPABILITIES = "0000000000000000"


def status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return dict(line.partition(":\t")[::2] for line in text.splitlines())


def descendants(pid: int) -> list[int]:
    return [pid] + [below for child in children(pid) for below in descendants(child)]


def exited(pid: int) -> bool:
    """``pid`` is gone, or a zombie its new parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_until(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + scaled(seconds)
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture(params=["kernel", "abi-4"])
def serving(request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """A daemon started as root with the mount and the HTTP listener on: with the jail
    this kernel gives, and as on a kernel of Landlock ABI 4 (below 6, rg's spare waits
    for its call inside the jail's user namespace, as PID 1 of a PID namespace)."""
    config = standard_config(public_tmpdir())
    config["http"] = {"listen": "127.0.0.1:0"}
    env = {SIMULATE_ABI: "4"} if request.param == "abi-4" else {}
    with Daemon(config, mount=True, env=env) as daemon:
        yield daemon


def capabilities_are_the_jails(pid: int) -> bool:
    """Whether ``pid`` is in a user namespace other than the host's, one that maps
    neither root in it nor the host's root: its capabilities (/proc/PID/status shows
    those of its own namespace) then give it nothing outside that namespace."""
    if os.readlink(f"/proc/{pid}/ns/user") == os.readlink("/proc/self/ns/user"):
        return False
    for line in Path(f"/proc/{pid}/uid_map").read_text().splitlines():
        inside, outside, count = (int(field) for field in line.split())
        assert not inside <= 0 < inside + count and not outside <= 0 < outside + count, \
            (pid, line)
    return True


def test_every_process_of_a_serving_daemon_is_unprivileged(serving: Daemon) -> None:
    uid, gid = daemon_ids()
    root = os.fsencode(serving.config["root"])
    with connect_as(UID_A, serving.socket) as alice:
        alice.write("notes/p.md", "privileged? no\n")
        assert alice.search(["privileged", "notes"])["exit_code"] == 0
        alice.edit("notes/p.md", ["s/no/never/"])
    assert run_as(UID_A, ["cat", str(serving.mountpoint / "notes" / "p.md")]).stdout == \
        b"privileged? never\n"
    assert httpx.get(f"{serving.http_url}/healthz", timeout=30).status_code == 200
    assert serving.proc is not None
    daemon = serving.proc.pid

    mine = status(daemon)
    assert mine["Uid"].split() == [str(uid)] * 4 and mine["Gid"].split() == [str(gid)] * 4
    assert mine["Groups"].split() == []
    for capabilities in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert mine[capabilities] == NO_CAPABILITIES, (capabilities, mine[capabilities])
    assert mine["NoNewPrivs"] == "1"
    # Not dumpable: its /proc files are root's, and a process of its own uid (a jailed
    # tool, once the jail runs as the daemon's uid) cannot read its memory or environment.
    assert os.stat(f"/proc/{daemon}/environ").st_uid == 0
    peek = run_as(uid, ["cat", f"/proc/{daemon}/environ"])
    assert peek.returncode != 0 and b"Permission denied" in peek.stderr, peek

    helpers, launchers, others = [], [], []
    for pid in children(daemon):
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        if name == "fusermount3":
            helpers.append(pid)
        elif b"memfs.jail.launcher" in Path(f"/proc/{pid}/cmdline").read_bytes():
            launchers.append(pid)
        else:
            others.append(pid)
    # The only root process of the daemon: fusermount3, which waits for the daemon's
    # end of a socket to close and then unmounts; it holds nothing of ROOT.
    assert len(helpers) == 1, helpers
    helper = helpers[0]
    assert os.readlink(f"/proc/{helper}/exe") == shutil.which("fusermount3")
    assert os.readlink(f"/proc/{helper}/cwd") == "/"
    for fd in os.listdir(f"/proc/{helper}/fd"):
        assert not os.fsencode(os.readlink(f"/proc/{helper}/fd/{fd}")).startswith(root)
    assert children(helper) == []
    # Every other process (the jail's launcher and its spare children among them) is
    # the service user's, with no capability over anything but the jail's namespaces.
    assert len(launchers) == 1, launchers
    serving_pids = launchers + others
    in_jail = 0
    for pid in serving_pids + [below for child in serving_pids for below in descendants(child)]:
        theirs = status(pid)
        assert "0" not in theirs["Uid"].split() + theirs["Gid"].split(), (pid, theirs["Uid"])
        if capabilities_are_the_jails(pid):
            in_jail += 1  # below ABI 6: rg's spare, waiting to mount the stores' view
            continue
        for capabilities in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
            assert theirs[capabilities] == NO_CAPABILITIES, (pid, capabilities)
    if SIMULATE_ABI in serving.env:
        assert in_jail >= 1  # (what the simulated kernel is for)


class Watch:
    """inotify on folders: which files in them were opened or read, by anyone."""

    IN_ACCESS, IN_OPEN, IN_ISDIR = 0x1, 0x20, 0x40000000

    def __init__(self, folders: list[Path]) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0
        self.folders = {}
        for folder in folders:
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(folder),
                                              self.IN_ACCESS | self.IN_OPEN)
            assert wd >= 0, os.strerror(ctypes.get_errno())
            self.folders[wd] = folder

    def opened_files(self) -> list[Path]:
        """Files (not folders) opened or read in the watched folders since the last call."""
        found = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return found
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16:offset + 16 + length].rstrip(b"\0").decode()
                offset += 16 + length
                if name and not mask & self.IN_ISDIR:
                    found.append(self.folders[wd] / name)

    def close(self) -> None:
        os.close(self.fd)


def test_the_privileged_phase_opens_no_store_file() -> None:
    """Killed right after the drop, the daemon had opened no file of any store (only
    folders, walked to adopt them), though it did adopt the file root planted there;
    the same watch then sees the unprivileged daemon read it."""
    base = public_tmpdir()
    config = standard_config(base)
    notes = base / "root" / "stores" / "notes"
    plant(notes / "kept.md", "an operator's note\n")
    (notes / "by-root.md").write_text("root wrote this\n")
    watch = Watch([notes, base / "root" / "stores"])
    try:
        daemon = Daemon(config, env={ENV: "privilege.dropped"})
        with pytest.raises(RuntimeError, match=f"exited with {-signal.SIGKILL}"):
            daemon.start()
        assert "dropped root" in daemon.log()
        assert (notes / "by-root.md").stat().st_uid == daemon_ids()[0]  # adopted, unread
        assert watch.opened_files() == []
        with Daemon(config) as running, connect_as(UID_A, running.socket) as alice:
            assert alice.read("notes/by-root.md")["text"] == "root wrote this\n"
        assert notes / "by-root.md" in watch.opened_files()
    finally:
        watch.close()


def test_a_root_left_by_a_root_run_memfs_is_adopted() -> None:
    """Root's files and folders become the service user's at start, logged once with
    a count; a file of another uid, a hard link (here to a file outside the root) and
    a symlink stay as they were, and hidden."""
    base = public_tmpdir()
    config = standard_config(base)
    root = base / "root"
    notes = root / "stores" / "notes"
    (notes / "old").mkdir(parents=True)
    (notes / "old" / "a.md").write_text("written by a root-run memfs\n")
    (root / "state" / "seen").mkdir(parents=True)
    foreign = notes / "bob-wrote-this.md"
    foreign.write_text("not memfs's\n")
    os.chown(foreign, UID_B, UID_B)
    outside = base / "outside.txt"
    outside.write_text("outside the root\n")
    os.link(outside, notes / "linked.md")
    os.symlink(outside, notes / "symlink.md")
    uid, _gid = daemon_ids()
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        assert alice.read("notes/old/a.md")["text"] == "written by a root-run memfs\n"
        assert alice.list("notes/**") == ["notes/old/a.md"]
        # root, stores, notes, old, a.md, state and seen; nothing else
        assert "adopted 7 files and folders" in daemon.log()
    assert os.stat(notes / "old").st_uid == os.stat(notes / "old" / "a.md").st_uid == uid
    assert os.stat(root / "state" / "seen").st_uid == uid
    assert foreign.stat().st_uid == UID_B
    assert outside.stat().st_uid == 0 and outside.stat().st_nlink == 2
    assert os.lstat(notes / "symlink.md").st_uid == 0


@pytest.mark.parametrize("busy", [False, True])
def test_a_sigkilled_daemon_leaves_no_mount_behind(busy: bool) -> None:
    """Also when it is killed on a busy machine (before the guardian, 6 kills in 20
    left a mount there: fusermount3 saw the socket close before the connection died)."""
    config = standard_config(public_tmpdir())
    daemon = Daemon(config, mount=True).start()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(4 if busy else 0)]
    try:
        assert daemon.proc is not None
        helpers = [pid for pid in children(daemon.proc.pid)
                   if Path(f"/proc/{pid}/comm").read_text().strip() == "fusermount3"]
        assert len(helpers) == 1
        for _ in range(5 if busy else 1):
            with connect_as(UID_A, daemon.socket) as alice:
                alice.write("notes/k.md", "killed\n")
            daemon.kill()
            wait_until(lambda: not is_mounted(daemon.mountpoint), "the mount outlived its daemon")
            wait_until(lambda: exited(helpers[0]), "fusermount3 lives on")
            daemon.start()  # and the next start mounts there again
            assert is_mounted(daemon.mountpoint)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        if daemon.alive():
            daemon.stop()
    assert not is_mounted(daemon.mountpoint)  # a stop has unmounted when the daemon exits


def test_a_missing_or_root_service_user_is_refused_with_how_to_fix_it() -> None:
    for user, message in (("memfs-no-such-user", "useradd --system --no-create-home"),
                          ("root", "is root")):
        config = standard_config(public_tmpdir(), user=user)
        path = Path(config["socket"]).with_suffix(".toml")
        path.write_text(dump_toml(config))
        done = subprocess.run([*MEMFS, "serve", "--config", str(path), "--no-mount"],
                              capture_output=True, text=True, cwd=REPO, timeout=scaled(60))
        assert done.returncode == 1 and message in done.stderr, done.stderr
        assert not Path(config["socket"]).exists()
        assert not Path(config["root"]).exists()


def test_root_starts_a_personal_memory_only_for_a_user_other_than_root() -> None:
    """Root starting a personal memory drops to its owner, not to `user` (served so in
    tests/daemon/test_personal*.py); an owner that is root or no user of the machine
    (fusermount3 mounts only for a named user) is refused, saying what to do, and
    nothing is made."""
    base = public_tmpdir()
    for owner, expected in ((0, "run `memfs serve --personal` as that user"),
                            (UID_UNKNOWN, f"owner (uid {UID_UNKNOWN}) is no user of this")):
        config = {"root": str(base / f"root-{owner}"), "socket": str(base / f"{owner}.sock"),
                  "stores": {"notes": {}}, "personal": {"owner": owner}}
        path = base / f"personal-{owner}.toml"
        path.write_text(dump_toml(config))
        done = subprocess.run([*MEMFS, "serve", "--config", str(path), "--no-mount"],
                              capture_output=True, text=True, cwd=REPO, timeout=scaled(60))
        assert done.returncode == 1 and expected in done.stderr, done.stderr
        assert not Path(config["root"]).exists()


def test_a_daemon_started_by_a_normal_user_has_no_privileged_phase() -> None:
    """Started as the memfs user itself: it serves the mount and the socket (agents
    are other uids: allow_other), as that user, and never logs a drop."""
    base = public_tmpdir()
    uid, gid = daemon_ids()
    os.chown(base, uid, gid)
    config = standard_config(base)
    with Daemon(config, mount=True, user=DAEMON_USER) as daemon:
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/mine.md", "served by a normal user\n")
        shown = run_as(UID_A, ["cat", str(daemon.mountpoint / "notes" / "mine.md")])
        assert shown.stdout == b"served by a normal user\n", shown
        assert daemon.proc is not None
        assert status(daemon.proc.pid)["Uid"].split() == [str(uid)] * 4
        assert "dropped root" not in daemon.log() and "adopted" not in daemon.log()
        assert os.stat(config["root"]).st_uid == uid
