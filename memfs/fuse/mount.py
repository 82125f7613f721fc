"""Mounting the read-only per-agent view (memfs/fuse/view.py) with pyfuse3 on trio.

Two ways to mount. `mount` prepares the mount point (creates it, clears a stale
mount left by a daemon that died) and mounts with ``fsname=memfs,ro,auto_unmount``
(and ``allow_other`` when other uids than the daemon's use the mount; no
``default_permissions``: the daemon decides per agent). The daemon is never root by
then (memfs/daemon/privilege.py): libfuse mounts through the setuid ``fusermount3``,
which, with ``auto_unmount``, stays running as a tiny root helper that only waits for the
daemon's end of a socket to close and then unmounts, so a daemon that is killed
leaves no mount behind. `serve_mount` serves until cancelled; `Mount.close` then
ends the FUSE session without ``fusermount3 -u`` (no_new_privs forbids it) and lets
the helper unmount. `open_unmounted` (``memfs serve --await-mount``, the system
service) mounts nothing: it opens /dev/fuse and a FUSE session on it, and root mounts
that descriptor from outside the daemon's mount namespace (`memfs attach`,
memfs/fuse/attach.py); either way `serve_mount` reads no request before the kernel
has mounted the session.
Problems that make mounting impossible raise `MountError` with a message meant for
the operator.

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
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pyfuse3
import trio

from memfs.errors import MemfsError
from memfs.fuse.view import MemoryView
from memfs.places import make_folders
from memfs.store.engine import Engine

log = logging.getLogger("memfs.fuse.mount")

MOUNT_OPTIONS = frozenset({"fsname=memfs", "subtype=memfs", "ro", "noatime", "auto_unmount"})
MNT_DETACH = 2
# pyfuse3 reader tasks: hot handlers never await, so one task serves them back to
# back; more are spawned only while a handler awaits a worker thread (big files).
MIN_TASKS, MAX_TASKS = 1, 32
POLL_BUDGET = 64  # requests taken without a scheduler pass (see the module docstring)
SPIN_SECONDS = 30e-6  # how long a reader polls for the next request before sleeping
UNMOUNT_SECONDS = 10.0  # how long a stop waits for fusermount3 to unmount
ATTACH_SECONDS = 60.0  # how long --await-mount waits for `memfs attach` to mount it
_STALE = (errno.ENOTCONN, errno.ECONNABORTED)


class MountError(MemfsError):
    """The view cannot be mounted: the mount point is busy, not a directory, not
    accessible, or FUSE is unavailable."""


def _is_mount_point(path: Path) -> bool:
    """True if something is mounted exactly at ``path`` (per /proc/self/mountinfo)."""
    try:
        return mount_type(path) is not None
    except OSError:
        return os.path.ismount(path)


def mount_type(path: Path) -> str | None:
    """The file system type of the topmost mount exactly at ``path`` (e.g.
    ``fuse.memfs``; per /proc/self/mountinfo), None if nothing is mounted there."""
    target, found = os.fsencode(path), None
    with open("/proc/self/mountinfo", "rb") as handle:
        for line in handle:
            fields = line.rstrip(b"\n").split(b" ")
            if len(fields) > 4 and _unescape(fields[4]) == target and b"-" in fields:
                found = fields[fields.index(b"-", 6) + 1].decode(errors="replace")
    return found


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


def detach(path: Path) -> None:
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
                make_folders(path, 0o755)
            except OSError as error:
                raise MountError(f"cannot create mount point {path}: {error.strerror}") from None
            return
        except OSError as error:
            if error.errno in _STALE:
                log.warning("clearing a stale mount at %s (%s: left by a daemon that died)",
                            path, error.strerror)
                detach(path)
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


def _open_fds() -> dict[int, str]:
    """This process's descriptors, each with what it is (``/dev/fuse``,
    ``socket:[INODE]``, ...: the link in /proc/self/fd)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return found


def _children() -> set[int]:
    """The pids of this process's children (those of every thread)."""
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as handle:
            found.update(int(pid) for pid in handle.read().split())
    return found


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


def _install_fast_wait(fd: int) -> Callable[[], None]:
    """Replace pyfuse3's wait for requests on /dev/fuse ``fd``; returns the function
    that undoes it."""
    original = getattr(pyfuse3, "_wait_fuse_readable", None)
    if original is None or not inspect.iscoroutinefunction(original):
        log.debug("pyfuse3 request wait left as it is (%r)", original)
        return lambda: None
    pyfuse3._wait_fuse_readable = _FastWait(fd, original)  # type: ignore[attr-defined]

    def restore() -> None:
        pyfuse3._wait_fuse_readable = original  # type: ignore[attr-defined]

    return restore


