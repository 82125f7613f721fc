"""What root does before the drop, and the drop (docs/operate/privilege.md).

A daemon started as root (scripts/demo, the tests, a root shell) first runs a short
privileged phase that reads nothing an agent or a client wrote: `hand_over` creates the
root (0700, with ``state/``), the mount point and the socket's directory and gives them
to the service user (memfs/service_user.py: config key ``user``, default ``memfs``), and
adopts what root left in the root (`adopt`); the daemon then binds the control socket
and the HTTP listener (loading the TLS key, which may be readable by root only), and
`drop` gives up root for good: no supplementary groups, the user's gid and uid as real,
effective and saved ids, which clears every capability. A daemon started by any other
user has no privileged phase at all. Either way, once the mount is made (through the
setuid ``fusermount3``, which no_new_privs would stop), `lock_down` sets no_new_privs
and makes the process non-dumpable, before any other thread exists (both are kept by
every thread and child started later), and checks that no capability is left. Only then
does the daemon read a store, a request or a connection.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
from pathlib import Path

from memfs.config import Config
from memfs.places import make_folders
from memfs.service_user import PrivilegeError, ServiceUser
from memfs.store import crashpoints

log = logging.getLogger("memfs")

_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522
_CAPABILITY_SETS = ("CapInh", "CapPrm", "CapEff", "CapAmb")

_libc = ctypes.CDLL(None, use_errno=True)


def _give(path: Path, user: ServiceUser) -> None:
    """Hand ``path`` itself (never what a symlink there points to) to ``user``."""
    os.chown(path, user.uid, user.gid, follow_symlinks=False)


def hand_over(config: Config, user: ServiceUser, *, mount: bool) -> None:
    """As root: make the root (0700, with ``state/`` 0700) and, with ``mount``, the
    mount point (a stale mount on it cleared) and the socket's directory where they
    are missing, give each of them to ``user`` when root owns it (the socket's
    directory only when made here: it may be shared, like /run), and `adopt` what
    root left in the root. Reads no file's content."""
    root = config.root.resolve()  # the config's path is trusted; nothing inside it
    for directory in (root, root / "state"):
        if make_folders(directory, 0o700):
            _give(directory, user)
    os.chmod(root, 0o700)
    adopted = adopt(root, user)
    if adopted:
        log.info("adopted %d files and folders root left in %s: now owned by %s",
                 adopted, root, user.name)
    if mount:
        from memfs.fuse.mount import prepare_mountpoint

        prepare_mountpoint(config.mount)
        if os.lstat(config.mount).st_uid == 0:
            _give(config.mount, user)  # fusermount3 mounts only where the user may write
    if make_folders(config.socket.parent, 0o755):
        _give(config.socket.parent, user)  # so that the daemon can remove its socket at stop


def adopt(root: Path, user: ServiceUser) -> int:
    """Give every folder and every regular file of one link under ``root`` (``root``
    included) that root owns to ``user``; returns how many. Files memfs keeps are the
    daemon's own (memfs/store/fs/backing.py `is_kept`): a root an older, root-run memfs
    wrote, or a file an operator wrote there as root, is root's. Files of any other
    owner, hard links (another name of a file that may live outside the root),
    symlinks and special files are left as they are, and so are other file systems
    mounted below. An fd-based walk that never follows a symlink, and changes the
    entry it looked at (fchownat with AT_SYMLINK_NOFOLLOW)."""
    top = os.stat(root, follow_symlinks=False)
    count = 0
    if top.st_uid == 0:
        _give(root, user)
        count += 1
    for _dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in [*dirnames]:
            st = _lstat(name, dirfd)
            if st is None or not stat.S_ISDIR(st.st_mode) or st.st_dev != top.st_dev:
                dirnames.remove(name)  # neither adopted nor walked
            elif st.st_uid == 0:
                count += _take(name, dirfd, user)
        for name in filenames:
            st = _lstat(name, dirfd)
            if st is not None and st.st_uid == 0 and stat.S_ISREG(st.st_mode) \
                    and st.st_nlink == 1:
                count += _take(name, dirfd, user)
    return count


def _lstat(name: str, dirfd: int) -> os.stat_result | None:
    """The entry ``name`` itself, or None if it is gone (a daemon on another host may
    be changing the root meanwhile)."""
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _take(name: str, dirfd: int, user: ServiceUser) -> int:
    """Hand the entry ``name`` itself to ``user``: 1, or 0 if it is gone."""
    try:
        os.chown(name, user.uid, user.gid, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return 0
    return 1


def drop(user: ServiceUser) -> None:
    """Give up root for good: no supplementary groups, ``user``'s gid and uid as real,
    effective and saved ids (which empties the permitted, effective and ambient
    capability sets). Raises PrivilegeError if root could be taken back."""
    os.setgroups([])
    os.setresgid(user.gid, user.gid, user.gid)
    os.setresuid(user.uid, user.uid, user.uid)
    try:
        os.setuid(0)
    except PermissionError:
        log.info("dropped root: serving as user %s (uid %d, gid %d)", user.name, user.uid,
                 user.gid)
        crashpoints.reached("privilege.dropped")
        return
    raise PrivilegeError("setuid(0) still works after dropping root")


def _prctl(option: int, arg: int, what: str) -> None:
    if _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise PrivilegeError(f"{what} failed: {os.strerror(error)}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _status() -> dict[str, str]:
    with open("/proc/self/status") as handle:
        return dict(line.rstrip("\n").partition(":\t")[::2] for line in handle)


def lock_down() -> None:
    """Once mounted, before anything untrusted is read: set no_new_privs (no exec can
    gain a privilege, a setuid binary included) and PR_SET_DUMPABLE 0 (no process of
    the daemon's uid, a jailed tool included, can ptrace it or read its /proc files),
    empty every capability set left (the inheritable one survives a uid change), then
    check the result. No_new_privs is a thread's: it must be set while the process has
    one thread, so that every thread and child started later has it. Raises
    PrivilegeError when any of that fails, or when the daemon still runs as root."""
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise PrivilegeError(f"no_new_privs must be set before any thread starts ({threads} "
                             "threads run)")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    _prctl(_PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE")
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT_CLEAR_ALL")
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        raise PrivilegeError(f"clearing the capabilities failed: "
                             f"{os.strerror(ctypes.get_errno())}")
    status = _status()
    held = [f"{name} {status[name]}" for name in _CAPABILITY_SETS if int(status[name], 16)]
    if 0 in os.getresuid() or held or status["NoNewPrivs"] != "1":
        raise PrivilegeError(f"the daemon is not unprivileged: uids {os.getresuid()}, "
                             f"{', '.join(held) or 'no capabilities'}, "
                             f"NoNewPrivs {status['NoNewPrivs']}")
