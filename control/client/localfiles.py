"""Local-file side of download/upload, shared by the CLI and the MCP tools.

Stdlib only (the CLI imports it). A download lands atomically: the bytes go to a
uniquely named temporary file beside the destination, are flushed to disk, then
renamed over it, so a reader of DEST sees the old file or the new one, never a part.
"""

from __future__ import annotations

import contextlib
import os


class LocalFileError(Exception):
    """A local path cannot be read or written; the message says which and why."""


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()  # read once, at import (os.umask is process-wide)


def destination(dest: str, memfs_path: str) -> str:
    """The absolute file path a download of ``memfs_path`` to ``dest`` writes: ``dest``
    itself, or ``dest/<basename>`` when ``dest`` is a directory or ends with ``/``."""
    if not dest:
        raise LocalFileError("the destination path is empty")
    target = os.path.expanduser(dest)
    name = memfs_path.rstrip("/").rsplit("/", 1)[-1]
    if target.endswith("/") or os.path.isdir(target):
        target = os.path.join(target, name)
    return os.path.abspath(target)


def confine(path: str, root: str | None) -> str:
    """``path`` made absolute: relative to ``root`` if given (else to the working
    directory); with a ``root``, a path that leads outside it, also through symlinks,
    raises LocalFileError."""
    path = os.path.expanduser(path)
    slash = "/" if path.endswith("/") else ""  # "DIR/" means "into DIR": keep it
    if root is None:
        return os.path.abspath(path) + slash
    full = os.path.abspath(os.path.join(root, path))
    real_root = os.path.realpath(root)
    real = os.path.realpath(full)
    if os.path.commonpath([real, real_root]) != real_root:
        raise LocalFileError(f"{path} is outside {root}, the only local directory this "
                             "server may read or write")
    return full + slash if full != "/" else full


def save_atomically(target: str, data: bytes, *, make_parents: bool = False) -> None:
    """Write ``data`` to ``target`` via temp file + fsync + rename. Raises LocalFileError."""
    parent = os.path.dirname(target) or "."
    if os.path.isdir(target):
        raise LocalFileError(f"cannot write {target}: it is a directory")
    try:
        if make_parents:
            os.makedirs(parent, exist_ok=True)
        try:
            mode = os.stat(target).st_mode & 0o7777  # keep an existing file's mode
        except FileNotFoundError:
            mode = 0o666 & ~_UMASK
        tmp = os.path.join(
            parent, f".{os.path.basename(target)}.{os.getpid()}.{os.urandom(4).hex()}.partial"
        )
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise LocalFileError(f"cannot write {target}: {error.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise LocalFileError(f"cannot write {target}: {error.strerror}") from None


MAX_UPLOAD = 1 << 30  # the daemon's own limit (max_file_size) is at most this


def read_local(src: str, max_bytes: int = MAX_UPLOAD) -> bytes:
    """The bytes of the local file ``src``. Raises LocalFileError."""
    if not src:
        raise LocalFileError("the source path is empty")
    path = os.path.expanduser(src)
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise LocalFileError(f"cannot read {os.path.abspath(path)}: {error.strerror}") from None
    if len(data) > max_bytes:
        raise LocalFileError(f"{os.path.abspath(path)} is larger than {max_bytes} bytes")
    return data
