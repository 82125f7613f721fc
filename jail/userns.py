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
refuse mounts in them), and hands back an fd of the namespace. A tool child joins it
with :func:`join`: it may (it is of the owner's uid, in the parent namespace), and
gets every capability inside the namespace only, which its policy uses for its mount
calls, then gives up before exec (``jail.policy``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNS = 0x00020000
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
    "stores and sed's chroot, without root). Enable them: `sysctl "
    "kernel.unprivileged_userns_clone=1` (Debian, older kernels), `sysctl "
    "kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile allowing "
    "`userns` for memfs (Ubuntu >= 23.10), `sysctl user.max_user_namespaces=N` with N > 0; "
    "in a systemd unit, `RestrictNamespaces=user mnt` (or no RestrictNamespaces=)"
)


def _check(result: int, what: str) -> None:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def make() -> int:
    """The fd (close-on-exec) of a new user namespace owned by this process's uid and
    mapping only its own uid and gid. Forks once (call it while single-threaded).
    Raises OSError whose message says what to enable when unprivileged user
    namespaces, or mounts in them, are not available."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the helper: never returns
        try:
            _helper(theirs)
        finally:
            os._exit(0)
    theirs.close()
    try:
        message, fds, _flags, _addr = socket.recv_fds(mine, 4096, 1, socket.MSG_CMSG_CLOEXEC)
    finally:
        mine.close()
        os.waitpid(pid, 0)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        why = message.decode("utf-8", "replace") or "the helper died"
        raise OSError(f"{why}: {HOW_TO_ENABLE}")
    return fds[0]


def _helper(sock: socket.socket) -> None:
    """In the helper child: make the namespace, try a mount in it, send its fd back
    (or why it failed)."""
    try:
        # It holds nothing but its socket while dumpable (any process of this uid may
        # then attach to it), and it makes the namespace of its own ids.
        keep = sock.fileno()
        os.closerange(0, keep)
        os.closerange(keep + 1, 1 << 20)
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
        _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS) in a user namespace")
        _check(_libc.mount(b"memfs-probe", b"/", b"tmpfs", 0, b"size=4k"),
               "mounting a tmpfs in a user namespace")
        socket.send_fds(sock, [b"ok"], [namespace])
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
