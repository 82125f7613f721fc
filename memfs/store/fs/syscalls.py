"""System calls Python's os module lacks or makes in two steps, through libc.

* `syncfs`: write back and flush one file system (``syncfs(2)``; Python 3.11 has no
  ``os.syncfs``, and ``os.sync()`` flushes every file system of the machine).
* `getxattr`: an extended attribute of an open file in one call with a buffer big enough
  for memfs's records (``os.getxattr`` asks with 128 bytes first, then again with a
  buffer of 64 KiB: a version record of ~160 bytes took two system calls).

Both release the GIL while the kernel works (ctypes drops it around a foreign call), as
``os`` functions do, and raise OSError with the call's errno.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading

_libc = ctypes.CDLL(None, use_errno=True)
_syncfs = _libc.syncfs
_syncfs.argtypes = [ctypes.c_int]
_syncfs.restype = ctypes.c_int
_fgetxattr = _libc.fgetxattr
_fgetxattr.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
_fgetxattr.restype = ctypes.c_ssize_t

BUFFER = 1024  # bytes: a version record is ~160, a generation a few
_local = threading.local()


def syncfs(fd: int) -> None:
    """Write back every dirty page and inode of the file system holding the open file
    ``fd``, and flush the device's cache (as fsync does for one file). Raises OSError."""
    if _syncfs(fd) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def getxattr(fd: int, name: bytes) -> bytes:
    """The value of the extended attribute ``name`` of the open file ``fd``, in one
    system call when it fits BUFFER bytes (else as ``os.getxattr`` reads it). Raises
    OSError (ENODATA: the file has no such attribute)."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None:  # one per thread: the call writes into it
        buffer = _local.buffer = ctypes.create_string_buffer(BUFFER)
    size = _fgetxattr(fd, name, buffer, BUFFER)
    if size >= 0:
        return buffer.raw[:size]
    number = ctypes.get_errno()
    if number == errno.ERANGE:  # longer than any record memfs writes: planted by hand
        return os.getxattr(fd, name)
    raise OSError(number, os.strerror(number))
