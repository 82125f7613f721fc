"""What the running kernel offers the jail, and what stands in for what it lacks.

The jail uses Landlock best-effort: it handles the access rights the running ABI knows
(ABI 1, Linux 5.13, and up) and gives what a missing feature gave another way.
:data:`FEATURES` is that table, one row per kernel feature (docs/operate/kernels.md shows it
to users); :func:`detect` reads the kernel once and returns the :class:`Level` the
jail runs at, which ``jail.policy.apply`` follows. Nothing here refuses a kernel but
:meth:`Level.missing`: without Landlock at all, or without seccomp filters, the tools
are not run (the rest of memfs serves on).

Two settings make the jail act as if the kernel offered less, for the tests (CI runs
the attack tests at every level on one kernel): ``MEMFS_JAIL_SIMULATE_ABI=N`` (the
jail uses Landlock ABI min(real, N); 0: no Landlock), ``MEMFS_JAIL_SIMULATE_NO_USERNS=1``
(unprivileged user namespaces are refused, as with Debian's
``kernel.unprivileged_userns_clone=0`` or Ubuntu's AppArmor restriction) and
``MEMFS_JAIL_SIMULATE_NO_SECCOMP=1``. A simulation only ever takes away.

This module is imported by the launcher: standard library only.
"""

from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass

SIMULATE_ABI = "MEMFS_JAIL_SIMULATE_ABI"
SIMULATE_NO_USERNS = "MEMFS_JAIL_SIMULATE_NO_USERNS"
SIMULATE_NO_SECCOMP = "MEMFS_JAIL_SIMULATE_NO_SECCOMP"

# The Landlock ABI whose scopes keep signals and abstract unix sockets inside the
# sandbox; below it, namespaces and seccomp do (see FEATURES).
SCOPES_ABI = 6
LATEST_KNOWN_ABI = 7


@dataclass(frozen=True)
class Feature:
    """One kernel feature the jail uses."""

    name: str
    # the first Linux with it (Landlock features: the ABI that brought it)
    since: str
    # what it gives the jail
    gives: str
    # what stands in for it when the kernel lacks it
    instead: str


FEATURES: tuple[Feature, ...] = (
    Feature("seccomp filters", "Linux 3.5",
            "an allow-list of system calls: no socket, connect, kill, ptrace, "
            "process_vm_readv, mount, unshare, fork; opens for reading only; output to "
            "stdout and stderr only",
            "nothing: rg and sed are not run (search and sed edits are refused, saying "
            "what to enable; the rest of memfs serves)"),
    Feature("Landlock ABI 1", "Linux 5.13",
            "reads only beneath the granted stores, libraries and locale; execute only "
            "the tool and its loader; no write, create, remove anywhere",
            "nothing: rg and sed are not run (as without seccomp)"),
    Feature("Landlock ABI 2: REFER", "Linux 5.19",
            "renaming and linking files across directories is handled (ABI 1 always "
            "refuses it)",
            "nothing needed: ABI 1 refuses every cross-directory rename or link, seccomp "
            "refuses rename and link, and the stores are read-only mounts"),
    Feature("Landlock ABI 3: TRUNCATE", "Linux 6.2",
            "truncating a file is refused",
            "seccomp refuses truncate, ftruncate and any open with O_TRUNC or for "
            "writing; the stores are read-only mounts (EROFS), sed's root is read-only"),
    Feature("Landlock ABI 4: TCP bind and connect", "Linux 6.7",
            "no TCP port may be bound or connected to",
            "seccomp refuses socket(); each run is in a network namespace of the jail's "
            "own, with no interface up"),
    Feature("Landlock ABI 5: IOCTL_DEV", "Linux 6.10",
            "ioctl on device files is refused",
            "seccomp allows only the terminal queries TCGETS, TIOCGWINSZ and FIONREAD"),
    Feature("Landlock ABI 6: scopes (signals, abstract unix sockets)", "Linux 6.12",
            "a tool cannot signal, or reach the abstract sockets of, processes outside "
            "its sandbox, though they run under its uid (the daemon, the launcher)",
            "each run is PID 1 of a PID namespace of its own (nothing outside is "
            "visible to signal) and joins the jail's network namespace (abstract "
            "sockets are per network namespace); seccomp refuses kill, tkill, socket "
            "and any tgkill but of the tool itself"),
    Feature("Landlock ABI 7: audit logging", "Linux 6.15",
            "denials can be logged by the kernel's audit",
            "nothing needed: the jail's refusals do not depend on it"),
    Feature("unprivileged user namespaces", "Linux 3.8 (distributions may restrict them)",
            "the jail's private mount views (the stores read-only, sed's chroot) and its "
            "PID and network namespaces, without root",
            "started as root (the system service), memfs makes the jail's namespaces "
            "before it gives up root; a personal memfs refuses search and sed edits, "
            "saying what to enable"),
)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_SYS_LANDLOCK_CREATE_RULESET = 444
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_PR_GET_SECCOMP = 21
_PR_SET_PDEATHSIG = 1
_SYS_CLOSE_RANGE = 436


