"""What the benchmark scripts share: timing a call, medians and percentiles, and two whole `memfs`
commands timed side by side (interleaved, so both see the same machine)."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timings(fn: Callable[[], object], n: int) -> list[float]:
    """Seconds each of ``n`` calls of ``fn`` took."""
    return [timed(fn) for _ in range(n)]


def in_turn(n: int, *fns: Callable[[], object]) -> list[list[float]]:
    """Seconds of ``n`` calls of each of ``fns``, called in turn (each round starting one
    further along, so that they all see the same machine state), after three warm-up
    rounds; one list per function, in their order."""
    for _ in range(3):
        for fn in fns:
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for i in range(n):
        for k in range(len(fns)):
            at = (i + k) % len(fns)
            samples[at].append(timed(fns[at]))
    return samples


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def percentile_ms(samples: list[float], fraction: float) -> float:
    """The sample at ``fraction`` (0.5: the median's upper neighbour, 0.99: p99), in ms."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1e3


def commands_side_by_side(first: Sequence[str], second: Sequence[str],
                          env: Mapping[str, str], n: int,
                          ) -> tuple[list[float], list[float]]:
    """Seconds per whole process of ``first`` and of ``second``, run in turn ``n``
    times each (each must succeed)."""
    ours: list[float] = []
    base: list[float] = []
    for _ in range(n):
        ours.append(timed(lambda: subprocess.run(first, env=env, check=True,
                                                 capture_output=True)))
        base.append(timed(lambda: subprocess.run(second, env=env, check=True,
                                                 capture_output=True)))
    return ours, base
