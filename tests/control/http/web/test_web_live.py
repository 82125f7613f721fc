"""The live pages' commit feed on a real trio loop: notifications from foreign threads
reach the streams of agents that may read the store (and no others), bounded queues
that fall behind are told to resync, the stream limits hold, and closing the feed
ends every stream."""

from __future__ import annotations

import threading

import pytest
import trio

from memfs.control.http.web import live
from memfs.control.http.web.live import CommitFeed, TooManyStreams
from memfs.store.fs.paths import MemPath

ACCESS = {("alice", "notes"): "read_write", ("alice", "ops"): "read",
          ("carol", "notes"): "read"}


def access(agent: str, store: str) -> str | None:
    return ACCESS.get((agent, store))


def path(store: str, rel: str) -> MemPath:
    return MemPath(store, tuple(rel.split("/")))


async def collect(agen: object, count: int) -> list[str]:
    got = []
    async for chunk in agen:  # type: ignore[attr-defined]
        got.append(chunk)
        if len(got) >= count:
            break
    return got


async def test_commits_from_threads_reach_readers_only() -> None:
    feed = CommitFeed(trio.lowlevel.current_trio_token(), access)
    alice, carol = feed.open("alice"), feed.open("carol")

    def commit() -> None:  # as the engine does, in the committing (worker) thread
        feed.committed(path("ops", "a.md"))
        feed.committed(path("notes", "b.md"))
        feed.committed(path("notes", "b.md"))  # the same change twice: one event

    await trio.to_thread.run_sync(commit)
    with trio.fail_after(10):
        assert await alice.receive.receive() == ("ops", "ops/a.md")
        assert await alice.receive.receive() == ("notes", "notes/b.md")
        assert await carol.receive.receive() == ("notes", "notes/b.md")  # never ops
    with pytest.raises(trio.WouldBlock):  # nothing else reached carol: never ops/a.md
        # (the same change twice is one event when both reach the loop in one batch; the
        # loop may run between the two, and then it is the same event again)
        while carol.receive.receive_nowait() == ("notes", "notes/b.md"):
            pass
    feed.store_changed("notes")  # another daemon: the store, no path
    await trio.testing.wait_all_tasks_blocked()
    assert carol.receive.receive_nowait() == ("notes", "")


async def test_a_slow_stream_is_told_to_resync() -> None:
    feed = CommitFeed(trio.lowlevel.current_trio_token(), access)
    stream = feed.open("alice")
    for n in range(live.QUEUE + 10):
        feed.committed(path("notes", f"f{n}.md"))
    await trio.testing.wait_all_tasks_blocked()
    assert stream.lagging
    agen = live.events(feed, stream, lambda: True)
    chunks = await collect(agen, live.QUEUE + 2)
    assert chunks[0].startswith("retry: ") and "event: hello" in chunks[0]
    assert chunks[1].startswith("event: commit") and "notes/f0.md" in chunks[1]
    assert all(c.startswith("event: commit") for c in chunks[1:-1])  # the first QUEUE
    assert chunks[-1].startswith("event: resync")  # then: the rest was lost, reload
    assert not stream.lagging
    await agen.aclose()
    assert len(feed) == 0  # released


async def test_stream_text_ends_with_the_session_or_the_feed() -> None:
    feed = CommitFeed(trio.lowlevel.current_trio_token(), access)
    signed_in = True
    stream = feed.open("alice")
    agen = live.events(feed, stream, lambda: signed_in, keepalive=0.05)
    assert "hello" in await agen.__anext__()
    assert await agen.__anext__() == ": keepalive\n\n"
    feed.committed(path("notes", "x.md"))
    assert '"path":"notes/x.md"' in await agen.__anext__()
    signed_in = False
    feed.committed(path("notes", "y.md"))
    assert "event: end" in await agen.__anext__()
    with pytest.raises(StopAsyncIteration):
        await agen.__anext__()
    assert len(feed) == 0
    other = feed.open("alice")
    agen = live.events(feed, other, lambda: True)
    await agen.__anext__()
    feed.close()  # shutdown
    assert "the daemon is stopping" in await agen.__anext__()
    await agen.aclose()
    assert len(feed) == 0
    with pytest.raises(TooManyStreams):
        feed.open("alice")
    feed.committed(path("notes", "z.md"))  # after close: ignored, never raises


async def test_stream_limits() -> None:
    feed = CommitFeed(trio.lowlevel.current_trio_token(), access)
    mine = [feed.open("alice") for _ in range(live.PER_AGENT)]
    with pytest.raises(TooManyStreams):
        feed.open("alice")
    feed.open("carol")  # another agent still gets one
    feed.release(mine[0])
    feed.open("alice")


def test_posting_after_the_loop_ended_is_harmless() -> None:
    async def make() -> CommitFeed:
        return CommitFeed(trio.lowlevel.current_trio_token(), access)

    feed = trio.run(make)
    errors: list[BaseException] = []

    def post() -> None:
        try:
            feed.committed(path("notes", "late.md"))
            feed.committed(path("notes", "later.md"))
        except BaseException as error:  # pragma: no cover - the failure being tested
            errors.append(error)

    thread = threading.Thread(target=post)
    thread.start()
    thread.join()
    assert errors == []
