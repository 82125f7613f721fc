"""The jail's admission queue (jail/slots.py), pure logic with real threads: runs
beyond the slots wait their turn, callers are served in turn, each caller's queue is
bounded in length and each wait in time, and a waiter that gives up leaves the queue.
Every wait is on a condition (a count of waiters), never on a duration."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable

import pytest

from memfs.jail.errors import JailBusy
from memfs.jail.slots import FairSlots
from tests.support import scaled

FOREVER = 3600.0  # a wait that no test lets run out


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + scaled(60)
    while not condition():
        assert time.monotonic() < deadline, "condition never met"
        time.sleep(0.001)


def queue_up(slots: FairSlots, names: list[str], served: list[str]) -> list[threading.Thread]:
    """One thread per name (caller: the name's first letter), started one after the
    other once the previous one waits; each notes its name when served and lets go."""

    def run(name: str) -> None:
        with slots.slot(name[0]):
            served.append(name)

    threads = []
    for name in names:
        wanted = sum(slots.waiting().values()) + 1
        thread = threading.Thread(target=run, args=(name,))
        thread.start()
        wait_until(lambda wanted=wanted: sum(slots.waiting().values()) == wanted)
        threads.append(thread)
    return threads


def test_free_slots_are_taken_at_once_and_given_back() -> None:
    slots = FairSlots(2, per_caller=0, seconds=0)  # no waiting at all
    slots.acquire("a")
    slots.acquire("b")
    with pytest.raises(JailBusy, match="2 searches or sed edits are running already"):
        slots.acquire("c")
    slots.release()
    slots.acquire("c")
    assert slots.waiting() == {}


def test_runs_beyond_the_slots_wait_and_callers_are_served_in_turn() -> None:
    """A caller with three runs waiting does not starve the two that came after it:
    the freed slots go A, B, C, then A's others."""
    slots = FairSlots(1, per_caller=8, seconds=FOREVER)
    slots.acquire("x")
    served: list[str] = []
    threads = queue_up(slots, ["A1", "A2", "A3", "B1", "C1"], served)
    assert slots.waiting() == {"A": 3, "B": 1, "C": 1}
    slots.release()
    for thread in threads:
        thread.join()
    assert served == ["A1", "B1", "C1", "A2", "A3"]
    assert slots.waiting() == {}


def test_a_callers_queue_is_bounded_while_another_caller_still_queues() -> None:
    slots = FairSlots(1, per_caller=2, seconds=FOREVER)
    slots.acquire("x")
    served: list[str] = []
    threads = queue_up(slots, ["A1", "A2"], served)
    with pytest.raises(JailBusy, match="1 searches or sed edits are running and 2 more of "
                                       "yours are waiting already"):
        slots.acquire("A")
    threads += queue_up(slots, ["B1"], served)  # another caller is not refused
    slots.release()
    for thread in threads:
        thread.join()
    assert served == ["A1", "B1", "A2"]


def test_a_wait_is_bounded_in_time_and_the_waiter_leaves_the_queue() -> None:
    slots = FairSlots(1, per_caller=4, seconds=0.05)
    slots.acquire("x")
    with pytest.raises(JailBusy, match=r"running for all of the 0\.05 s this one waited"):
        slots.acquire("A")
    assert slots.waiting() == {}
    slots.release()  # nobody waits: back to the pool, so the next run starts at once
    slots.acquire("A")


class Interrupted(Exception):
    pass


def test_an_interrupted_waiter_leaves_the_queue() -> None:
    """A wait cut short by an exception (here from a signal handler) takes the
    waiter out of the queue; the slot freed later goes to the pool."""
    slots = FairSlots(1, per_caller=4, seconds=FOREVER)
    slots.acquire("x")

    def interrupt(*_: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Interrupted):
            slots.acquire("A")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert slots.waiting() == {}
    slots.release()
    slots.seconds = 0  # the slot is free: taken without waiting
    slots.acquire("A")


def test_many_callers_at_once_never_exceed_the_slots_and_all_are_served() -> None:
    slots = FairSlots(3, per_caller=64, seconds=FOREVER)
    holding = [0]
    most = [0]
    lock = threading.Lock()
    served: list[str] = []

    def runs(caller: str, count: int, seed: int) -> None:
        rng = random.Random(seed)
        for n in range(count):
            with slots.slot(caller):
                with lock:
                    holding[0] += 1
                    most[0] = max(most[0], holding[0])
                if rng.random() < 0.5:
                    time.sleep(0)
                with lock:
                    holding[0] -= 1
                    served.append(f"{caller}{n}")

    threads = [threading.Thread(target=runs, args=(f"c{i % 8}", 25, i)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(served) == 24 * 25 and most[0] <= 3
    assert slots.waiting() == {}
    slots.seconds = 0
    for _ in range(3):
        slots.acquire("z")  # every slot went back to the pool
    with pytest.raises(JailBusy):
        slots.acquire("z")
