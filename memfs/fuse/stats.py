"""Counts and latencies of FUSE requests, kept cheaply on the hot path.

Each handler has one plain list of integers (``[count, samples, sampled_ns,
bucket...]``), updated in place by the handler guards (memfs/fuse/errors.py): no
lock, no call into a metrics library per request. Every request is counted; one in
SAMPLE_EVERY is timed (two clock reads cost more than a store lookup's handler
itself), its latency added to ``sampled_ns`` and to bucket ``i``, the first whose
bound ``2**(i + FIRST_BIT)`` ns (about 1 us, 2 us, 4 us, ... 1 s) it is below; the
last bucket counts the slower rest. A metrics collector reads the lists at scrape
time (control/http/metrics.py). Updates run on the trio thread only; a reader in another
thread may see a sample a moment before its bucket: harmless for metrics.
"""

from __future__ import annotations

SAMPLE_EVERY = 16
SAMPLE_MASK = SAMPLE_EVERY - 1
FIRST_BIT = 10  # 2**10 ns ~ 1 us: the first bucket's bound
BUCKETS = 21  # ... up to 2**30 ns ~ 1.07 s, then +Inf
COUNT, SAMPLES, SAMPLED_NS, FIRST_BUCKET = 0, 1, 2, 3

REQUESTS: dict[str, list[int]] = {}


def stats_for(handler: str) -> list[int]:
    """The counters of ``handler``, created on first use (at decoration time)."""
    return REQUESTS.setdefault(handler, [0] * (FIRST_BUCKET + BUCKETS + 1))


def sample(stats: list[int], elapsed_ns: int) -> None:
    """Add one timed request of ``elapsed_ns`` to ``stats``."""
    stats[SAMPLES] += 1
    stats[SAMPLED_NS] += elapsed_ns
    bit = elapsed_ns.bit_length() - FIRST_BIT
    stats[FIRST_BUCKET + (0 if bit < 0 else bit if bit < BUCKETS else BUCKETS)] += 1


def bucket_bounds() -> list[float]:
    """Upper bounds in seconds of the finite buckets, in order."""
    return [2 ** (FIRST_BIT + i) / 1e9 for i in range(BUCKETS)]
