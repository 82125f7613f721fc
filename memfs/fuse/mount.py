"""Mounting the read-only per-agent view (memfs/fuse/view.py) with pyfuse3 on trio.

``serve_mount`` prepares the mount point (creates it, clears a stale mount left by a
daemon that died), mounts with ``fsname=memfs,allow_other,ro`` (no
``default_permissions``: the daemon decides per agent), reports started, serves until
cancelled and then unmounts. Problems that make mounting impossible raise
`MountError` with a message meant for the operator.

The request loop. pyfuse3's reader tasks wait for every request with a trio lock and
``wait_readable`` on /dev/fuse: two passes through the trio scheduler, an epoll_ctl
and an epoll_wait per request, more than the handlers themselves cost (a store
LOOKUP is ~2 us of Python, an OPEN ~15 us). `_FastWait` replaces that wait (pyfuse3
looks the function up as a module global on each request): when a request is already
queued (a zero-timeout poll says so) the reader takes it at once, up to
POLL_BUDGET requests in a row before it goes through the scheduler again so that
the control socket and worker-thread results are never starved; when none is queued
it polls for up to SPIN_SECONDS first (a sequential client, e.g. ``cat`` or ``rg
-j1``, sends its next request a few microseconds after our reply: catching it saves
the daemon's sleep and wake-up, the bulk of the round trip), then waits as before.
After a slow wait it polls again before reading, so a request taken meanwhile by
another reader task can never leave this one blocked in read().

Readahead. The kernel reads ahead of a sequential reader by the mount's
``read_ahead_kb`` (its backing device info, 128 KiB by default), and never asks for
more than that in one READ: a big file whose pages are not cached cost one request
per 128 KiB. `_set_readahead` raises it to READ_AHEAD_KB, the largest READ the
session accepts (libfuse offers 256 pages), so a cold sequential read takes an
eighth of the requests (64 instead of 512 for 64 MiB).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import inspect
import logging
import os
import select
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pyfuse3
import trio

from memfs.fuse.view import MemoryView
from memfs.store.engine import Engine
from memfs.store.errors import MemfsError

log = logging.getLogger("memfs.fuse.mount")

MOUNT_OPTIONS = frozenset({"fsname=memfs", "subtype=memfs", "allow_other", "ro", "noatime"})
MNT_DETACH = 2
# pyfuse3 reader tasks: hot handlers never await, so one task serves them back to
# back; more are spawned only while a handler awaits a worker thread (big files).
MIN_TASKS, MAX_TASKS = 1, 32
POLL_BUDGET = 64  # requests taken without a scheduler pass (see the module docstring)
SPIN_SECONDS = 30e-6  # how long a reader polls for the next request before sleeping
READ_AHEAD_KB = 1024  # the mount's readahead (see the module docstring)
_STALE = (errno.ENOTCONN, errno.ECONNABORTED)


class MountError(MemfsError):
    """The view cannot be mounted: the mount point is busy, not a directory, not
    accessible, or FUSE is unavailable."""


def _is_mount_point(path: Path) -> bool:
    """True if something is mounted exactly at ``path`` (per /proc/self/mountinfo)."""
    target = os.fsencode(path)
    try:
        with open("/proc/self/mountinfo", "rb") as handle:
            for line in handle:
                fields = line.split(b" ")
                if len(fields) > 4 and _unescape(fields[4]) == target:
                    return True
    except OSError:
        return os.path.ismount(path)
    return False


def _unescape(field: bytes) -> bytes:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out = bytearray()
    index = 0
    while index < len(field):
        if field[index : index + 1] == b"\\" and field[index + 1 : index + 4].isdigit():
            out.append(int(field[index + 1 : index + 4], 8))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return bytes(out)


def _detach(path: Path) -> None:
    """Lazily unmount ``path`` (umount2 MNT_DETACH, else ``fusermount3 -u -z``)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.umount2(os.fsencode(path), MNT_DETACH) == 0:
        return
    first = os.strerror(ctypes.get_errno())
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    if tool is not None:
        done = subprocess.run([tool, "-u", "-z", os.fspath(path)], capture_output=True,
                              timeout=30, check=False)
        if done.returncode == 0:
            return
        first += f"; {tool}: {done.stderr.decode(errors='replace').strip()}"
    raise MountError(f"cannot clear the stale mount at {path}: {first}")


def prepare_mountpoint(path: Path) -> None:
    """Make ``path`` ready to mount on, or raise MountError saying why it is not."""
    for _attempt in range(8):  # stale mounts can be stacked by repeated crashes
        try:
            # statvfs always reaches a FUSE server (stat may be answered from the
            # kernel's attribute cache), so a dead one shows as ENOTCONN here.
            os.statvfs(path)
            st = os.stat(path)
        except FileNotFoundError:
            try:
                path.mkdir(mode=0o755, parents=True)
                os.chmod(path, 0o755)
            except OSError as error:
                raise MountError(f"cannot create mount point {path}: {error.strerror}") from None
            return
        except OSError as error:
            if error.errno in _STALE:
                log.warning("clearing a stale mount at %s (%s: left by a daemon that died)",
                            path, error.strerror)
                _detach(path)
                continue
            raise MountError(f"cannot use mount point {path}: {error.strerror}") from None
        break
    else:
        raise MountError(f"cannot clear the stale mounts at {path}")
    if not stat.S_ISDIR(st.st_mode):
        raise MountError(f"mount point {path} is not a directory")
    if _is_mount_point(path):
        raise MountError(f"mount point {path} is busy: another filesystem (another memfs "
                         "daemon?) is mounted there")
    if not os.access(path, os.R_OK | os.X_OK):
        raise MountError(f"cannot use mount point {path}: permission denied")


