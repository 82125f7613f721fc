"""A store's generation: a counter on the shared root that every change of the store
increments, so that each daemon can notice the changes made through the others.

The counter is the xattr ``user.memfs.generation`` (decimal) of the store's lock file
``ROOT/state/locks/STORE.lock``, which every daemon on the root already holds open.
It is incremented by whoever changed the store, while still holding the store lock,
after the change is in place (so a daemon that sees the new value and looks again
finds the change), before the writer is answered. Because it is read and written
under the lock, increments are never lost and each value is written by exactly one
daemon: a daemon that remembers the values it wrote itself can tell its own
changes (already invalidated in its own caches) from everybody else's.

Reading it is one fgetxattr on an open fd: on a shared file system (GlusterFS) one
round trip, cheap enough to poll a few times a second. Where xattrs are not supported
the counter reads 0 forever and nothing is noticed (as before it existed).
"""

from __future__ import annotations

import os
import threading

XATTR = "user.memfs.generation"
OWN_LIMIT = 4096  # own values remembered between two polls (beyond: seen as foreign)


def read(fd: int) -> int:
    """The counter of the lock file behind ``fd`` (0 if never set or unreadable)."""
    try:
        return int(os.getxattr(fd, XATTR))
    except (OSError, ValueError):
        return 0


class Generation:
    """One store's counter: incremented by this daemon's changes, polled for others'."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._own: set[int] = set()  # values this daemon wrote since the last poll
        self._polled = read(fd)

    def bump(self) -> None:
        """Increment the counter. Call with the store lock held, after a change is in
        place. Never raises: a missed increment only delays other daemons' caches."""
        value = read(self._fd) + 1
        with self._lock:
            if len(self._own) < OWN_LIMIT:
                # Before writing, so that a poll reading it at once knows it is ours.
                self._own.add(value)
        try:
            os.setxattr(self._fd, XATTR, str(value).encode("ascii"))
        except OSError:
            with self._lock:
                self._own.discard(value)

    def changed_elsewhere(self) -> bool:
        """True when another daemon changed the store since the previous call (or it
        cannot be told apart: a counter that went back, too many own changes)."""
        value = read(self._fd)
        with self._lock:
            polled, self._polled = self._polled, value
            if value == polled:
                return False
            ours = sum(1 for known in self._own if polled < known <= value)
            self._own = {known for known in self._own if known > value}
        return value < polled or ours < value - polled