GUARDIAN = Path(__file__).with_name("guardian.py")  # see Mount


class Mount:
    """A FUSE session of the view, served by `serve_mount` and ended by `close`. This
    one is mounted from outside (`open_unmounted`); `FusermountMount` mounts itself."""

    def __init__(self, view: pyfuse3.Operations, mountpoint: Path, fuse_fd: int) -> None:
        self.view = view
        self.mountpoint = mountpoint
        self.fuse_fd = fuse_fd
        self._closed = False

    async def mounted(self) -> None:
        """Return once the kernel has mounted the session: poll on /dev/fuse reports
        POLLERR until a mount takes the descriptor, which then queues FUSE_INIT.
        Raises MountError after ATTACH_SECONDS without one."""
        poller = select.poll()
        poller.register(self.fuse_fd, select.POLLIN)
        with trio.move_on_after(ATTACH_SECONDS):
            while any(events & select.POLLERR for _fd, events in poller.poll(0)):
                await trio.sleep(0.01)
            log.info("mounted %s (attached from outside the daemon)", self.mountpoint)
            return
        raise MountError(
            f"nothing mounted the FUSE session of this daemon (pid {os.getpid()}) at "
            f"{self.mountpoint} within {ATTACH_SECONDS:.0f} s: with --await-mount, root "
            f"must run `memfs attach --config FILE --pid {os.getpid()}` (the system "
            "service's ExecStartPost does)")

    def close(self) -> None:
        """End the FUSE session: the mount stays, dead (ENOTCONN), until root unmounts
        it (`memfs detach`, the service's ExecStopPost). Idempotent."""
        if self._closed:
            return
        self._closed = True
        pyfuse3.close(unmount=False)
        log.info("closed the FUSE session of %s (`memfs detach` unmounts it)",
                 self.mountpoint)