@dataclass(frozen=True)
class Level:
    """The isolation the jail runs at on this kernel."""

    # Landlock ABI used (0: no Landlock)
    abi: int
    # seccomp filters available
    seccomp: bool
    # unprivileged user namespaces refused (only known when simulated; else the
    # jail finds out when it makes its namespace)
    no_userns: bool = False
    # the kernel's own Landlock ABI, when a simulation lowered it
    real_abi: int | None = None

    @property
    def scoped(self) -> bool:
        """Landlock scopes keep signals and abstract sockets inside the sandbox."""
        return self.abi >= SCOPES_ABI

    @property
    def namespaces(self) -> bool:
        """Each run gets a PID namespace and the jail's network namespace instead."""
        return not self.scoped

    def missing(self) -> str | None:
        """Why the tools cannot be run here, naming what to enable; None when they can."""
        lacking = []
        if self.abi < 1:
            lacking.append("Landlock (Linux >= 5.13 built with CONFIG_SECURITY_LANDLOCK=y, "
                           "with landlock in the lsm= list: e.g. add "
                           "`lsm=landlock,lockdown,yama,integrity,apparmor,bpf` to the kernel "
                           "command line)")
        if not self.seccomp:
            lacking.append("seccomp filters (a kernel built with CONFIG_SECCOMP_FILTER=y)")
        if not lacking:
            return None
        return ("search and sed edits are unavailable: this kernel lacks "
                + " and ".join(lacking) + "; enable it and restart memfs (docs/operate/kernels.md)")

    def describe(self) -> str:
        """One line: the level, and what stands in for what is missing."""
        if self.missing() is not None:
            return f"jail: off ({self.missing()})"
        simulated = "" if self.real_abi is None else f", simulated (the kernel has {self.real_abi})"
        text = f"jail: Landlock ABI {self.abi}{simulated} + seccomp"
        if self.scoped:
            return text + ": signals and abstract sockets kept in by Landlock scopes"
        return (text + f": below ABI {SCOPES_ABI}, each run is PID 1 of its own PID namespace "
                "in the jail's network namespace, and seccomp refuses signals to others "
                "(docs/operate/kernels.md)")


def landlock_abi() -> int:
    """The Landlock ABI of the running kernel; 0 when Landlock is unavailable (not built
    in, or not enabled in the ``lsm=`` boot list)."""
    result = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(result), 0)


def seccomp_available() -> bool:
    """Whether the kernel has seccomp (PR_GET_SECCOMP fails with EINVAL without it)."""
    return int(_libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0)) >= 0


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def detect() -> Level:
    """The level of this kernel, lowered by the MEMFS_JAIL_SIMULATE_* settings (see the
    module's docstring); a bad MEMFS_JAIL_SIMULATE_ABI raises ValueError."""
    real = landlock_abi()
    abi = real
    wanted = os.environ.get(SIMULATE_ABI, "")
    if wanted:
        if not wanted.isdigit():
            raise ValueError(f"{SIMULATE_ABI}={wanted!r}: expected a Landlock ABI number")
        abi = min(real, int(wanted))
    return Level(abi=abi, seccomp=seccomp_available() and not _flag(SIMULATE_NO_SECCOMP),
                 no_userns=_flag(SIMULATE_NO_USERNS),
                 real_abi=real if abi != real else None)


def level_from(data: dict[str, object]) -> Level:
    """The inverse of ``dataclasses.asdict`` on a Level (the launcher's hello)."""
    real = data.get("real_abi")
    return Level(abi=int(str(data["abi"])), seccomp=bool(data["seccomp"]),
                 no_userns=bool(data.get("no_userns")),
                 real_abi=None if real is None else int(str(real)))


def become_pid_one() -> None:
    """After ``unshare(CLONE_NEWPID)``: fork. The child, PID 1 of the new PID namespace
    (the only process there: no pid outside is visible to it), returns, and dies with
    its parent. The parent never returns: it closes every fd, waits for the child and
    exits as it did (same code, or killed by the same signal), so that whoever waits
    for the parent (the launcher) sees the tool's end. Raises OSError if fork fails."""
    pid = os.fork()
    if pid == 0:
        if _libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"PR_SET_PDEATHSIG: {os.strerror(err)}")
        return
    _relay(pid)


def _relay(pid: int) -> None:
    # Holds nothing (a pipe kept open here would delay the tool's EOF), and no
    # capability (it may have joined the jail's user namespace).
    _libc.syscall(_SYS_CLOSE_RANGE, 0, ctypes.c_uint(0xFFFFFFFF), 0)
    code = 1
    try:
        from memfs.jail import privileges  # here: jail.privileges needs nothing of this module

        privileges.drop(range(0))
        _pid, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
            code = 128 + sig
        else:
            code = os.waitstatus_to_exitcode(status)
    finally:
        os._exit(code)
