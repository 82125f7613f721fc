"""Admission of jailed runs: at most N at once, and a short, fair queue for the rest.

A run that finds every slot taken waits its turn instead of failing at once: each
caller (an agent) has a queue of its own, first come first served, and a freed slot
goes to the callers in turn (round-robin), so one caller with many runs waiting does
not starve another. A caller's queue holds at most ``per_caller`` runs and each run
waits at most ``seconds``; past either bound it gets JailBusy, as before. A freed slot
is handed straight to the next waiter (it never goes back to the pool while someone
waits), and a waiter that times out or is interrupted leaves the queue at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator

from memfs.jail.errors import JailBusy


class _Waiter:
    __slots__ = ("caller", "granted", "ready")

    def __init__(self, caller: Hashable) -> None:
        self.caller = caller
        self.granted = False  # set under the lock when a slot is handed to it
        self.ready = threading.Event()


class FairSlots:
    """``slots`` runs at once; beyond them, per-caller FIFO queues served round-robin,
    each at most ``per_caller`` long, each waiter at most ``seconds``. Thread-safe."""

    def __init__(self, slots: int, *, per_caller: int, seconds: float) -> None:
        self.slots = slots
        self.per_caller = per_caller
        self.seconds = seconds
        self._lock = threading.Lock()
        self._free = slots
        # callers with runs waiting, in the order they are served next
        self._queues: OrderedDict[Hashable, deque[_Waiter]] = OrderedDict()

    @contextlib.contextmanager
    def slot(self, caller: Hashable) -> Iterator[None]:
        """Hold one slot for ``caller`` (see `acquire`) for the ``with`` body."""
        self.acquire(caller)
        try:
            yield
        finally:
            self.release()

    def acquire(self, caller: Hashable) -> None:
        """Take a free slot, or wait in ``caller``'s queue for one. Raises JailBusy
        when that queue is full, or after ``seconds`` without a slot."""
        with self._lock:
            if self._free:
                self._free -= 1
                return
            queue = self._queues.get(caller)
            waiting = 0 if queue is None else len(queue)
            if waiting >= self.per_caller:
                more = f" and {waiting} more of yours are waiting" if waiting else ""
                raise JailBusy(f"{self.slots} searches or sed edits are running{more} "
                               "already; retry in a moment")
            if queue is None:
                queue = self._queues[caller] = deque()
            waiter = _Waiter(caller)
            queue.append(waiter)
        try:
            if waiter.ready.wait(self.seconds):
                return
        except BaseException:
            if self._leave(waiter):
                self.release()  # handed a slot as it was interrupted: pass it on
            raise
        if self._leave(waiter):
            return  # handed a slot just as the wait ran out
        raise JailBusy(f"{self.slots} searches or sed edits were running for all of the "
                       f"{self.seconds:g} s this one waited; retry in a moment")

    def release(self) -> None:
        """Give a slot back: to the next waiter in turn, or to the pool."""
        with self._lock:
            if not self._queues:
                self._free += 1
                return
            caller, queue = next(iter(self._queues.items()))
            waiter = queue.popleft()
            if queue:
                self._queues.move_to_end(caller)  # the other callers come first
            else:
                del self._queues[caller]
            waiter.granted = True
        waiter.ready.set()

    def waiting(self) -> dict[Hashable, int]:
        """How many runs wait, by caller (in the order they are served next)."""
        with self._lock:
            return {caller: len(queue) for caller, queue in self._queues.items()}

    def _leave(self, waiter: _Waiter) -> bool:
        """Take ``waiter`` out of its queue; True if it was handed a slot meanwhile
        (it then holds that slot)."""
        with self._lock:
            if waiter.granted:
                return True
            queue = self._queues[waiter.caller]
            queue.remove(waiter)
            if not queue:
                del self._queues[waiter.caller]
            return False
