"""Dropping root for good: groups, uids, gids, every capability, no_new_privs."""

from __future__ import annotations

import ctypes
import os

_CAP_SETUID = 7
_CAP_SETPCAP = 8
_CAP_SYS_ADMIN = 21
_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
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


def drop(uid: int, gid: int, capabilities: range | None = None) -> None:
    """Become ``uid``/``gid`` with no supplementary groups and no capability at all
    (effective, permitted, inheritable, ambient and bounding sets empty), then set
    no_new_privs so that no exec can ever give anything back.

    ``capabilities`` are those to remove from the bounding set (default: every one the
    kernel knows); the launcher passes none, having emptied its own bounding set, which
    its children inherit (see :func:`drop_bounding_set`); that is checked. Must run as
    root; raises OSError if any step fails, and checks the result.
    """
    if uid == 0 or gid == 0:
        raise ValueError("refusing to 'drop' privileges to uid or gid 0")
    # The bounding set can only be shrunk while we still hold CAP_SETPCAP.
    drop_bounding_set(known_caps() if capabilities is None else capabilities)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT_CLEAR_ALL")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    # Changing every uid away from 0 clears the permitted and effective sets.
    os.setresuid(uid, uid, uid)
    # The inheritable set survives setuid: clear it explicitly.
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.syscall(_SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    # Belt and braces: the drop must be irreversible.
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError(0, "uid/gid did not change")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise OSError(0, "setuid(0) still works after dropping privileges")


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
    already gone). A uid change clears this setting: call it after :func:`drop`."""
    parent = os.getppid()
    _prctl(_PR_SET_PDEATHSIG, 9, "PR_SET_PDEATHSIG")  # SIGKILL
    if os.getppid() != parent:
        os.kill(os.getpid(), 9)
