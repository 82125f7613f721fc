"""Small JSON files of ROOT/state shared by every daemon on the root (the HTTP tokens,
a personal memory's agents): read as text, changed under an flock, written atomically."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from memfs.errors import MemfsError


def read_text(path: Path) -> str | None:
    """The file's text, or None when there is no file; raises MemfsError when it
    cannot be read or is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise MemfsError(f"cannot read {path}: {error}") from None


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold the exclusive flock of ``lock_path`` (created 0600, its folder 0700)."""
    lock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` (mode 0600) with ``text``: a temporary file beside it, fsynced,
    renamed over it, then the directory fsynced. Readers see the old file or the new
    one, also after a crash. Raises OSError."""
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
