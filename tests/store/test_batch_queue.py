"""The leader/follower queue of a store's changes (memfs/store/write/batch.py), with a lander
that only records what it is given: every ticket is answered exactly once, batches never
overlap, a ticket sent back waits for a later batch, a failing step answers its batch
with the error and the queue goes on, and leadership passes to a waiting thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from memfs.store.fs.paths import MemPath
from memfs.store.write.batch import REPLACE, Queue, Request, Ticket


class Recorder:
    """A Lander: answers each ticket with its batch's number."""

    def __init__(self, defer: Callable[[Ticket], bool] = lambda _: False,
                 fail: Callable[[list[Ticket]], bool] = lambda _: False) -> None:
        self.batches: list[list[Ticket]] = []
        self.flushed: list[tuple[int, int | None]] = []  # (batch, following's size)
        self.announced: list[Ticket] = []
        self.busy = threading.Lock()  # held while a batch is landed: never contended
        self.defer, self.fail = defer, fail
        self.deferred: set[int] = set()

    def prepare(self, batch: list[Ticket]) -> None:
        pass

    def land(self, batch: list[Ticket]) -> list[Ticket]:
        assert self.busy.acquire(blocking=False), "two batches landed at once"
        try:
            self.batches.append(list(batch))
            if self.fail(batch):
                raise OSError("the disk went away")
            waiting = [t for t in batch if id(t) not in self.deferred and self.defer(t)]
            self.deferred.update(id(t) for t in waiting)
            for ticket in batch:
                if all(ticket is not w for w in waiting):
                    ticket.answer.commit = str(len(self.batches))
                    ticket.answer.landed = True
                    ticket.finish()
            return waiting
        finally:
            self.busy.release()

    def durable(self, batch: list[Ticket], following: list[Ticket] | None) -> None:
        self.flushed.append((len(self.batches), None if following is None else len(following)))

    def answer(self, batch: list[Ticket]) -> None:
        self.announced += [t for t in batch if t.answer.landed]


def ticket(n: int) -> Ticket:
    return Ticket(Request(REPLACE, f"agent{n % 3}", "a@x.invalid",
                          MemPath("notes", (f"f{n}.md",)), "write", f"write notes/f{n}.md"))


def run_clients(queue: Queue, clients: int, each: int) -> list[Ticket]:
    """``clients`` threads, each submitting ``each`` tickets one after another."""
    made: list[Ticket] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        for k in range(each):
            mine = ticket(number * each + k)
            with lock:
                made.append(mine)
            queue.submit(mine)
            assert mine.done

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a client was never answered"
    return made


def test_every_ticket_is_answered_once_by_one_leader_at_a_time() -> None:
    lander = Recorder()
    made = run_clients(Queue(lander), clients=16, each=25)
    landed = [id(t) for batch in lander.batches for t in batch]
    assert sorted(landed) == sorted(id(t) for t in made)  # each in exactly one batch
    assert all(t.done and t.answer.error is None for t in made)
    assert sorted(id(t) for t in lander.announced) == sorted(landed)


def test_a_ticket_sent_back_lands_in_a_later_batch() -> None:
    lander = Recorder(defer=lambda t: t.request.path.parts[0].endswith(("3.md", "7.md")))
    made = run_clients(Queue(lander), clients=8, each=10)
    sent_back = [t for t in made if t.request.path.parts[0].endswith(("3.md", "7.md"))]
    assert sent_back and all(t.done for t in made)
    for mine in sent_back:
        seen_in = [n for n, batch in enumerate(lander.batches) if any(t is mine for t in batch)]
        assert len(seen_in) == 2 and int(mine.answer.commit or 0) == seen_in[1] + 1


def test_a_failing_batch_answers_its_tickets_with_the_error_and_the_queue_goes_on() -> None:
    failing = {"count": 0}

    def fail(batch: list[Ticket]) -> bool:
        failing["count"] += 1
        return failing["count"] % 4 == 2

    lander = Recorder(fail=fail)
    made = run_clients(Queue(lander), clients=8, each=10)
    failed = [t for t in made if t.answer.error is not None]
    assert failed and all(isinstance(t.answer.error, OSError) for t in failed)
    doomed = [t for n, batch in enumerate(lander.batches) if (n + 1) % 4 == 2 for t in batch]
    assert sorted(map(id, failed)) == sorted(map(id, doomed))
    assert all(t.done for t in made)


def test_a_lone_submit_leads_its_own_batch() -> None:
    lander = Recorder()
    queue = Queue(lander)
    for n in range(3):
        mine = ticket(n)
        queue.submit(mine)
        assert mine.done and mine.answer.commit == str(n + 1)
    assert [len(batch) for batch in lander.batches] == [1, 1, 1]
    assert lander.flushed == [(1, None), (2, None), (3, None)]


@pytest.mark.parametrize("clients", [2, 32])
def test_leadership_passes_on_and_batches_gather_while_one_lands(clients: int) -> None:
    """While a batch lands, the tickets sent meanwhile gather into the next: with many
    clients some batch holds several (the count of batches, not a time, says so)."""
    gate = threading.Event()
    lander = Recorder()
    first_land = lander.land

    def slow_first(batch: list[Ticket]) -> list[Ticket]:
        if not gate.is_set():
            gate.wait(30)  # hold the first batch until every client has queued
        return first_land(batch)

    lander.land = slow_first  # type: ignore[method-assign]
    queue = Queue(lander)
    made: list[Ticket] = []
    threads = []
    for n in range(clients):
        mine = ticket(n)
        made.append(mine)
        threads.append(threading.Thread(target=queue.submit, args=(mine,)))
        threads[-1].start()
        if n == 0:
            while not lander.batches and not queue._leading:
                pass
    while len(queue._queue) < clients - 1:
        threading.Event().wait(0.001)
    gate.set()
    for thread in threads:
        thread.join(60)
    assert all(t.done for t in made)
    assert len(lander.batches) == 2 and len(lander.batches[1]) == clients - 1


def test_a_change_not_made_durable_is_not_acknowledged_but_its_listeners_hear_it() -> None:
    """A flush that fails after the renames: the writers get the error (their change
    may not survive a power loss), and the listeners still hear of what is in place
    (the mount's cache must not serve the old version)."""
    lander = Recorder()

    def failing(batch: list[Ticket], following: list[Ticket] | None) -> None:
        raise OSError("EIO")

    lander.durable = failing  # type: ignore[method-assign]
    queue = Queue(lander)
    mine = ticket(1)
    queue.submit(mine)
    assert isinstance(mine.answer.error, OSError) and mine.answer.landed
    assert lander.announced == [mine]
