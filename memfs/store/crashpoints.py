"""Named points between the steps of a change, where a test can have the daemon killed.

A crash test must kill the daemon between *every* pair of steps of a multi-step change
(a landing's intent and each rename, an object and the ref that names it), not only
where a random kill happens to fall. Each such step calls `reached` with its name;
with ``MEMFS_TEST_CRASH_AT=NAME`` (or ``NAME@N``: the Nth time it is reached, counted
from 1) in the daemon's environment, the daemon SIGKILLs itself there: a real kill,
with nothing flushed or cleaned up, as ``kill -9`` from outside would be.

Unset (always, outside tests), `reached` is one comparison.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "MEMFS_TEST_CRASH_AT"


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    name, _, count = spec.partition("@")
    return name, int(count) if count else 1


_target = _parse(os.environ.get(ENV))
_seen = 0
_lock = threading.Lock()


def reached(name: str) -> None:
    """The step before ``name`` is done and the one after it not begun."""
    if _target is None or _target[0] != name:
        return
    global _seen
    with _lock:
        _seen += 1
        if _seen == _target[1]:
            os.kill(os.getpid(), signal.SIGKILL)


GATHER_ENV = "MEMFS_TEST_BATCH"


def gather() -> int:
    """With ``MEMFS_TEST_BATCH=N`` in the daemon's environment (tests only), the number
    of changes a store's leader waits for before it takes a batch (memfs/store/write/batch.py),
    so that a test's N concurrent writes land as one batch, whatever the scheduling;
    else 0 (take what is queued)."""
    value = os.environ.get(GATHER_ENV, "")
    return int(value) if value.isdigit() else 0
