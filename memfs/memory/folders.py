"""The parsed records of one folder of a structured store, kept in memory.

Every change memfs makes renames a file into its folder, which changes the folder's
mtime: a folder whose identity (device, inode, mtime, ctime) is unchanged is not read
again, and within a changed folder only files whose own identity changed are parsed
again. So a brief over thousands of records costs a stat per folder when nothing
changed.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from memfs.store.errors import InvalidInput
from memfs.store.fs import backing

T = TypeVar("T")

_Ident = tuple[int, int, int, int]


def _ident(st: os.stat_result) -> _Ident:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


class Folder(Generic[T]):
    """``parse(name, bytes)`` of every file memfs keeps in ``store_fd/name``."""

    def __init__(self, store_fd: int, name: str,
                 parse: Callable[[str, bytes], T | None]) -> None:
        self._store_fd = store_fd
        self._name = name
        self._parse = parse
        self._ident: _Ident | None = None
        self._files: dict[str, tuple[_Ident, T]] = {}
        self._lock = threading.Lock()

    def records(self) -> dict[str, T]:
        """File name -> parsed record (files that do not parse are left out)."""
        with self._lock:
            try:
                fd = backing.open_dir(self._store_fd, self._name)
            except (FileNotFoundError, InvalidInput):
                self._ident, self._files = None, {}
                return {}
            with backing.closing_fd(fd):
                ident = _ident(os.fstat(fd))
                if ident != self._ident:
                    self._files = self._scan(fd)
                    self._ident = ident
            return {name: record for name, (_, record) in self._files.items()}

    def _scan(self, fd: int) -> dict[str, tuple[_Ident, T]]:
        found: dict[str, tuple[_Ident, T]] = {}
        for name in os.listdir(fd):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) or not backing.is_kept(st):
                continue
            ident = _ident(st)
            known = self._files.get(name)
            if known is not None and known[0] == ident:
                found[name] = known
                continue
            try:
                file_fd = os.open(name, backing.FILE_FLAGS, dir_fd=fd)
            except OSError:
                continue
            with backing.closing_fd(file_fd):
                data = backing.read_all(file_fd, st.st_size)
            record = self._parse(name, data)
            if record is not None:
                found[name] = (ident, record)
        return found
