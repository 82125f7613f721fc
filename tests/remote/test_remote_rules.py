"""The remote mount's rules as pure logic, without a kernel or a daemon (the real
mount is tested in test_remote_mount.py): what the kernel may cache from which answer,
and how the cache folds in changes that came while a listing was fetched.

The handlers here are answered from a kept listing; the daemon's address is one
nothing listens on, so a handler that asked it would fail the test (ETIMEDOUT)."""

from __future__ import annotations

import errno
from typing import Any

import pyfuse3
import trio

from memfs.control.client.remote.cache import ROOT, Cache, Entry, Listing
from memfs.control.client.remote.http import Daemon
from memfs.control.client.remote.ops import ENTRY_TIMEOUT, RemoteView
from memfs.fuse.scans import ScanDetector


def _view() -> tuple[RemoteView, Cache]:
    cache = Cache()
    cache.resync(trusted=True)  # as when the change stream says hello
    cache.stores = ["notes"]
    for rel, entries in (("", {"fresh": Entry(True, 0, 1, 1)}),
                         ("fresh", {"a.md": Entry(False, 8, 2, 2)})):
        assert cache.keep("notes", rel, Listing(1, 1, entries), cache.generation("notes"))
    daemon = Daemon("http://127.0.0.1:9", "token", wait=0.2)
    return RemoteView(daemon, cache, ScanDetector([], 64)), cache


def _event(size: int | None) -> dict[str, Any]:
    file = None if size is None else {"dir": False, "size": size, "mtime_ns": 3,
                                      "ctime_ns": 3}
    return {"file": file, "folder": {"mtime_ns": 3, "ctime_ns": 3}}


def test_only_getattr_answers_let_the_kernel_keep_attributes() -> None:
    """A lookup or readdirplus answer may create the kernel's inode after a change's
    invalidation found none to invalidate: its attributes must not be kept (timeout
    0); a getattr names an inode the kernel holds, so its answer may be kept."""
    view, cache = _view()

    async def handlers() -> None:
        store = await view.lookup(ROOT, b"notes", None)
        assert store.attr_timeout == 0 and store.entry_timeout == ENTRY_TIMEOUT
        fresh = await view.lookup(store.st_ino, b"fresh", None)
        assert fresh.attr_timeout == 0 and fresh.entry_timeout == ENTRY_TIMEOUT
        note = await view.lookup(fresh.st_ino, b"a.md", None)
        assert (note.st_size, note.attr_timeout, note.entry_timeout) == (8, 0, ENTRY_TIMEOUT)
        again = await view.getattr(note.st_ino, None)
        assert (again.st_size, again.attr_timeout) == (8, ENTRY_TIMEOUT)
        fh = await view.opendir(fresh.st_ino, None)
        listed = view._dirs[fh]
        assert [name for name, _ in listed] == [b".", b"..", b"a.md"]
        assert all(attrs.attr_timeout == 0 for _, attrs in listed)
        # a change updates the kept listing in place: the next getattr shows it
        cache.changed("notes", "fresh/a.md", _event(15))
        assert (await view.getattr(note.st_ino, None)).st_size == 15
        # the stream lost: nothing kept is used, the daemon is asked (not there here)
        cache.trusted = False
        try:
            await view.getattr(note.st_ino, None)
        except pyfuse3.FUSEError as error:
            assert error.errno == errno.ETIMEDOUT
        else:
            raise AssertionError("an untrusted cache answered from a kept listing")

    trio.run(handlers)


def test_a_listing_fetched_across_changes_gets_them_replayed() -> None:
    """Changes that came while a listing was fetched are applied onto it in order
    before it is kept; one that cannot be (no entry in the event) keeps it out."""
    cache = Cache()
    cache.resync(trusted=True)
    before = cache.generation("notes")
    cache.changed("notes", "fresh/a.md", _event(15))
    cache.changed("notes", "fresh/b.md", _event(4))
    cache.changed("notes", "fresh/a.md", _event(None))
    fetched = Listing(1, 1, {"a.md": Entry(False, 8, 2, 2)})  # from before all three
    assert cache.keep("notes", "fresh", fetched, before)
    kept = cache.listing("notes", "fresh")
    assert kept is not None and set(kept.entries) == {"b.md"}
    assert kept.entries["b.md"].size == 4 and kept.mtime_ns == 3
    # an event without the file's entry: the listing cannot be brought up to date
    before = cache.generation("notes")
    cache.changed("notes", "fresh/c.md", {})
    assert not cache.keep("notes", "fresh", Listing(1, 1, {}), before)
    assert cache.listing("notes", "fresh") is None
    # a resync meanwhile (another epoch): never kept
    before = cache.generation("notes")
    cache.resync(trusted=True)
    assert not cache.keep("notes", "fresh", Listing(1, 1, {}), before)
