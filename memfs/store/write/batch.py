"""Group commit: a store's queue of changes, landed in batches by a leader.

Every single-file change of a store (write, edit, restore, delete, append) is a
`Request`, carried by a `Ticket` put on the store's `Queue` by the thread that serves
it, which then waits for the ticket's `Answer`. There is no committer thread: a thread
that queues a ticket when nobody is landing the store's batches becomes the store's
*leader* and lands batches (every ticket queued, up to MAX_TICKETS or MAX_BYTES) until
its own ticket is answered; then it hands the leadership to the thread of the oldest
ticket still waiting, if any. An uncontended change so costs no hand-over between
threads, and while one batch becomes durable the next one gathers.

How a batch lands (the `Lander`'s steps, memfs/store/write/landing.py):

* `prepare`: order the batch and make its staged files durable (B1-B2);
* `land`: under the store lock, check every ticket in order and land the accepted ones
  (B3-B9): a ticket that must wait for the next batch is returned;
* `durable`: make what landed durable (B10), with the next batch's staged files when
  there is one already (one flush for both);
* `answer`: tell the commit listeners, then wake every ticket's thread (B11).

All tickets of a batch were sent before the batch began and are answered after it
ended (one connection has one request under way at a time), so any order of them is an
acceptance order that each writer may have seen; the lander's order is the commit
order (docs/design/group-commit.md).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from memfs.store import crashpoints
from memfs.store.fs.paths import MemPath
from memfs.store.write.staging import Staged

MAX_TICKETS = 256  # per batch: a batch's writers wait for its last one
MAX_BYTES = 32 << 20  # bytes of content per batch (at least one ticket, whatever its size)
GATHER_WAIT = 10.0  # seconds a leader waits for a test's batch to gather (crashpoints)

REPLACE, DELETE, APPEND = "replace", "delete", "append"


@dataclass(frozen=True, slots=True)
class Request:
    """One single-file change as its writer asked for it; never changed once made.

    REPLACE: ``data`` is the new content (``git``: its blob id, with history). DELETE:
    neither. APPEND: ``data`` is what to append."""

    kind: str
    agent: str
    email: str
    path: MemPath
    op: str
    summary: str
    data: bytes | None = None
    git: str | None = None
    expected: str | None = None
    force: bool = False
    create_freely: bool = False  # restore: recreating a deleted file needs no record
    precondition: Callable[[str | None], bool] | None = None
    delegate: int | None = None  # the delegate uid that made it for the agent


@dataclass(slots=True)
class Answer:
    """What the leader decided for one request (a fresh one: nothing decided yet)."""

    digest: str | None = None  # the file's digest after this change
    size: int = 0
    previous: str | None = None  # before it (None: there was no file)
    commit: str | None = None
    unchanged: bool = False
    missing: bool = False  # a delete of a file that is not there: NotFound
    error: BaseException | None = None
    landed: bool = False  # the change is in place (the listeners are told of it)


@dataclass(eq=False, slots=True)
class Ticket:
    """One request waiting in a store's queue, what the leader holds for it while it
    lands, and then its answer.

    ``staged``: REPLACE, its bytes as a staged file (made by the leader, kept until the
    ticket is answered); APPEND, a copy of them as a whole new file, when the file does
    not exist and the append creates it."""

    request: Request
    parent: int = -1  # fd of the file's folder (the caller's: open until answered)
    staged: Staged | None = None
    answer: Answer = field(default_factory=Answer)  # set by the leader
    done: bool = False  # answered: ``answer`` is final
    # -- waiting --------------------------------------------------------------------------
    _wake: threading.Lock = field(default_factory=threading.Lock)
    _handed: tuple[list[Ticket], bool] | None = None  # a batch to lead, and if synced

    def __post_init__(self) -> None:
        self._wake.acquire()  # released once: answered, or handed the leadership

    @property
    def weight(self) -> int:
        """Bytes of content it brings to a batch."""
        return len(self.request.data or b"")

    def reset(self) -> None:
        """Forget what a check decided (it is to be checked again, or refused)."""
        self.answer = Answer()

    def finish(self, error: BaseException | None = None) -> None:
        """Mark it answered (``error``: refused with it); its thread wakes at `wake`."""
        if error is not None:
            self.answer.error = error
        self.done = True

    def wake(self) -> None:
        self._wake.release()


class Lander(Protocol):
    """The steps of landing one store's batches (memfs/store/write/landing.py)."""

    def prepare(self, batch: list[Ticket]) -> None:
        """Order ``batch`` (in place) and make its staged files durable."""

    def land(self, batch: list[Ticket]) -> list[Ticket]:
        """Check and land the batch under the store lock; answer every ticket it
        decided (`Ticket.finish`); return the tickets that must wait for the next
        batch, in their order."""

    def durable(self, batch: list[Ticket], following: list[Ticket] | None) -> None:
        """Make what ``batch`` landed durable, and the staged files of ``following``
        (the next batch, already taken) too."""

    def answer(self, batch: list[Ticket]) -> None:
        """Tell the commit listeners about the changes of ``batch`` that landed
        (``Ticket.answer.landed``), in their order."""


