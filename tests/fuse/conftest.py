"""Fixtures for the real-mount tests: a daemon that mounts, helpers that run real
tools and Python calls as real uids against it, and a snapshot of the backing tree.

The standard config is extended with ``dave`` (uid 2004, read_write on notes), a
second writer for the stress test.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import pytest

from memfs.daemon.serve import rg_binary
from tests.support import (
    PYTHON,
    UID_A,
    Daemon,
    connect_as,
    memfs_as,
    public_tmpdir,
    run_as,
    standard_config,
)

UID_D = 2004
RG = str(rg_binary())

# Runs as the agent's uid: a list of [op, *args] in, a list of results out, each
# {"ok": value} or {"errno": "ENOENT"}. One interpreter per batch keeps tests fast.
PROBE = r"""
import errno, json, os, sys
def run(op, *a):
    if op == "listdir": return sorted(os.listdir(a[0]))
    if op == "stat":
        st = os.stat(a[0]); return {"size": st.st_size, "mode": oct(st.st_mode), "uid": st.st_uid}
    if op == "read":
        with open(a[0], "rb") as f: return f.read().decode("latin-1")
    if op == "getxattr": return os.getxattr(a[0], a[1]).decode("latin-1")
    if op == "listxattr": return sorted(os.listxattr(a[0]))
    if op == "access_r": return os.access(a[0], os.R_OK)
    if op == "access_w": return os.access(a[0], os.W_OK)
    if op == "open_w": os.close(os.open(a[0], os.O_WRONLY)); return None
    if op == "open_rw": os.close(os.open(a[0], os.O_RDWR)); return None
    if op == "open_append": os.close(os.open(a[0], os.O_WRONLY | os.O_APPEND)); return None
    if op == "open_trunc": os.close(os.open(a[0], os.O_RDONLY | os.O_TRUNC)); return None
    if op == "create": os.close(os.open(a[0], os.O_WRONLY | os.O_CREAT, 0o644)); return None
    if op == "truncate": os.truncate(a[0], 0); return None
    if op == "mkdir": os.mkdir(a[0]); return None
    if op == "rmdir": os.rmdir(a[0]); return None
    if op == "unlink": os.unlink(a[0]); return None
    if op == "rename": os.rename(a[0], a[1]); return None
    if op == "chmod": os.chmod(a[0], 0o777); return None
    if op == "chown": os.chown(a[0], os.getuid(), os.getgid()); return None
    if op == "utime": os.utime(a[0], (0, 0)); return None
    if op == "symlink": os.symlink("/etc/passwd", a[0]); return None
    if op == "link": os.link(a[0], a[1]); return None
    if op == "mkfifo": os.mkfifo(a[0]); return None
    if op == "setxattr": os.setxattr(a[0], "user.memfs.digest", b"0" * 64); return None
    if op == "removexattr": os.removexattr(a[0], "user.memfs.seen"); return None
    raise ValueError(op)
out = []
for item in json.loads(sys.stdin.read()):
    try:
        out.append({"ok": run(*item)})
    except OSError as error:
        out.append({"errno": errno.errorcode.get(error.errno, str(error.errno))})
print(json.dumps(out))
"""


def probe(uid: int, calls: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """Run Python calls in a child process as ``uid``; one result per call."""
    done = run_as(uid, [PYTHON, "-c", PROBE], input=json.dumps(list(calls)).encode())
    assert done.returncode == 0, done.stderr.decode()
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def probe1(uid: int, *call: Any) -> dict[str, Any]:
    return probe(uid, [call])[0]


@dataclass
class Mounted:
    daemon: Daemon
    base: Path
    mount: Path
    socket: Path
    root: Path

    def path(self, rel: str) -> str:
        return str(self.mount / rel)

    def backing(self, rel: str) -> Path:
        return self.root / "stores" / rel

    def write(self, uid: int, rel: str, data: bytes, *, force: bool = True) -> None:
        """Commit through the control socket (the supported write path)."""
        with connect_as(uid, self.socket) as client:
            client.write(rel, data, force=force)

    def delete(self, uid: int, rel: str) -> None:
        with connect_as(uid, self.socket) as client:
            client.delete(rel, force=True)

    def cli(self, uid: int, *args: str, input: bytes | None = None,
            ) -> subprocess.CompletedProcess[bytes]:
        return memfs_as(uid, self.socket, *args, input=input)


def mount_config(base: Path) -> dict[str, Any]:
    config = standard_config(base)
    config["agents"]["dave"] = {"uid": UID_D, "stores": {"notes": "read_write"}}
    return config


def start_mounted(base: Path, config: dict[str, Any] | None = None) -> Mounted:
    config = config or mount_config(base)
    daemon = Daemon(config, mount=True).start()
    return Mounted(daemon, base, Path(config["mount"]), Path(config["socket"]),
                   Path(config["root"]))


def stop_mounted(mounted: Mounted) -> None:
    if mounted.daemon.alive():
        mounted.daemon.stop()
    deadline = time.monotonic() + 10
    while os.path.ismount(mounted.mount) and time.monotonic() < deadline:
        time.sleep(0.05)
    if os.path.ismount(mounted.mount):  # never leave a mount behind a failed test
        subprocess.run(["umount", "-l", str(mounted.mount)], check=False)
    shutil.rmtree(mounted.base, ignore_errors=True)


@pytest.fixture(scope="module")
def mounted() -> Iterator[Mounted]:
    """One mounting daemon per test module (start-up is ~0.4 s)."""
    running = start_mounted(public_tmpdir("memfs-mount-"))
    try:
        yield running
    finally:
        stop_mounted(running)


@pytest.fixture
def fresh_mount() -> Iterator[Mounted]:
    """A daemon of its own for tests that kill or restart it."""
    running = start_mounted(public_tmpdir("memfs-mount-"))
    try:
        yield running
    finally:
        stop_mounted(running)


def snapshot(root: Path) -> dict[str, Any]:
    """Everything observable about the backing stores: names, kinds, modes, bytes."""
    result: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root / "stores"):
        for name in sorted(dirnames + filenames):
            full = Path(dirpath) / name
            st = full.lstat()
            entry: dict[str, Any] = {"mode": st.st_mode, "uid": st.st_uid}
            if full.is_file() and not full.is_symlink():
                entry["sha"] = hashlib.sha256(full.read_bytes()).hexdigest()
                entry["xattrs"] = sorted(os.listxattr(full))
            result[str(full.relative_to(root))] = entry
    return result


__all__ = ["RG", "UID_A", "UID_D", "Mounted", "probe", "probe1", "snapshot", "start_mounted",
           "stop_mounted"]


def digest(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def cat(m: Mounted, uid: int, rel: str) -> bytes:
    """``cat`` of a mount path run as ``uid``; asserts it succeeded."""
    done = run_as(uid, ["cat", m.path(rel)])
    assert done.returncode == 0, done.stderr
    return done.stdout
