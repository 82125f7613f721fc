"""The remote mount's one long-lived connection to the daemon's change stream
(``GET /v1/events``, control/http/mounts.py), read by a thread of its own.

For each ``commit`` event it drops what the change made stale from the cache and
invalidates the kernel's entries, attributes and pages of it (pyfuse3.invalidate_*,
which may block until a related request is answered: hence a thread, never the trio
loop, and never under the cache's lock). ``resync`` (events were lost) and every
(re)connection invalidate everything: a full re-validation.

Faults. A connection that fails, ends, or stays silent for SILENT seconds (the daemon
sends a comment every 5) is dropped: the cache stops being trusted at once (and the
kernel's caches are invalidated, so that nothing cached is served as fresh) and the
thread reconnects with backoff (FIRST_RETRY doubling to MAX_RETRY). A 401, or an
``end`` event saying the token was revoked, stops it for good (the mount then answers
EACCES). Memory: one line of at most MAX_LINE bytes at a time; a stream backlog
beyond the daemon's bound becomes a ``resync``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import threading
import time
from collections.abc import Callable

import pyfuse3

from memfs.control.client.remote.cache import Cache
from memfs.control.client.remote.http import Daemon

log = logging.getLogger("memfs.remote")

SILENT = 15.0  # seconds without a byte before the stream is taken for dead
FIRST_RETRY, MAX_RETRY = 0.05, 2.0
MAX_LINE = 64 * 1024


def invalidate(todo: list[tuple[int, str | None]]) -> None:
    """Tell the kernel to forget these attributes/pages and entries (blocking; what it
    does not hold is skipped)."""
    for ino, name in todo:
        with contextlib.suppress(OSError):
            if name is None:
                pyfuse3.invalidate_inode(ino, attr_only=False)
            else:
                pyfuse3.invalidate_entry(ino, name.encode("utf-8", "surrogateescape"))


class ChangeStream:
    """Runs `run` in a daemon thread until `stop`."""

    def __init__(self, daemon: Daemon, cache: Cache,
                 on_change: Callable[[str, str], None] | None = None) -> None:
        self.daemon = daemon
        self.cache = cache
        self.on_change = on_change  # tests and benchmarks: called after invalidating
        self._stop = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self.run, name="memfs-remote-stream",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(2)

    def run(self) -> None:
        delay = FIRST_RETRY
        while not self._stop.is_set() and not self.daemon.refused:
            try:
                if self._follow():
                    delay = FIRST_RETRY  # it was up: try again at once
            except Exception as error:  # never let the thread die silently
                log.warning("change stream: %s", error)
            self._lost()
            if self.daemon.refused:
                log.info("the change stream stopped: the token is refused")
                return
            if self._stop.is_set():
                return
            self._stop.wait(delay)
            delay = min(delay * 2, MAX_RETRY)

    def _lost(self) -> None:
        self.connected.clear()
        if self.cache.trusted:
            log.warning("lost the change stream of %s: nothing cached is trusted until it "
                        "is back", self.daemon.url)
            invalidate(self.cache.resync(trusted=False))

    def _follow(self) -> bool:
        """One connection, followed until it ends; True if it was established."""
        conn = self.daemon.connection(timeout=SILENT)
        self._conn = conn
        try:
            conn.request("GET", self.daemon.target("/v1/events"),
                         headers=self.daemon.headers({"Accept": "text/event-stream"}))
            response = conn.getresponse()
        except (OSError, http.client.HTTPException):
            conn.close()
            return False
        try:
            if response.status == 401:
                self.daemon.refuse("401 on the change stream")
                invalidate(self.cache.resync(trusted=False))
                return False
            if response.status != 200:
                log.warning("change stream: the daemon answered %s", response.status)
                return False
            kind = ""
            while not self._stop.is_set():
                line = response.readline(MAX_LINE)
                if not line:
                    return True  # the daemon ended it
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                if text.startswith("event:"):
                    kind = text[6:].strip()
                elif text.startswith("data:"):
                    self._event(kind, text[5:].strip())
                    kind = ""
        except (OSError, http.client.HTTPException):
            return True
        finally:
            conn.close()
            self._conn = None
        return True

    def _event(self, kind: str, data: str) -> None:
        if kind == "hello":
            # connected: from now on every change reaches us; what we cached before may
            # be stale, so all of it is dropped and the kernel's caches too
            invalidate(self.cache.resync(trusted=True))
            self.connected.set()
            log.info("following the changes of %s", self.daemon.url)
        elif kind == "commit":
            try:
                event = json.loads(data)
                store, path = str(event["store"]), str(event["path"])
            except (ValueError, KeyError, TypeError):
                return
            rel = path.partition("/")[2] if path else ""
            invalidate(self.cache.changed(store, rel, event))
            if self.on_change is not None:
                self.on_change(store, rel)
        elif kind == "resync":
            invalidate(self.cache.resync(trusted=True))
        elif kind == "end":
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                reason = str(json.loads(data).get("reason"))
                if "revoked" in reason:
                    self.daemon.refuse("the change stream ended: " + reason)
                    invalidate(self.cache.resync(trusted=False))


def wait_connected(stream: ChangeStream, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stream.connected.wait(0.05):
            return True
    return False
