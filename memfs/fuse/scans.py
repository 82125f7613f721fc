"""Which opens through the mount are reads, and which are scans.

An agent's read records the version it saw, and a later write is checked against it.
A search is not a read: ``grep -r`` or ``rg`` over /memory opens every file, and if
those opens recorded, a write based on a copy read an hour ago would be accepted after
any search. So an open records only when the opener is not scanning:

* its command name (``/proc/PID/comm`` of the FUSE request's pid: the base name of
  the program it runs, cut to 15 bytes; readable for any uid's process, unlike
  ``/proc/PID/exe``, which the unprivileged daemon may not read; a program may rename
  itself, which only changes what its own agent's opens record) is not one of the
  configured search tools (``[scans] tools``: rg, grep, find, ...);
* it has not opened more than ``[scans] max_opens_per_second`` files within one
  second (a process that opens many files is a scan from then on, whatever it is);
* its pid is known (0, a process in another pid namespace, cannot be told apart).

Not recording is the safe direction: the agent's write is then a conflict until it
reads the file (``cat`` or ``memfs cat``), never a lost update.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection

WINDOW = 1.0  # seconds over which opens are counted per process
EXE_TTL = 1.0  # how long a pid's command name is trusted before it is read again
COMM_BYTES = 15  # the kernel keeps this much of a command name (TASK_COMM_LEN - 1)
FORGET = 10.0  # a process not seen for this long is forgotten


class _Process:
    __slots__ = ("count", "exe", "exe_read", "last", "scanning", "window")

    def __init__(self, exe: bytes, scanning: bool, now: float) -> None:
        self.exe, self.scanning, self.exe_read = exe, scanning, now
        self.window, self.count, self.last = now, 0, now


class ScanDetector:
    """Tells, per FUSE request pid, whether an open is part of a scan. Thread-safe.

    Asked only for opens that would change the agent's record, so its cost (a read
    of /proc/PID/comm, ~20 us, at most once per EXE_TTL per pid) stays off the path
    of files already read. A pid's command name is read again after EXE_TTL,
    so a process that execs a search tool is a scan within a second; a pid is reused
    only after the whole pid range (at least 32,768) was handed out, and a reused pid
    running another program starts afresh.
    """

    def __init__(self, tools: Collection[str], max_opens_per_second: int) -> None:
        self._tools = frozenset(os.fsencode(tool)[:COMM_BYTES] for tool in tools)
        self._max = max_opens_per_second
        self._processes: dict[int, _Process] = {}
        self._lock = threading.Lock()
        self._swept = time.monotonic()

    def is_scan(self, pid: int) -> bool:
        """True if an open by ``pid`` must not be recorded as a read."""
        if pid <= 0:
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._swept > FORGET:
                self._processes = {p: s for p, s in self._processes.items()
                                   if now - s.last < FORGET}
                self._swept = now
            process = self._processes.get(pid)
        if process is None or now - process.exe_read >= EXE_TTL:
            try:
                with open(f"/proc/{pid}/comm", "rb") as handle:
                    exe = handle.read().rstrip(b"\n")
            except OSError:
                return True  # gone (or /proc hides it): do not record
            tool = exe in self._tools
            with self._lock:
                if process is None or process.exe != exe:
                    process = self._processes[pid] = _Process(exe, tool, now)
                process.exe_read = now
        with self._lock:
            process.last = now
            if now - process.window >= WINDOW:
                process.window, process.count = now, 0
            process.count += 1
            if self._max and process.count > self._max:
                process.scanning = True  # a scan from now on
            return process.scanning
