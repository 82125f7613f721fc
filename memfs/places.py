"""Where memfs keeps things, and making those folders: personal mode's places
(``memfs serve --personal``), for the daemon and for the client commands that look
for its socket by themselves; `make_folders` and `private_dir`, which make a folder
of the mode it must have whatever the umask (the root, the mount point, the
socket's folder).

Stdlib ``os`` only: the CLI imports it on every command.

* root: ``$XDG_DATA_HOME/memfs`` (default ``~/.local/share/memfs``);
* mount: ``~/memory``;
* socket: ``$XDG_RUNTIME_DIR/memfs/control.sock``, or, without a runtime directory,
  ``/tmp/memfs-UID/control.sock`` in a directory of mode 0700 that must be the user's
  own (`private_dir` refuses one that someone else made first).

An XDG variable that is not an absolute path is ignored, as the XDG spec says.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # not typing's (nor pathlib at run time): the CLI imports this module
if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_STORE = "notes"  # one structured store: plain notes beside sessions, tasks, decisions
DEFAULT_HTTP_PORT = 7800


def _absolute(value: str | None) -> str | None:
    return value if value and os.path.isabs(value) else None


def socket_path(env: os._Environ[str] | dict[str, str] | None = None,
                uid: int | None = None) -> str:
    """The personal daemon's control socket for this user."""
    env = os.environ if env is None else env
    runtime = _absolute(env.get("XDG_RUNTIME_DIR"))
    if runtime is not None:
        return os.path.join(runtime, "memfs", "control.sock")
    return f"/tmp/memfs-{os.getuid() if uid is None else uid}/control.sock"


def places(env: os._Environ[str] | dict[str, str] | None = None,
           home: str | None = None) -> dict[str, str]:
    """``root``, ``mount`` and ``socket`` of this user's personal memory."""
    env = os.environ if env is None else env
    home = home or os.path.expanduser("~")
    data = _absolute(env.get("XDG_DATA_HOME")) or os.path.join(home, ".local", "share")
    return {"root": os.path.join(data, "memfs"), "mount": os.path.join(home, "memory"),
            "socket": socket_path(env)}


def running_socket() -> str | None:
    """The personal socket if there is one this user's daemon made: a socket in a
    directory of this uid that nobody else may write to (else anyone could plant one
    in /tmp/memfs-UID and read what the user sends); else None."""
    path = socket_path()
    try:
        folder, sock = os.lstat(os.path.dirname(path)), os.lstat(path)
    except OSError:
        return None
    ours = stat.S_ISDIR(folder.st_mode) and folder.st_uid == os.getuid() and \
        not folder.st_mode & 0o022
    return path if ours and stat.S_ISSOCK(sock.st_mode) else None


class NotPrivate(OSError):
    """The directory exists but is not this user's own private directory."""


def private_dir(path: str) -> None:
    """Make ``path`` a directory of mode 0700 owned by this uid (its parents as the
    umask says), or raise NotPrivate when it exists and is not one: a symlink, or a
    directory another uid made first (in /tmp anyone could)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise NotPrivate(f"{path} is not a directory of uid {os.getuid()}: refusing to put the "
                         "control socket there (remove it, or set XDG_RUNTIME_DIR)")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def make_folders(path: Path, mode: int) -> bool:
    """Make the folder ``path`` with ``mode`` and its missing parents with 0755 (the
    service user must reach what is below), whatever the umask; False if ``path``
    was there already."""
    if path.exists() or path.is_symlink():
        return False
    make_folders(path.parent, 0o755)
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        return False  # made meanwhile (another daemon on the same root)
    os.chmod(path, mode)
    return True
