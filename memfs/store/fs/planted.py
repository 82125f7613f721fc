"""The entries of a store that memfs never shows, for the jailed ripgrep to skip.

The engine and the mount check every file they open or list (`backing.is_kept`), but
ripgrep walks the store itself. It is told to skip each planted entry (FIFO, socket,
device, hard link, file of a foreign owner, and a file or folder whose name memfs
refuses: not printable, see memfs/store/fs/paths.py) with one exclusion glob per entry,
placed after the caller's own globs so that no flag can bring it back; a search path
that names one is refused.

Finding them is a walk of the store, so each directory's findings are remembered with
the identity of the directory (device, inode, mtime, ctime): planting anything in a
directory (a new name: link, mkfifo, mv) changes its mtime, so an unchanged directory
is not listed again. A search of an unchanged store costs one ``stat`` per directory.
An entry planted while a search runs may be seen by that search (root's race).
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass

from memfs.store.errors import InvalidInput
from memfs.store.fs import backing

MAX_PLANTED = 10_000  # per store; beyond this a search is refused (fix the backing dir)

_Ident = tuple[int, int, int, int]


@dataclass(frozen=True)
class _Listing:
    ident: _Ident
    planted: tuple[str, ...]  # names in this directory that memfs does not show
    subdirs: tuple[str, ...]


def _ident(st: os.stat_result) -> _Ident:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


class PlantedIndex:
    """Remembers, per directory of one store, the entries memfs does not show."""

    def __init__(self, store_fd: int) -> None:
        self._store_fd = store_fd
        self._listings: dict[str, _Listing] = {}
        self._lock = threading.Lock()

    def planted(self) -> list[str]:
        """Paths (relative to the store) of every entry memfs does not show: symlinks,
        special files, hard links, foreign files, names memfs refuses (a folder's
        whole tree). Raises InvalidInput past MAX_PLANTED."""
        with self._lock:
            found: list[str] = []
            seen_dirs: set[str] = set()
            stack = [""]
            while stack:
                rel = stack.pop()
                seen_dirs.add(rel)
                listing = self._listing(rel)
                if listing is None:
                    continue
                base = f"{rel}/" if rel else ""
                found += [base + name for name in listing.planted]
                if len(found) > MAX_PLANTED:
                    raise InvalidInput(
                        f"the store holds more than {MAX_PLANTED} special files or hard links "
                        "that memfs hides; remove them from the backing directory")
                stack += [base + name for name in listing.subdirs]
            for gone in set(self._listings) - seen_dirs:
                del self._listings[gone]
            return found

    def _listing(self, rel: str) -> _Listing | None:
        """The cached listing of directory ``rel``, refreshed when it changed."""
        try:
            st = os.stat(rel or ".", dir_fd=self._store_fd, follow_symlinks=False)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        known = self._listings.get(rel)
        if known is not None and known.ident == _ident(st):
            return known
        listing = self._scan(rel)
        if listing is None:
            self._listings.pop(rel, None)
        else:
            self._listings[rel] = listing
        return listing

    def _scan(self, rel: str) -> _Listing | None:
        """List ``rel`` through a walk that never follows a symlink."""
        parts = tuple(rel.split("/")) if rel else ()
        try:
            fd = (backing.walk_parent(self._store_fd, (*parts, "x"), create=False) if parts
                  else backing.open_dir(self._store_fd, "."))
        except (OSError, InvalidInput):
            return None
        with backing.closing_fd(fd):
            ident = _ident(os.fstat(fd))
            planted: list[str] = []
            subdirs: list[str] = []
            for name in os.listdir(fd):
                if not name.isprintable():  # undecodable bytes too (surrogates)
                    planted.append(name)
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    subdirs.append(name)
                elif not backing.is_kept(st):
                    planted.append(name)
        return _Listing(ident, tuple(sorted(planted)), tuple(sorted(subdirs)))
