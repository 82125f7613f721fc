"""Inside a spare child of the launcher: confine, wait for one call, exec the tool.

The launcher (``jail.launcher``) forks one spare per tool ahead of its calls (see
``jail.spares``); :func:`spare_main` is what the fork runs. It never returns: it execs
the tool or exits with ``EXEC_FAILED``, having written why on its status pipe. Only
system calls here: everything that does not depend on the call was prepared once, in
the launcher, as a :class:`Ready`.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import json
import os
import signal
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from memfs.jail import mounts, privileges
from memfs.jail.policy import (
    Policy,
    Prepared,
    apply,
    confine,
    isolate,
    set_limits,
    start_ruleset,
)
from memfs.jail.seccomp import load as load_seccomp
from memfs.jail.wire import EXEC_FAILED, MAX_FDS, MAX_MESSAGE, Tool

_SYS_CLOSE_RANGE = 436  # the same on every architecture
_CLOSE_RANGE_CLOEXEC = 1 << 2
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


@dataclass
class Ready:
    """A tool with everything prepared ahead of its calls."""

    tool: Tool
    prepared: Prepared
    exe: int  # O_PATH fd of the binary: exec by fd, no path lookup per call
    env: dict[str, str] = field(default_factory=dict)


def confined_ahead(ready: Ready) -> bool:
    """Whether the spare of this tool applies all of its policy but seccomp before its
    call: true for a tool run in a chroot (sed), whose calls never bring a store
    (``Policy`` refuses stores with a chroot), so that nothing of the policy depends
    on the call."""
    return ready.tool.policy.chroot is not None


def _plan(
    ready: Ready, name: str, work_dir: str, request: bytes, fds: list[int]
) -> tuple[Policy, list[str]]:
    """The policy and argv of a call of tool ``name``; ``fds`` are stdin, stdout,
    stderr, then (if the call has stores) their common directory and the store
    directories. Raises ValueError, KeyError or TypeError for a bad request."""
    message = json.loads(request)
    if message["tool"] != name:
        raise ValueError(f"a call of {message['tool']!r} reached the spare of {name!r}")
    names = [str(store) for store in message["stores"]]
    paths = [str(path) for path in message["paths"]]
    if len(paths) != len(names) or len(fds) != 3 + (len(names) + 1 if names else 0):
        raise ValueError("wrong number of stores or file descriptors")
    argv = [str(a) for a in message["argv"]]
    policy = ready.tool.policy
    if names:
        stores = tuple(zip(names, paths, fds[4:], strict=True))
        policy = policy.replace(cwd=work_dir, stores=stores, stores_dir=fds[3])
    return policy, argv


def _warm_up(ready: Ready, name: str, work_dir: str) -> None:
    """Plan a dummy call (and rehearse the mount calls of rg's): the first run of a code
    path in a forked child writes to many shared pages (reference counts), each write
    copying a page; done here, while waiting, rather than on the call's path (it halves
    the planning time)."""
    if not confined_ahead(ready):
        mounts.rehearse()
    stores = [] if confined_ahead(ready) else ["warm-up"]
    request = json.dumps({"tool": name, "argv": ["x"], "stores": stores, "paths": stores})
    _plan(ready, name, work_dir, request.encode(), [0, 1, 2] + [0] * (len(stores) * 2))


def _close_all_but(keep: set[int]) -> None:
    """Close every fd but ``keep`` (the launcher's sockets, pipes and pidfds, inherited
    by the fork, have nothing to do in a spare)."""
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def spare_main(
    tools: Mapping[str, Ready], name: str, work_dir: str, sock: socket.socket, status: int
) -> None:
    """In a spare child of tool ``name``: confine it as far as its calls allow, wait for
    one call, then finish and exec (never returns).

    Always done before waiting: own session (the launcher kills the whole process
    group), signal mask, death with the launcher, every inherited fd closed but those
    needed, the resource limits, a Landlock ruleset with the tool's path rules. Then:

    - sed (run in a chroot, no stores): the whole policy but seccomp (``policy.confine``):
      the spare waits chrooted in its own mount namespace, with no capability, inside
      its Landlock domain; the call brings only stdio and argv; the seccomp filter is
      loaded after they are received (it would refuse ``recvmsg``), just before exec;
    - rg: nothing more (it waits as the launcher does: unprivileged, no capability;
      below Landlock ABI 6, already PID 1 of its own PID namespace in the jail's
      namespaces, ``policy.isolate``, holding every capability of the jail's user
      namespace, none of the host's); with the call come the stores, and
      ``policy.apply`` makes their view in a mount namespace of its own (only there
      can the daemon's fds be looked up) and applies the rest of the policy.

    Below Landlock ABI 6 the confinement forks (``jail.kernel.become_pid_one``): the
    spare stays behind, waiting for the tool, and exits as it does.
    """
    ready = tools[name]
    policy = ready.tool.policy
    ahead = confined_ahead(ready)
    ruleset: int | None = None
    try:
        os.setsid()
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        privileges.die_with_parent()
        keep = {0, 1, 2, sock.fileno(), status, ready.exe, *ready.prepared.namespaces.fds()}
        keep.update(ready.prepared.opened.fds())
        _close_all_but(keep)
        ruleset = start_ruleset(ready.prepared)
        if ahead:
            confine(policy, ready.prepared, ruleset=ruleset)
            ruleset = None  # enforced and closed
            ready.prepared.namespaces.close()  # joined: no longer needed
        else:
            set_limits(policy.limits)
            if ready.prepared.level.namespaces:  # PID 1 of its own, before the call
                ready = dataclasses.replace(ready, prepared=isolate(ready.prepared))
        _warm_up(ready, name, work_dir)
        request, fds, _flags, _addr = socket.recv_fds(
            sock, MAX_MESSAGE, MAX_FDS, socket.MSG_CMSG_CLOEXEC
        )
        if not request:
            os._exit(0)  # the launcher is going away
        planned, argv = _plan(ready, name, work_dir, request, fds)
        if ahead and planned.stores:
            raise ValueError("stores in a call of a tool confined ahead")
    except BaseException as error:
        with contextlib.suppress(BaseException):
            os.write(status, f"{type(error).__name__}: {error}".encode())
        os._exit(EXEC_FAILED)
    _child(ready, planned, argv, fds[:3], status, None if ahead else ruleset)


def _child(
    ready: Ready,
    policy: Policy,
    argv: list[str],
    stdio: list[int],
    status: int,
    ruleset: int | None,
) -> None:
    """In the spare, once its call came: stdio in place, the rest of the policy applied,
    tool executed. Never returns. With ``ruleset`` (started ahead): ``policy.apply``;
    without (the spare was confined ahead by ``policy.confine``): only its last step,
    the seccomp filter.

    Kept to system calls: the signal dispositions need no reset (the launcher catches
    rather than ignores, and exec resets caught signals), everything else was prepared.
    Errors before the seccomp filter is loaded go to the status pipe; an exec failure
    (after it) can only be told on stderr, with exit status 127.
    """
    try:
        # stdin, stdout, stderr to 0, 1, 2 without clobbering one with another; every
        # other fd (store dirs, the status pipe, the prepared rule paths, the binary, the
        # user namespace) is already close-on-exec, and made so again here, wholesale.
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in stdio]
        for target, fd in enumerate(moved):
            os.dup2(fd, target, inheritable=True)
        if _libc.syscall(_SYS_CLOSE_RANGE, 3, ctypes.c_uint(0xFFFFFFFF), _CLOSE_RANGE_CLOEXEC):
            raise OSError(ctypes.get_errno(), "close_range(CLOEXEC)")
        if ruleset is None:
            load_seccomp(ready.prepared.seccomp)
        else:
            apply(policy, ready.prepared, ruleset=ruleset, limits_set=True)
    except BaseException as error:  # report anything, then die without cleanup
        with contextlib.suppress(BaseException):
            os.write(status, f"{type(error).__name__}: {error}".encode())
        os._exit(EXEC_FAILED)
    try:
        os.execve(ready.exe, argv, ready.env)
    except BaseException as error:
        with contextlib.suppress(BaseException):
            os.write(2, f"memfs-jail: cannot execute {ready.tool.exe}: {error}\n".encode())
    os._exit(EXEC_FAILED)
