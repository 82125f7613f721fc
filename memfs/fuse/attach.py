"""The system service's root helper: mount the FUSE session of a daemon that cannot
mount it itself (docs/operate/install.md, "As a system service").

The service runs as the memfs user without any capability, in a mount namespace of
its own (ProtectSystem=, PrivateTmp=, ...), where a mount would be invisible to the
agents. So the daemon (``memfs serve --await-mount``) only opens /dev/fuse, and
``memfs attach``, run by root (the unit's ``ExecStartPost=+``), takes a copy of that
descriptor (pidfd_open + pidfd_getfd) and mounts it where the config says, with the
options fusermount3 would use for the daemon's uid; ``memfs detach``
(``ExecStopPost=+``) lazily unmounts it once the daemon has ended, however it ended.
Both act in the host's mount namespace, PID 1's, which they join: systemd runs even a
unit's ``+`` commands in the unit's own namespace, where the mount would be seen by no
agent and would end with the command (tests/daemon/test_systemd_unit.py). Neither reads
anything the daemon wrote: only the config (root's), the kernel's /proc entries of the
daemon (its uids, its descriptors' links) and the mount table.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
from pathlib import Path

from memfs.config import Config
from memfs.fuse.mount import (
    ATTACH_SECONDS,
    MountError,
    detach,
    mount_type,
    prepare_mountpoint,
)
from memfs.service_user import service_user

_SYS_PIDFD_GETFD = 438  # the same number on every architecture
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOATIME = 1, 2, 4, 1024
_CLONE_NEWNS = 0x00020000
FSTYPE = "fuse.memfs"

_libc = ctypes.CDLL(None, use_errno=True)


class AttachError(MountError):
    """`attach` or `detach` refused to act, or the kernel refused (the message says
    which and why)."""


def _fuse_descriptor(pid: int) -> int:
    """The one descriptor of process ``pid`` that is open on /dev/fuse."""
    fds = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == "/dev/fuse":
                fds.append(int(name))
        except FileNotFoundError:
            continue  # closed meanwhile
    if len(fds) != 1:
        raise AttachError(f"process {pid} has {len(fds)} descriptors open on /dev/fuse, not "
                          "one: it is not a daemon started with `memfs serve --await-mount`, "
                          f"or it stopped waiting for its mount ({ATTACH_SECONDS:.0f} s)")
    return fds[0]


def _join_host_mounts() -> None:
    """Join the mount namespace of PID 1 (the host's) when this process runs in
    another one. Where PID 1's cannot be opened (a container whose init hides itself
    from root), this process's own namespace is taken for the host's."""
    try:
        fd = os.open("/proc/1/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except PermissionError:
        return
    try:
        theirs, ours = os.fstat(fd), os.stat("/proc/self/ns/mnt")
        if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
            return
        if _libc.setns(fd, _CLONE_NEWNS) != 0:
            raise AttachError("cannot enter the host's mount namespace (PID 1's): "
                              f"{os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def _ids(pid: int) -> tuple[list[str], list[str]]:
    """The real, effective, saved and filesystem uids and gids of process ``pid``."""
    with open(f"/proc/{pid}/status") as handle:
        status = dict(line.rstrip("\n").partition(":\t")[::2] for line in handle)
    return status["Uid"].split(), status["Gid"].split()


def attach(config: Config, pid: int) -> None:
    """As root: mount the FUSE session of the daemon ``pid`` at the config's mount
    point in the host's mount namespace (a stale mount there cleared first),
    read-only, nosuid, nodev, noatime, for the daemon's uid and, when agents are other
    uids, for every uid (allow_other).
    Refuses with AttachError, mounting nothing, unless ``pid`` runs with every uid and
    gid of the config's ``user`` and has exactly one descriptor on /dev/fuse, not yet
    mounted."""
    if os.geteuid() != 0:
        raise AttachError("memfs attach must run as root (the unit's ExecStartPost=+)")
    user = service_user(config)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as error:
        raise AttachError(f"no process {pid}: {error.strerror}") from None
    try:
        uids, gids = _ids(pid)
        if uids != [str(user.uid)] * 4 or gids != [str(user.gid)] * 4:
            raise AttachError(f"process {pid} does not run as the service user {user.name} "
                              f"(uids {' '.join(uids)}, gids {' '.join(gids)})")
        fd = _libc.syscall(_SYS_PIDFD_GETFD, pidfd, _fuse_descriptor(pid), 0)
        if fd < 0:
            raise AttachError(f"cannot take process {pid}'s /dev/fuse descriptor: "
                              f"{os.strerror(ctypes.get_errno())}")
        # the pidfd is that process (pidfd_getfd would have failed for another): still
        # alive, so /proc/PID above was its
        signal.pidfd_send_signal(pidfd, 0)
    finally:
        os.close(pidfd)
    try:
        _join_host_mounts()
        _mount(fd, config, user.uid, user.gid)
    finally:
        os.close(fd)


def _mount(fd: int, config: Config, uid: int, gid: int) -> None:
    if os.fstat(fd).st_rdev != os.stat("/dev/fuse").st_rdev:
        raise AttachError("the descriptor taken is not /dev/fuse")
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not any(events & select.POLLERR for _fd, events in poller.poll(0)):
        raise AttachError("the daemon's FUSE session is mounted already")
    prepare_mountpoint(config.mount)
    others = any(agent.uid != uid for agent in config.agents.values())
    data = f"fd={fd},rootmode=40000,user_id={uid},group_id={gid}"
    data += ",allow_other" if others else ""
    flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOATIME
    if _libc.mount(b"memfs", os.fsencode(config.mount), FSTYPE.encode(), ctypes.c_ulong(flags),
                   data.encode()) != 0:
        raise AttachError(f"mounting {config.mount} failed: "
                          f"{os.strerror(ctypes.get_errno())}")


def detach_mount(config: Config) -> bool:
    """As root: lazily unmount the memfs mount at the config's mount point in the
    host's mount namespace (its daemon has stopped or died: agents' open files fail
    from then on, nothing waits).
    False when nothing is mounted there; refuses with AttachError a mount that is not
    memfs's."""
    if os.geteuid() != 0:
        raise AttachError("memfs detach must run as root (the unit's ExecStopPost=+)")
    _join_host_mounts()
    mountpoint = Path(config.mount)
    found = mount_type(mountpoint)
    if found is None:
        return False
    if found != FSTYPE:
        raise AttachError(f"{mountpoint} is a {found} mount, not memfs's: left as it is")
    detach(mountpoint)
    return True
