"""Live pages: the daemon's commit notifications as server-sent events.

`CommitFeed.committed` is one of the engine's ``commit_listeners``: it is called in
the committing thread (a worker thread) after every accepted change. It only appends
(store, path) to a bounded list under a lock and, once per batch, schedules delivery
on the trio loop with the loop's TrioToken (``run_sync_soon``): no trio call from a
foreign thread, nothing that can block or fail a commit. `store_changed` does the
same for a store another daemon on the root changed (path unknown).

On the loop, each batch goes to every open stream whose agent may read the store,
through a bounded memory channel (QUEUE events): a stream that falls behind loses
events and is told to ``resync`` instead. No thread per stream; at most MAX_STREAMS
streams (PER_AGENT per agent). `close` (at shutdown) ends every stream at once, so
the listener's graceful stop is not held up by them.

The stream (``GET /ui/events``) sends ``event: commit`` with ``{"store", "path"}``,
``resync`` after lost events, ``end`` when the session or the daemon ends, and a
comment every KEEPALIVE seconds (when it also re-checks the session).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import trio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from memfs.store.fs.paths import MemPath

log = logging.getLogger("memfs.http")

QUEUE = 64  # events buffered per stream
MAX_PENDING = 4096  # notifications waiting for the loop; beyond, only stores are kept
MAX_STREAMS = 256
PER_AGENT = 32
KEEPALIVE = 15.0


class TooManyStreams(Exception):
    """No room for another stream (MAX_STREAMS, PER_AGENT, or the feed is closed)."""


@dataclass(eq=False)
class Stream:
    agent: str
    may_read: Callable[[str], bool]
    send: trio.MemorySendChannel[tuple[str, str]]
    receive: trio.MemoryReceiveChannel[tuple[str, str]]
    lagging: bool = False


class CommitFeed:
    """Commit notifications from any thread to the event streams on one trio loop."""

    def __init__(self, token: trio.lowlevel.TrioToken,
                 access: Callable[[str, str], str | None]) -> None:
        """``token``: the loop's; ``access(agent, store)``: the agent's access or None."""
        self._token = token
        self._access = access
        self._lock = threading.Lock()
        self._pending: list[tuple[str, str]] = []
        self._scheduled = False
        self._streams: set[Stream] = set()
        self._closed = False

    # -- any thread -------------------------------------------------------------------

    def committed(self, path: MemPath) -> None:
        """An accepted change of ``path`` (a commit listener; never raises)."""
        self._post(path.store, str(path))

    def store_changed(self, store: str) -> None:
        """``store`` was changed by another daemon on the root (never raises)."""
        self._post(store, "")

    def _post(self, store: str, path: str) -> None:
        with self._lock:
            if self._closed:
                return
            self._pending.append((store, path) if len(self._pending) < MAX_PENDING
                                 else (store, ""))
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(trio.RunFinishedError):  # the loop is gone: nobody listens
            self._token.run_sync_soon(self._deliver)

    # -- the loop ---------------------------------------------------------------------

    def _deliver(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            self._scheduled = False
        batch = list(dict.fromkeys(pending))  # each (store, path) once, in order
        for stream in list(self._streams):
            for event in batch:
                if not stream.may_read(event[0]):
                    continue
                try:
                    stream.send.send_nowait(event)
                except trio.WouldBlock:
                    stream.lagging = True
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    break

    def open(self, agent: str, queue: int = QUEUE) -> Stream:
        """A new stream of ``agent``'s stores' events, ``queue`` of them buffered before
        it is told to resync. Raises TooManyStreams."""
        if self._closed:
            raise TooManyStreams("the daemon is shutting down")
        if len(self._streams) >= MAX_STREAMS or \
                sum(1 for s in self._streams if s.agent == agent) >= PER_AGENT:
            raise TooManyStreams("too many live pages are open; close some and reload")
        send, receive = trio.open_memory_channel[tuple[str, str]](queue)
        stream = Stream(agent, lambda store: self._access(agent, store) is not None,
                        send, receive)
        self._streams.add(stream)
        return stream

    def release(self, stream: Stream) -> None:
        self._streams.discard(stream)
        stream.send.close()
        stream.receive.close()

    def close(self) -> None:
        """End every stream (shutdown); later posts and opens are ignored/refused."""
        with self._lock:
            self._closed = True
            self._pending.clear()
        for stream in list(self._streams):
            stream.send.close()

    def __len__(self) -> int:
        return len(self._streams)


def _event(kind: str, data: object) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def events(feed: CommitFeed, stream: Stream, alive: Callable[[], bool],
                 keepalive: float = KEEPALIVE, ended: str = "signed out",
                 detail: Callable[[str, str], dict[str, Any]] | None = None,
                 ) -> AsyncIterator[str]:
    """The text of one event stream until the session (``alive``) or the feed ends
    (``ended``: the reason given when ``alive`` says no); releases the stream however
    it ends (the client leaving cancels it). ``detail(store, path)``: more fields of a
    commit event (then a batch of events goes out in one write: each write is a pass
    through the scheduler, and a mount waits for the last event of the batch)."""
    try:
        yield "retry: 5000\n" + _event("hello", {"agent": stream.agent})
        while True:
            received: tuple[str, str] | None = None
            closed = False
            with trio.move_on_after(keepalive):  # never yield inside a cancel scope
                try:
                    received = await stream.receive.receive()
                except trio.EndOfChannel:
                    closed = True
            if closed:
                yield _event("end", {"reason": "the daemon is stopping"})
                return
            if not alive():
                yield _event("end", {"reason": ended})
                return
            if received is None:
                yield ": keepalive\n\n"
                continue
            batch = [received]
            while True:
                try:
                    batch.append(stream.receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            if detail is not None:  # a mount's stream: the batch in one write
                yield "".join(_event("commit", {"store": store, "path": path,
                                                **detail(store, path)})
                              for store, path in dict.fromkeys(batch))
            else:
                for store, path in dict.fromkeys(batch):
                    yield _event("commit", {"store": store, "path": path})
            if stream.lagging:
                stream.lagging = False
                yield _event("resync", {})
    finally:
        feed.release(stream)


class EventStream(StreamingResponse):
    """The ``text/event-stream`` response of one stream; the stream is released
    however the response ends, even if it never started sending."""

    def __init__(self, feed: CommitFeed, stream: Stream, alive: Callable[[], bool], *,
                 keepalive: float = KEEPALIVE, ended: str = "signed out",
                 detail: Callable[[str, str], dict[str, Any]] | None = None) -> None:
        super().__init__(events(feed, stream, alive, keepalive, ended, detail),
                         media_type="text/event-stream",
                         headers={"Cache-Control": "no-store"})
        self._feed = feed
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._feed.release(self._stream)
