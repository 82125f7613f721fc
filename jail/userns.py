"""The jail's user namespace: made once per launcher, joined by each tool child.

An unprivileged user namespace gives the jail, with no privilege at all, what needed
root before: mount namespaces of its own (the read-only view of the stores) and
chroot (sed). It maps only the launcher's own uid and gid (setgroups denied): inside
it the tools are the same user as outside, never root, and the capabilities a child
holds there reach only what the namespace owns (the mount namespaces its children
make), nothing of the host.

A short-lived helper child makes it (a process cannot make a user namespace without
entering it, and the launcher stays outside, with no capability): it becomes
dumpable (a non-dumpable process cannot write its own ``/proc/self/uid_map``: the
file is then root's), unshares, writes the maps, checks that a mount works inside
(distributions that restrict unprivileged user namespaces may let them be made but
refuse mounts in them), and hands back an fd of the namespace and of a network
namespace made in it (no interface up: the runs below Landlock ABI 6 join it, see
``jail.kernel``). A tool child joins it with :func:`join`: it may (it is of the
owner's uid, in the parent namespace), and gets every capability inside the namespace
only, which its policy uses for its mount calls, then gives up before exec
(``jail.policy``).

Where unprivileged user namespaces are refused, root can still make them for the
jail's user (``make(as_ids=...)``): the system service does so before it gives up
root, and hands the fds to the jail; holding them gives the daemon nothing (a
multi-threaded process cannot join a user namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
from dataclasses import dataclass

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_PR_SET_DUMPABLE = 4

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]

HOW_TO_ENABLE = (
    "the jail needs unprivileged user namespaces (for its private mount view of the "
    "stores, sed's chroot and its PID and network namespaces, without root). Enable "
    "them: `sudo sysctl kernel.unprivileged_userns_clone=1` (Debian, older kernels); on "
    "Ubuntu >= 23.10 `sudo scripts/install --apparmor` (an AppArmor profile allowing "
    "`userns` for memfs; or `sysctl kernel.apparmor_restrict_unprivileged_userns=0`); "
    "`sysctl user.max_user_namespaces=N` with N > 0; in a systemd unit, "
    "`RestrictNamespaces=user mnt net pid` (or no RestrictNamespaces=); or run memfs as "
    "the system service (started as root, it makes them before giving up root)"
)


def _check(result: int, what: str) -> None:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


class Unavailable(OSError):
    """User namespaces (or mounts in them) are refused here; the message says what to
    enable."""


@dataclass(frozen=True)
class Namespaces:
    """The jail's namespaces, as fds (close-on-exec)."""

    # the user namespace: joined by each tool child, which makes its views in it
    user: int
    # a network namespace owned by it, with no interface up: joined by each run below
    # Landlock ABI 6 (jail.kernel), keeping abstract sockets away from the host's
    net: int

    def fds(self) -> list[int]:
        return [self.user, self.net]

    def close(self) -> None:
        for fd in self.fds():
            with contextlib.suppress(OSError):
                os.close(fd)


def make(*, as_ids: tuple[int, int] | None = None, refuse: bool = False) -> Namespaces:
    """The jail's namespaces: a new user namespace mapping only one uid and gid (this
    process's, or ``as_ids``), owned by that uid, and a network namespace in it.
    Forks once (call it while single-threaded).

    ``as_ids`` (uid, gid), by root only: made for that unprivileged user by a helper
    that keeps of root only CAP_SYS_ADMIN, which lets it make a user namespace where
    unprivileged ones are refused (Debian's kernel.unprivileged_userns_clone=0,
    Ubuntu's AppArmor restriction), and exits: the system service makes them so
    before it gives up root. ``refuse``: act as if unprivileged user namespaces were
    refused (jail.kernel's MEMFS_JAIL_SIMULATE_NO_USERNS; ``as_ids`` still works).
    Raises Unavailable, whose message says what to enable."""
    if as_ids is not None and os.geteuid() != 0:
        raise ValueError("only root makes the jail's namespaces for another user")
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the helper: never returns
        try:
            _helper(theirs, as_ids, refuse)
        finally:
            os._exit(0)
    theirs.close()
    try:
        message, fds, _flags, _addr = socket.recv_fds(mine, 4096, 2, socket.MSG_CMSG_CLOEXEC)
    finally:
        mine.close()
        os.waitpid(pid, 0)
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        why = message.decode("utf-8", "replace") or "the helper died"
        raise Unavailable(f"{why}: {HOW_TO_ENABLE}")
    return Namespaces(fds[0], fds[1])


_PR_SET_KEEPCAPS = 8
_CAP_SYS_ADMIN = 21
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _become(uid: int, gid: int) -> None:
    """In root's helper: become ``uid``/``gid`` keeping CAP_SYS_ADMIN alone."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    _check(_libc.prctl(_PR_SET_KEEPCAPS, ctypes.c_ulong(1), 0, 0, 0), "PR_SET_KEEPCAPS")
    os.setresuid(uid, uid, uid)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = 1 << _CAP_SYS_ADMIN
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset(CAP_SYS_ADMIN)")


def _helper(sock: socket.socket, as_ids: tuple[int, int] | None, refuse: bool) -> None:
    """In the helper child: make the namespaces, try a mount in them, send their fds
    back (or why it failed)."""
    try:
        # It holds nothing but its socket while dumpable (any process of this uid may
        # then attach to it), and it makes the namespace of its own ids.
        keep = sock.fileno()
        os.closerange(0, keep)
        os.closerange(keep + 1, 1 << 20)
        if as_ids is not None:
            _become(*as_ids)
        elif refuse:
            raise OSError(errno.EPERM, "unshare(CLONE_NEWUSER): Operation not permitted "
                          "(simulated: MEMFS_JAIL_SIMULATE_NO_USERNS)")
        uid, gid = os.geteuid(), os.getegid()
        _check(_libc.prctl(_PR_SET_DUMPABLE, ctypes.c_ulong(1), 0, 0, 0), "PR_SET_DUMPABLE")
        _check(_libc.unshare(_CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
        for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        namespace = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET) in a user namespace")
        network = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS) in a user namespace")
        _check(_libc.mount(b"memfs-probe", b"/", b"tmpfs", 0, b"size=4k"),
               "mounting a tmpfs in a user namespace")
        socket.send_fds(sock, [b"ok"], [namespace, network])
    except OSError as error:
        why = error.strerror or str(error)
        if error.filename:
            why += f": {error.filename}"
        with contextlib.suppress(OSError):
            sock.send(why.encode())


def join(namespace: int) -> None:
    """Enter the user namespace ``namespace`` (made by :func:`make` for this uid): the
    calling process then holds every capability inside it, none outside. Must be
    single-threaded and not share its file-system attributes (a forked child)."""
    _check(_libc.setns(namespace, _CLONE_NEWUSER), "setns(CLONE_NEWUSER)")


def isolate_run(namespaces: Namespaces) -> None:
    """For a tool child inside the jail's user namespace (joined, capabilities still
    held), below Landlock ABI 6: join the jail's network namespace and unshare a PID
    namespace, which the next child (``jail.kernel.become_pid_one``) is PID 1 of."""
    _check(_libc.setns(namespaces.net, _CLONE_NEWNET), "setns(CLONE_NEWNET)")
    _check(_libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")