class Queue:
    """One store's tickets and its leader (see the module docstring)."""

    def __init__(self, lander: Lander) -> None:
        self._lander = lander
        self._mutex = threading.Lock()
        self._gathered = threading.Condition(self._mutex)  # tests only (crashpoints)
        self._queue: deque[Ticket] = deque()
        self._leading = False
        self._gather = crashpoints.gather()

    def submit(self, ticket: Ticket) -> None:
        """Queue ``ticket`` and return once it is answered (``ticket.answer`` says how)."""
        with self._mutex:
            self._queue.append(ticket)
            if self._gather:
                self._gathered.notify()
            lead = not self._leading
            self._leading = True
        if lead:
            self._lead(ticket, None)
            return
        ticket._wake.acquire()  # answered, or handed a batch to lead
        handed, ticket._handed = ticket._handed, None
        if handed is not None:
            self._lead(ticket, handed)

    def _take(self, *, release: bool) -> list[Ticket] | None:
        """The next batch from the queue; None if it is empty, and then with
        ``release`` nobody leads any more (under the same mutex as `submit` checks)."""
        with self._mutex:
            if self._gather:  # a test's batch: the first one taken, by whoever leads
                self._gathered.wait_for(lambda: len(self._queue) >= self._gather,
                                        timeout=GATHER_WAIT)
                self._gather = 0
            if not self._queue:
                if release:
                    self._leading = False
                return None
            batch = [self._queue.popleft()]
            weight = batch[0].weight
            while self._queue and len(batch) < MAX_TICKETS:
                weight += self._queue[0].weight
                if weight > MAX_BYTES:
                    break
                batch.append(self._queue.popleft())
            return batch

    def _requeue(self, tickets: list[Ticket]) -> None:
        """Put ``tickets`` back at the head of the queue, in their order."""
        with self._mutex:
            self._queue.extendleft(reversed(tickets))

    def _lead(self, own: Ticket, handed: tuple[list[Ticket], bool] | None) -> None:
        """Land batches until ``own`` is answered, then hand over or stop leading."""
        batch, synced = handed if handed is not None else (None, False)
        following = None
        try:
            while True:
                if batch is None:
                    batch, synced = self._take(release=False), False
                    assert batch is not None, "the leader's own ticket is queued or answered"
                following = self._run(batch, synced)
                if own.done:
                    return
                batch, synced, following = following, following is not None, None
        finally:
            self._hand_over(following)

    def _run(self, batch: list[Ticket], synced: bool) -> list[Ticket] | None:
        """Land ``batch`` and answer it; returns the next batch if one was taken and
        its staged files made durable along, else None. Every ticket of ``batch`` is
        answered or back in the queue when it returns, also when a step failed."""
        waiting: list[Ticket] = []
        following = None
        try:
            if not synced:
                self._lander.prepare(batch)
            waiting = self._lander.land(batch)
            if waiting:
                self._requeue(waiting)
            following = self._take(release=False)
            self._lander.durable(batch, following)
        except BaseException as error:
            if following is not None:
                self._requeue(following)
                following = None
            for ticket in batch:  # a change not made durable is not acknowledged
                if all(ticket is not w for w in waiting) and (
                        not ticket.done or ticket.answer.error is None):
                    ticket.finish(error)
            if not isinstance(error, Exception):
                self._wake_answered(batch)
                raise
        self._lander.answer(batch)
        self._wake_answered(batch)
        return following

    def _wake_answered(self, batch: list[Ticket]) -> None:
        for ticket in batch:
            if ticket.done:
                ticket.wake()
                crashpoints.reached("batch.answered")

    def _hand_over(self, following: list[Ticket] | None) -> None:
        """The leader is done: give ``following`` (its staged files durable already)
        or else the next batch to the thread of its first ticket, or stop leading."""
        synced = following is not None
        batch = following if following is not None else self._take(release=True)
        if batch is None:
            return
        first = batch[0]
        first._handed = (batch, synced)
        first.wake()
