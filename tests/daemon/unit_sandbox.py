"""Run a program under the seccomp filters a systemd unit file asks for, without systemd:
``python unit_sandbox.py UNIT -- PROGRAM ARGS...`` loads them, then execs PROGRAM.

As systemd (252) does: an allow-list of the unit's ``SystemCallFilter=`` lines (groups
expanded by ``systemd-analyze syscall-filter``), every other call of the native
architecture killing the process (SIGSYS: ``SystemCallErrorNumber=`` unset); and, with
``MemoryDenyWriteExecute=yes``, a second filter refusing (EPERM) memory that is both
writable and executable, or made executable later. A call the unit forgets then shows
as a daemon (or a jailed tool) killed by SIGSYS.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pyseccomp as sc

_PROT_WRITE, _PROT_EXEC, _SHM_EXEC = 0x2, 0x4, 0o100000


def unit_settings(unit: Path) -> dict[str, list[str]]:
    """Each ``Key=value`` of the unit, the values of repeated keys in order."""
    found: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        key, eq, value = line.partition("=")
        if eq and not line.startswith(("#", "[")):
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def expand(name: str) -> set[str]:
    """The system calls a ``SystemCallFilter=`` word names (a @group, recursively)."""
    if not name.startswith("@"):
        return {name}
    listed = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True,
                            text=True, check=True).stdout.splitlines()[1:]
    calls: set[str] = set()
    for line in listed:
        word = line.strip()
        if word and not word.startswith("#"):
            calls |= expand(word)
    return calls


def allowed(unit: Path) -> set[str]:
    settings = unit_settings(unit)
    calls: set[str] = set()
    for value in settings.get("SystemCallFilter", []):
        assert not value.startswith("~"), "only allow-lists are mirrored"
        for word in value.split():
            calls |= expand(word)
    return calls


def load(unit: Path) -> None:
    allow = sc.SyscallFilter(defaction=sc.KILL_PROCESS)
    for name in sorted(allowed(unit)):
        try:
            allow.add_rule(sc.ALLOW, name)
        except (RuntimeError, ValueError, OSError):
            continue  # not a call of this architecture (systemd skips those too)
    allow.load()
    if unit_settings(unit).get("MemoryDenyWriteExecute") == ["yes"]:
        denied = sc.SyscallFilter(defaction=sc.ALLOW)
        refuse = sc.ERRNO(errno.EPERM)
        both = _PROT_WRITE | _PROT_EXEC
        denied.add_rule(refuse, "mmap", sc.Arg(2, sc.MASKED_EQ, both, both))
        denied.add_rule(refuse, "mprotect", sc.Arg(2, sc.MASKED_EQ, _PROT_EXEC, _PROT_EXEC))
        denied.add_rule(refuse, "pkey_mprotect",
                        sc.Arg(2, sc.MASKED_EQ, _PROT_EXEC, _PROT_EXEC))
        denied.add_rule(refuse, "shmat", sc.Arg(2, sc.MASKED_EQ, _SHM_EXEC, _SHM_EXEC))
        denied.load()


if __name__ == "__main__":
    split = sys.argv.index("--")
    load(Path(sys.argv[1]))
    os.execvp(sys.argv[split + 1], sys.argv[split + 1:])
