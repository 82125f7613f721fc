"""What the benchmark scripts share: timing a call, medians and percentiles, two whole `memfs`
commands timed side by side (interleaved, so both see the same machine), the CPU time a
process and everything it starts uses (`ProcessCpu`) or the calling thread uses
(`ThreadCpu`), how busy the machine was meanwhile (`MachineLoad`), and `record`: each
headline figure as one JSON line for docs/speed.md (written by scripts/speed_page.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

RESULTS_VARIABLE = "MEMFS_BENCH_RESULTS"
BOUND = re.compile(r"(<=|>=|<|>) ?([0-9.]+)x?")  # a bare bound of a ratio: "<= 1.5"


def record(figure: str, memfs: str, *, baseline: str = "", ratio: float | None = None,
           goal: str = "", met: bool | None = None) -> None:
    """One headline figure, for the table of docs/speed.md: appended as a JSON line to
    the file named by $MEMFS_BENCH_RESULTS (scripts/bench sets it; without it, nothing
    happens: the human-readable lines printed beside stay the benchmark's output).
    ``memfs``: memfs's figure with its unit; ``baseline``: what it is compared with and
    that baseline's figure from the same run; ``ratio``: memfs / baseline; ``goal``: the
    issues' goal, e.g. "<= 1.5" (of the ratio) or "p99 <= 100 ms"; ``met``: whether the
    goal was met; when not given and ``goal`` is a bare bound ("<= 1.5", ">= 0.8x"), it
    is the ratio's comparison with it."""
    if met is None and ratio is not None and (bound := BOUND.fullmatch(goal.strip())):
        limit = float(bound[2])
        met = {"<=": ratio <= limit, ">=": ratio >= limit, "<": ratio < limit,
               ">": ratio > limit}[bound[1]]
    path = os.environ.get(RESULTS_VARIABLE)
    if not path:
        return
    line = {"kind": "figure", "bench": Path(sys.argv[0]).stem, "figure": figure,
            "memfs": memfs, "baseline": baseline, "ratio": ratio, "goal": goal, "met": met}
    with open(path, "a") as results:
        results.write(json.dumps(line) + "\n")


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
    return in_turn_measured(n, fns)[0]


class Meter(Protocol):
    def ns(self) -> int:
        """CPU nanoseconds used so far by what the meter watches."""
        ...


def in_turn_measured(n: int, fns: Sequence[Callable[[], object]],
                     meters: Sequence[Meter] = ()) -> tuple[list[list[float]],
                                                            list[list[float]]]:
    """As `in_turn`, and with ``meters`` (one per function: the process serving it, or
    `ThreadCpu` for work done in this thread) also the CPU seconds it used during each
    call: (seconds, cpu seconds)."""
    for _ in range(3):
        for fn in fns:
            fn()
    seconds: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for i in range(n):
        for k in range(len(fns)):
            at = (i + k) % len(fns)
            before = meters[at].ns() if meters else 0
            seconds[at].append(timed(fns[at]))
            if meters:
                cpu[at].append((meters[at].ns() - before) / 1e9)
    return seconds, cpu


class SplitMeter(Meter, Protocol):
    def split(self) -> tuple[int, int, int]:
        """CPU nanoseconds so far: (all, user, system)."""
        ...


def in_turn_split(n: int, fns: Sequence[Callable[[], object]],
                  meters: Sequence[SplitMeter]) -> tuple[list[list[float]], list[list[float]],
                                                         list[tuple[float, float]]]:
    """As `in_turn_measured`, and also the user and system CPU seconds per call of each
    function, averaged over its ``n`` calls (the kernel splits by sampled ticks: good
    over many calls only): (seconds, cpu seconds, (user, system) per function)."""
    for _ in range(3):
        for fn in fns:
            fn()
    seconds: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    split = [[0, 0] for _ in fns]
    for i in range(n):
        for k in range(len(fns)):
            at = (i + k) % len(fns)
            before = meters[at].split()
            seconds[at].append(timed(fns[at]))
            after = meters[at].split()
            cpu[at].append((after[0] - before[0]) / 1e9)
            split[at][0] += after[1] - before[1]
            split[at][1] += after[2] - before[2]
    return seconds, cpu, [(user / n / 1e9, system / n / 1e9) for user, system in split]


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


def _unified_cgroups() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified beside
    the v1 ones), if it is."""
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if fields[2] == "cgroup2":
                return Path(fields[1])
    return None


def _with_descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (children of any of its threads)."""
    found, at = [pid], 0
    while at < len(found):
        for task in Path(f"/proc/{found[at]}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                found += [int(child) for child in task.read_text().split()]
        at += 1
    return found


class ProcessCpu:
    """The CPU time a process uses from now on, all its threads and processes below
    it included (a daemon's jail runs too), to the microsecond: they are moved into a
    cgroup v2 of its own (needs root), whose cpu.stat counts what has ended too, and
    whatever they start later is born in it. Where there is no cgroup v2: the sum of
    the schedstat of the threads alive at each reading (a thread that ends takes its
    time with it, and children are not counted); `exact` says which."""

    def __init__(self, pid: int, name: str) -> None:
        self.pid = pid
        self.group: Path | None = None
        top = _unified_cgroups()
        if top is not None and os.geteuid() == 0:
            group = top / f"{name}-{pid}"
            try:
                group.mkdir()
                for member in _with_descendants(pid):  # e.g. a jail started before
                    (group / "cgroup.procs").write_text(str(member))
                self.group = group
            except OSError:
                with contextlib.suppress(OSError):
                    group.rmdir()
        self.exact = self.group is not None

    def ns(self) -> int:
        """CPU nanoseconds used so far (since this meter was made, when exact)."""
        if self.group is not None:
            return self.split()[0]
        total = 0
        for task in Path(f"/proc/{self.pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(task.read_text().split()[0])
        return total

    def split(self) -> tuple[int, int, int]:
        """CPU nanoseconds so far: (all, user, system). Exact meters only; the kernel
        splits its exact total by sampled ticks, so the split is good over many calls
        (a second or more), not for one."""
        assert self.group is not None, "no cgroup v2: no user/system split"
        stat = dict(line.split() for line in (self.group / "cpu.stat").read_text().splitlines())
        return (int(stat["usage_usec"]) * 1000, int(stat["user_usec"]) * 1000,
                int(stat["system_usec"]) * 1000)

    def close(self) -> None:
        """Move whatever still runs in the cgroup back to the root one, and remove it."""
        if self.group is None:
            return
        top = self.group.parent
        for _ in range(50):  # a child may be started while we move them
            pids = (self.group / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    (top / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.group.rmdir()
        self.group = None


def wait_idle(meter: Meter, *, busy: float = 0.05, window: float = 0.5,
              timeout: float = 120.0) -> float:
    """Wait until what ``meter`` watches (a daemon) uses less than ``busy`` of a CPU
    over ``window`` seconds, e.g. until a daemon just started has finished packing the
    history it recorded at start, which would otherwise run during the first figures;
    at most ``timeout`` seconds. Returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        before = meter.ns()
        time.sleep(window)
        if meter.ns() - before < busy * window * 1e9:
            break
    return time.monotonic() - start


class ThreadCpu:
    """The CPU time of the calling thread (user and system): what a call made in this
    thread costs, e.g. a baseline's system calls."""

    def ns(self) -> int:
        return time.thread_time_ns()

    def split(self) -> tuple[int, int, int]:
        """As `ProcessCpu.split`, for this thread (user and system sampled by ticks)."""
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        return (time.thread_time_ns(), int(usage.ru_utime * 1e9), int(usage.ru_stime * 1e9))


class MachineLoad:
    """How busy the machine was between `__init__` and `report`: the load averages at
    both ends and the CPUs that every process used (from /proc/stat), so that a run on a
    machine shared with others says so."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.loadavg = loadavg()
        self.busy = busy_seconds()

    def report(self, ours: float | None = None) -> str:
        """One line; ``ours``: the CPU seconds the benchmark's own processes used
        meanwhile, to tell the others' share apart."""
        elapsed = time.monotonic() - self.started
        busy = busy_seconds() - self.busy
        line = (f"machine: {os.cpu_count()} CPUs; load average {self.loadavg} at the start, "
                f"{loadavg()} at the end; {busy / elapsed:.2f} CPUs busy over "
                f"{elapsed:.0f} s")
        if ours is not None:
            line += (f", of which this benchmark {ours / elapsed:.2f} and others "
                     f"{max(0.0, busy - ours) / elapsed:.2f}")
        return line


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def busy_seconds() -> float:
    """CPU seconds spent by all CPUs outside idle and iowait since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
