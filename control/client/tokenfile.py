"""Reading a bearer token from a file, for clients on other machines (``--token-file``,
``MEMFS_TOKEN_FILE``): the remote mount and the CLI's ``--url``.

A token never travels in argv or the environment (both are readable by other processes
of the same user, and inherited by children); only the file's path does, and the file
must be readable by its owner alone.
"""

from __future__ import annotations

import os
import stat

TOKEN_FILE_ENV = "MEMFS_TOKEN_FILE"
_MAX_BYTES = 4096  # a token is ~50 characters; anything this long is not a token file


class TokenFileError(Exception):
    """The token file cannot be used; the message says why and what to do."""


def read_token_file(path: str) -> str:
    """The token held by the file at ``path``, stripped of surrounding whitespace.

    Guarantees: the file is a regular file (symlinks followed), not readable or writable
    by group or others (mode ``0600`` or stricter), one non-empty line of printable ASCII;
    otherwise raises TokenFileError naming the fix. Reads at most 4 KiB."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise TokenFileError(f"token file {path}: no such file") from None
    except PermissionError:
        raise TokenFileError(f"token file {path}: permission denied") from None
    except OSError as e:
        raise TokenFileError(f"token file {path}: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"token file {path}: not a regular file")
        if info.st_mode & 0o077:
            raise TokenFileError(
                f"token file {path}: mode {stat.S_IMODE(info.st_mode):04o} lets others read "
                f"or change it; run: chmod 600 {path}")
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise TokenFileError(f"token file {path}: longer than {_MAX_BYTES} bytes")
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"token file {path}: not ASCII text") from None
    if not token:
        raise TokenFileError(f"token file {path}: empty")
    if not token.isprintable() or any(c.isspace() for c in token):
        raise TokenFileError(f"token file {path}: more than one word or line")
    return token


def token_file_path(given: str | None) -> str | None:
    """The token file to use: ``given`` (``--token-file``), else ``$MEMFS_TOKEN_FILE``,
    else None."""
    return given or os.environ.get(TOKEN_FILE_ENV) or None
