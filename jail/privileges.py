"""Giving up every capability for good (bounding, ambient, inheritable, permitted,
effective), no_new_privs, non-dumpable; the jail never runs as root."""

from __future__ import annotations

import ctypes
import errno
import os

_CAP_SETUID = 7
_CAP_SETPCAP = 8
_CAP_SYS_ADMIN = 21
_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_DUMPABLE = 4
_PR_SET_PDEATHSIG = 1
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SYS_CAPGET = 125 if os.uname().machine == "x86_64" else 90  # aarch64: 90
_SYS_CAPSET = 126 if os.uname().machine == "x86_64" else 91  # aarch64: 91
_CAP_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _prctl(option: int, arg: int, what: str) -> None:
    if _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def known_caps() -> range:
    """Capabilities this kernel knows (PR_CAPBSET_READ fails past the last one); asked
    of the kernel rather than /proc, which does not exist inside a chroot."""
    cap = 0
    while (
        cap < 64 and _libc.prctl(ctypes.c_int(_PR_CAPBSET_READ), ctypes.c_ulong(cap), 0, 0, 0) >= 0
    ):
        cap += 1
    return range(cap)


def drop(capabilities: range | None = None) -> None:
    """Give up every capability for good: the bounding set (``capabilities``, default
    every one the kernel knows), ambient, inheritable, permitted and effective sets,
    then set no_new_privs so that no exec can ever give anything back.

    A tool child holds every capability inside the jail's user namespace once it has
    joined it (``jail.userns``), and so may shrink its bounding set; a process that
    holds none (the launcher), or a child whose call waits for it (rg's, see
    ``jail.launcher``), passes ``range(0)``. The uid and gid stay what they are,
    and must not be root's (ValueError: the jail never runs as root). Raises OSError
    if any step fails, and checks the result.
    """
    if 0 in os.getresuid() or 0 in os.getresgid():
        raise ValueError("refusing to confine a process of uid or gid 0: the jail runs "
                         "under an unprivileged uid")
    if capabilities is None or len(capabilities):
        drop_bounding_set(known_caps() if capabilities is None else capabilities)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT_CLEAR_ALL")
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.syscall(_SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    # Belt and braces: nothing may be left.
    if _libc.syscall(_SYS_CAPGET, ctypes.byref(header), ctypes.byref(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capget: {os.strerror(err)}")
    if any(d.effective or d.permitted or d.inheritable for d in data):
        raise OSError(0, "capabilities are left after dropping them")
    try:
        os.setuid(0)
    except OSError as error:  # EPERM; EINVAL in the jail's namespace, where 0 is unmapped
        if error.errno in (errno.EPERM, errno.EINVAL):
            return
        raise
    raise OSError(0, "setuid(0) still works after dropping privileges")


def start_unprivileged() -> None:
    """The launcher's first step: refuse root, give up any capability it was started
    with (ambient ones survive exec), set no_new_privs, and become non-dumpable (no
    process of its own uid may ptrace it or open its /proc/PID files, fds and memory;
    its children inherit that until they exec). Raises ValueError or OSError."""
    drop(range(0))
    _prctl(_PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE")


def drop_bounding_set(capabilities: range | None = None) -> None:
    """Remove ``capabilities`` (default: all) from the bounding set, so that no exec can
    ever gain them; this process keeps its current capabilities. Checks the result."""
    for cap in known_caps() if capabilities is None else capabilities:
        _prctl(_PR_CAPBSET_DROP, cap, f"PR_CAPBSET_DROP({cap})")
    for cap in (_CAP_SETUID, _CAP_SETPCAP, _CAP_SYS_ADMIN):
        if _libc.prctl(ctypes.c_int(_PR_CAPBSET_READ), ctypes.c_ulong(cap), 0, 0, 0) != 0:
            raise OSError(0, f"capability {cap} is still in the bounding set")


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (and now if it is
    already gone). Gaining capabilities (joining a user namespace) clears this
    setting: call it after that."""
    parent = os.getppid()
    _prctl(_PR_SET_PDEATHSIG, 9, "PR_SET_PDEATHSIG")  # SIGKILL
    if os.getppid() != parent:
        os.kill(os.getpid(), 9)
