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

Found from the uid alone: an MCP client starts ``memfs mcp`` with a minimal environment
(no ``XDG_RUNTIME_DIR``; ``env -i``: nothing at all), so the personal daemon also
`publish`-es its socket at the places its uid alone names (``/run/user/UID/memfs/``
when that runtime directory exists, ``/tmp/memfs-UID/``: a symlink in a private
directory of the user's), and `find_socket` looks there (`candidates`).
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
    """The personal socket if there is one this user's daemon made (`is_ours`) at
    the place this environment names; else None."""
    path = socket_path()
    return path if is_ours(path) else None


def is_ours(path: str, uid: int | None = None) -> bool:
    """Whether ``path`` is a socket this uid's daemon made or published: a socket, or
    a symlink to one (`publish`), in a directory of this uid that nobody else may
    write to (else anyone could plant one in /tmp/memfs-UID and read what the user
    sends)."""
    uid = os.getuid() if uid is None else uid
    try:
        folder, entry = os.lstat(os.path.dirname(path)), os.lstat(path)
        target = os.stat(path) if stat.S_ISLNK(entry.st_mode) else entry
    except OSError:
        return False
    ours = stat.S_ISDIR(folder.st_mode) and folder.st_uid == uid and \
        not folder.st_mode & 0o022
    return ours and stat.S_ISSOCK(target.st_mode) and \
        (target is entry or entry.st_uid == uid)


SYSTEM_SOCKET = "/run/memfs/control.sock"


class NoDaemon(Exception):
    """No daemon's socket at any place looked; the message names each place and what
    to set."""

    def __init__(self, looked: list[str]) -> None:
        self.looked = looked
        super().__init__(
            "no memfs daemon found: no control socket at " + ", ".join(looked) +
            " (start your personal one with `memfs serve --personal`, or name the "
            "daemon's socket with --socket PATH or MEMFS_SOCKET=PATH)")


def uid_places(uid: int | None = None) -> list[str]:
    """Where a personal daemon publishes its socket for a client that has no
    environment: derived from the uid alone."""
    uid = os.getuid() if uid is None else uid
    return [f"/run/user/{uid}/memfs/control.sock", f"/tmp/memfs-{uid}/control.sock"]


def candidates(given: str | None = None,
               env: os._Environ[str] | dict[str, str] | None = None,
               uid: int | None = None) -> list[str]:
    """Every place `find_socket` looks, in order, without repeats: ``given`` (the
    --socket option), ``MEMFS_SOCKET``, the personal socket under
    ``XDG_RUNTIME_DIR``, those under ``/run/user/UID`` and ``/tmp/memfs-UID``, the
    system daemon's ``/run/memfs/control.sock``."""
    env = os.environ if env is None else env
    runtime = _absolute(env.get("XDG_RUNTIME_DIR"))
    found = [given, env.get("MEMFS_SOCKET") or None,
             None if runtime is None else os.path.join(runtime, "memfs", "control.sock"),
             *uid_places(uid), SYSTEM_SOCKET]
    return list(dict.fromkeys(place for place in found if place))


def find_socket(given: str | None = None,
                env: os._Environ[str] | dict[str, str] | None = None,
                uid: int | None = None) -> str:
    """The control socket a client of uid ``uid`` should use: ``given`` or
    ``MEMFS_SOCKET`` as they are (they always win); else this user's personal
    daemon's (`is_ours`) at the first of `candidates` that has one; else the system
    daemon's if there is a socket. Raises NoDaemon naming every place looked."""
    env = os.environ if env is None else env
    named = given or env.get("MEMFS_SOCKET")
    if named:
        return named
    looked = candidates(None, env, uid)
    for place in looked:
        if place != SYSTEM_SOCKET and is_ours(place, uid):
            return place
    try:
        if stat.S_ISSOCK(os.stat(SYSTEM_SOCKET).st_mode):
            return SYSTEM_SOCKET
    except OSError:
        pass
    raise NoDaemon(looked)


def publish(socket: str, uid: int | None = None) -> list[str]:
    """Make ``socket`` (a personal daemon's) findable from the uid alone: a symlink to
    it at each of `uid_places` that is not the socket itself (``/run/user/UID`` only
    when that directory exists and is this uid's), each in a private directory
    (`private_dir`); a link left by an earlier daemon is replaced. Returns the links
    made (for `unpublish`); a place that cannot be made is skipped."""
    uid = os.getuid() if uid is None else uid
    made = []
    for place in uid_places(uid):
        if os.path.abspath(place) == os.path.abspath(socket):
            continue
        folder = os.path.dirname(place)
        runtime = os.path.dirname(folder)
        try:
            if runtime.startswith("/run/user/") and os.stat(runtime).st_uid != uid:
                continue
            private_dir(folder)
            temporary = f"{place}.{os.getpid()}"
            os.symlink(socket, temporary)
            os.replace(temporary, place)  # atomically: a client never finds none
        except (OSError, NotPrivate):
            continue
        made.append(place)
    return made


def unpublish(links: list[str], socket: str) -> None:
    """Remove the links `publish` made that still lead to ``socket`` (another daemon
    may have published its own since)."""
    for link in links:
        try:
            if os.readlink(link) == socket:
                os.unlink(link)
        except OSError:
            pass


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
