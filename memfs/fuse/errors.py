"""The edge between the engine and the kernel: every exception a FUSE request
handler raises leaves it as a FUSEError carrying an errno.

pyfuse3 ends its main loop on any other exception, and one bad request must never
take the mount down. `_errno_of` maps engine and OS errors (not found ENOENT,
refused EACCES, a hidden symlink or special file ENOENT, a full disk ENOSPC, any
other OSError its own errno, anything else EIO); `guarded` and `guarded_sync` wrap
the handlers with it (MemoryView.open inlines the same clauses); `_fail` builds a
handler's own answer.
The guards also count each request and time one in SAMPLE_EVERY of them
(memfs/fuse/stats.py), for /metrics, at the cost of an increment and a test.
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Callable, Coroutine
from time import perf_counter_ns
from typing import Any, ParamSpec, TypeVar, cast

import pyfuse3

from memfs.errors import MemfsError
from memfs.fuse.stats import COUNT, SAMPLE_MASK, sample, stats_for
from memfs.store.errors import InvalidInput, NoSpace, NotFound, PermissionDenied

log = logging.getLogger("memfs.fuse.mount")

F = TypeVar("F", bound=Callable[..., Coroutine[Any, Any, Any]])


def _errno_of(error: BaseException) -> int:
    if isinstance(error, NotFound | FileNotFoundError | NotADirectoryError):
        return errno.ENOENT
    if isinstance(error, PermissionDenied | PermissionError):
        return errno.EACCES
    if isinstance(error, InvalidInput):
        return errno.ENOENT  # a symlink or special file: hidden
    if isinstance(error, NoSpace):
        return errno.ENOSPC  # an open's seen record cannot be kept
    if isinstance(error, OSError) and error.errno:
        return error.errno
    return errno.EIO


def guarded(method: F) -> F:
    """Turn every exception of a handler into a FUSEError: pyfuse3 ends its main loop
    on anything else, and one bad request must never take the mount down."""

    stats = stats_for(method.__name__)

    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        stats[COUNT] += 1
        start = 0 if stats[COUNT] & SAMPLE_MASK else perf_counter_ns()
        try:
            return await method(*args, **kwargs)
        except Exception as error:
            raise _fuse_error(error, method.__name__) from None
        finally:
            if start:
                sample(stats, perf_counter_ns() - start)

    return cast(F, wrapper)


P = ParamSpec("P")
R = TypeVar("R")


def guarded_sync(method: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """`guarded` for a handler that never awaits, written as a plain function: one
    coroutine per request instead of two (lookup and getattr are the hot ones)."""

    stats = stats_for(method.__name__)

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        stats[COUNT] += 1
        start = 0 if stats[COUNT] & SAMPLE_MASK else perf_counter_ns()
        try:
            return method(*args, **kwargs)
        except Exception as error:
            raise _fuse_error(error, method.__name__) from None
        finally:
            if start:
                sample(stats, perf_counter_ns() - start)

    return wrapper


def _fuse_error(error: Exception, handler: str) -> pyfuse3.FUSEError:
    """The FUSEError a handler's exception becomes (EIO, logged, for a surprise)."""
    if isinstance(error, pyfuse3.FUSEError):
        return error
    if isinstance(error, MemfsError | OSError):
        return pyfuse3.FUSEError(_errno_of(error))
    log.exception("unexpected error in FUSE handler %s", handler, exc_info=error)
    return pyfuse3.FUSEError(errno.EIO)


def _fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)