class FusermountMount(Mount):
    """The view mounted by `mount`: served by `serve_mount`, ended by `close`.

    Unmounting is fusermount3's, with ``auto_unmount``: the helper (our child) waits
    for our end of a socket to close and then unmounts, but only if opening the mount
    fails with ENOTCONN. When the kernel ends a killed daemon it may close that socket
    before /dev/fuse: the helper's open then waits on a connection about to be aborted,
    fails with ECONNABORTED, and the mount stays (6 times in 20 SIGKILLs on a loaded
    machine); and a mount without allow_other it never unmounts. So a guardian, a
    small process of ours, holds a second copy of that end, lets it go only once the
    connection is dead, and unmounts what the helper left (`memfs.fuse.guardian`)."""

    def __init__(self, view: pyfuse3.Operations, mountpoint: Path, fuse_fd: int,
                 channels: dict[int, str], helper: int | None) -> None:
        super().__init__(view, mountpoint, fuse_fd)
        self._channels = channels  # our end of fusermount3's socket: fd -> its inode
        self.helper = helper
        read, self._guardian_pipe = os.pipe()
        try:
            self.guardian = subprocess.Popen(
                [sys.executable, "-S", os.fspath(GUARDIAN), os.fspath(mountpoint),
                 str(helper or 0), shutil.which("fusermount3") or "fusermount3"], stdin=read,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=list(channels),
                cwd="/", start_new_session=True)
        finally:
            os.close(read)

    async def mounted(self) -> None:
        """At once: fusermount3 mounted the session before `mount` returned."""

    def close(self) -> None:
        """End the FUSE session (the kernel's connection with it), then close our end
        of the auto_unmount socket and the guardian's pipe, and wait, at most
        UNMOUNT_SECONDS, for the helper to unmount and exit. No ``fusermount3 -u``:
        no_new_privs keeps the setuid helper from working, and the helper that waits
        does it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        pyfuse3.close(unmount=False)  # closes /dev/fuse: the connection is dead now
        now = _open_fds()
        for fd, what in self._channels.items():
            if now.get(fd) == what:  # still that socket (libfuse never closes it)
                os.close(fd)
        os.close(self._guardian_pipe)
        # Both at once: the guardian waits for the helper to exit, and the helper, our
        # child, is gone only once we reap it (waiting for the guardian first cost a stop
        # UNMOUNT_SECONDS).
        deadline = time.monotonic() + UNMOUNT_SECONDS
        helper = self.helper
        while helper is not None or self.guardian.poll() is None:
            if helper is not None and os.waitpid(helper, os.WNOHANG) != (0, 0):
                helper = None
            if time.monotonic() > deadline:
                log.warning("fusermount3 (pid %s) has not unmounted %s after %.0f s",
                            helper, self.mountpoint, UNMOUNT_SECONDS)
                return
            time.sleep(0.005)
        log.info("unmounted %s", self.mountpoint)


def mount(engine: Engine, mountpoint: Path, *, allow_other: bool) -> FusermountMount:
    """Mount the view of ``engine`` at ``mountpoint`` (with ``allow_other``: usable by
    other uids than the daemon's, which needs ``user_allow_other`` in
    /etc/fuse.conf); raises MountError saying what to check. Blocking; call it before
    no_new_privs is set (memfs/daemon/privilege.py): libfuse runs the setuid
    fusermount3."""
    mountpoint = Path(mountpoint)
    prepare_mountpoint(mountpoint)
    view = MemoryView(engine, one_uid=not allow_other)
    options = set(MOUNT_OPTIONS) | ({"allow_other"} if allow_other else set())
    mounted = mount_operations(view, mountpoint, options)
    log.info("mounted %s (read-only, per-agent view%s)", mountpoint,
             ", for every uid" if allow_other else "")
    return mounted


def mount_operations(operations: pyfuse3.Operations, mountpoint: Path,
                     options: set[str]) -> FusermountMount:
    """Mount ``operations`` at ``mountpoint`` (prepared) through fusermount3 with
    ``options``, with the guardian that unmounts it once this process is gone (also
    used by the remote mount, control/client/remote/mount.py). Raises MountError."""
    fds_before, children_before = _open_fds(), _children()
    try:
        pyfuse3.init(operations, os.fspath(mountpoint), options)
    except RuntimeError as error:
        uid = os.geteuid()
        raise MountError(
            f"cannot mount {mountpoint}: {error} (fusermount3 says why above; check that "
            f"/dev/fuse is usable by uid {uid} (mode 0666), that {mountpoint} is writable "
            f"by uid {uid}" + (" and that /etc/fuse.conf has user_allow_other"
                               if "allow_other" in options else "") + ")") from None
    new = {fd: what for fd, what in _open_fds().items() if fds_before.get(fd) != what}
    fuse_fd = next(fd for fd, what in new.items() if what == "/dev/fuse")
    channels = {fd: what for fd, what in new.items() if what.startswith("socket:")}
    helpers = [pid for pid in _children() - children_before if _command(pid) == "fusermount3"]
    return FusermountMount(operations, mountpoint, fuse_fd, channels,
                           helpers[0] if len(helpers) == 1 else None)


def open_unmounted(engine: Engine, mountpoint: Path) -> Mount:
    """A FUSE session of the view of ``engine`` on a /dev/fuse descriptor of its own,
    mounted by nobody yet: root mounts it at ``mountpoint`` from outside
    (`memfs attach`). libfuse (>= 3.3) takes a mount point ``/dev/fd/N`` as "use
    descriptor N, mount nothing". Raises MountError when /dev/fuse cannot be opened."""
    try:
        fuse_fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    except OSError as error:
        raise MountError(f"cannot open /dev/fuse: {error.strerror} (the unit needs "
                         "DeviceAllow=/dev/fuse rw)") from None
    view = MemoryView(engine)
    try:
        pyfuse3.init(view, f"/dev/fd/{fuse_fd}", {"fsname=memfs", "subtype=memfs"})
    except RuntimeError as error:
        os.close(fuse_fd)
        raise MountError(f"cannot start a FUSE session on /dev/fuse: {error}") from None
    log.info("FUSE session open: waiting for root to mount it at %s (memfs attach)",
             mountpoint)
    return Mount(view, Path(mountpoint), fuse_fd)


def _command(pid: int) -> str | None:
    """The command name of process ``pid`` (/proc/PID/comm: readable for any process,
    unlike its executable)."""
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().rstrip("\n")
    except OSError:
        return None


async def serve_mount(mounted: Mount, *,
                      task_status: trio.TaskStatus[MemoryView] = trio.TASK_STATUS_IGNORED,
                      ) -> None:
    """Serve the view until cancelled; then close the mount (`Mount.close`). Reports
    the view as started (the daemon tells it about other daemons' changes) before the
    session is mounted (with `open_unmounted`, root mounts it once the daemon is
    ready), and reads no request before."""
    view = mounted.view
    assert isinstance(view, MemoryView)  # (the remote mount serves its own way)
    view.attach()
    restore_wait = _install_fast_wait(mounted.fuse_fd)
    try:
        task_status.started(view)
        await mounted.mounted()
        await pyfuse3.main(min_tasks=MIN_TASKS, max_tasks=MAX_TASKS)
        # main() returns only when the kernel ended the session (someone unmounted us).
        raise MountError(f"{mounted.mountpoint} was unmounted from outside the daemon")
    finally:
        restore_wait()
        view.detach()
        mounted.close()