def _mount_device(path: Path) -> str | None:
    """MAJOR:MINOR of the file system mounted exactly at ``path`` (per mountinfo): read
    from there, never by stat'ing the mount, which would wait for our own loop."""
    target = os.fsencode(path)
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", "rb") as handle:
        found = None
        for line in handle:
            fields = line.split(b" ")
            if len(fields) > 4 and _unescape(fields[4]) == target:
                found = fields[2].decode("ascii", "replace")  # the last one is on top
        return found
    return None


def _set_readahead(path: Path, kib: int = READ_AHEAD_KB) -> None:
    """Set the readahead of the mount at ``path`` (see the module docstring); a
    missing or read-only /sys only costs speed. Blocking, and only once the session
    is initialised (the kernel clamps the readahead to what INIT agreed): call it in
    a thread of its own while the request loop runs."""
    with contextlib.suppress(OSError):
        os.statvfs(path)  # answered only after INIT: served by our own loop
    # (the parent resolved, never the mount itself: that would wait for our own loop)
    device = _mount_device(Path(os.path.realpath(path.parent)) / path.name)
    if device is None:
        return
    try:
        Path(f"/sys/class/bdi/{device}/read_ahead_kb").write_text(f"{kib}\n")
    except OSError as error:
        log.debug("readahead of %s left as it is: %s", path, error)


def _fuse_fd() -> int | None:
    """The process's /dev/fuse descriptor (pyfuse3 does not expose it), if exactly one."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "/dev/fuse":
                found.append(int(name))
        except OSError:
            continue
    return found[0] if len(found) == 1 else None


class _FastWait:
    """Stands in for pyfuse3's ``_wait_fuse_readable`` (see the module docstring)."""

    def __init__(self, fd: int, original: Callable[[], Awaitable[bool]]) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        self._poll = poller.poll
        self._original = original
        self._left = POLL_BUDGET

    async def __call__(self) -> bool:
        poll = self._poll
        if self._left > 0:
            self._left -= 1
            if poll(0):
                return True  # no checkpoint: the caller reads the request at once
            deadline = time.perf_counter() + SPIN_SECONDS
            while time.perf_counter() < deadline:
                if poll(0):
                    return True
        self._left = POLL_BUDGET
        while True:
            if not await self._original():  # the lock and wait_readable, as before
                return False
            # Readable when we were woken, but another reader task may have taken
            # that request since: only say so if one is still queued (or the
            # session has ended: poll reports the error and the read sees it).
            if poll(0):
                return True


def _install_fast_wait() -> Callable[[], None]:
    """Replace pyfuse3's wait for requests; returns the function that undoes it."""
    original = getattr(pyfuse3, "_wait_fuse_readable", None)
    fd = _fuse_fd()
    if fd is None or original is None or not inspect.iscoroutinefunction(original):
        log.debug("pyfuse3 request wait left as it is (fd %s, %r)", fd, original)
        return lambda: None
    pyfuse3._wait_fuse_readable = _FastWait(fd, original)  # type: ignore[attr-defined]

    def restore() -> None:
        pyfuse3._wait_fuse_readable = original  # type: ignore[attr-defined]

    return restore


async def serve_mount(engine: Engine, mountpoint: Path, *,
                      task_status: trio.TaskStatus[MemoryView] = trio.TASK_STATUS_IGNORED,
                      ) -> None:
    """Mount the view at ``mountpoint`` and serve it until cancelled; then unmount.
    Reports the view as started (the daemon tells it about other daemons' changes)."""
    mountpoint = Path(mountpoint)
    prepare_mountpoint(mountpoint)
    view = MemoryView(engine)
    try:
        pyfuse3.init(view, os.fspath(mountpoint), set(MOUNT_OPTIONS))
    except RuntimeError as error:
        raise MountError(f"cannot mount {mountpoint}: {error} (is /dev/fuse available, "
                         "and are we root?)") from None
    view.attach()
    restore_wait = _install_fast_wait()
    unmounted_by_us = False
    try:
        log.info("mounted %s (read-only, per-agent view)", mountpoint)
        task_status.started(view)
        threading.Thread(target=_set_readahead, args=(mountpoint,), daemon=True,
                         name="memfs-readahead").start()
        await pyfuse3.main(min_tasks=MIN_TASKS, max_tasks=MAX_TASKS)
        # main() returns only when the kernel ended the session (someone unmounted us).
        raise MountError(f"{mountpoint} was unmounted from outside the daemon")
    finally:
        restore_wait()
        view.detach()
        try:
            pyfuse3.close(unmount=True)
            unmounted_by_us = True
        finally:
            if unmounted_by_us:
                log.info("unmounted %s", mountpoint)
