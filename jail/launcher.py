"""The launcher: a small warm root process that forks, confines and execs each tool.

``Jail.start`` runs :func:`main` once, in a new Python process, passing it FD: one end
of a SOCK_SEQPACKET socketpair. Messages are JSON; file descriptors travel with
SCM_RIGHTS:

1. hello (client -> launcher): ``{"tools": {"rg": Tool, "sed": Tool}, "work_dir": ...,
   "seccomp": BASE64}`` (the BPF program, compiled by the client: libseccomp is not
   loaded here); the launcher prepares each tool's policy (opens the Landlock rule
   paths and the binary), makes its work directory and answers
   ``{"ok": true, "abi": N, "pid": PID}`` or ``{"ok": false, "error": "..."}``.
2. each call (client -> launcher): ``{"tool": "rg", "argv": [...], "stores": [names]}``
   with fds ``[reply socket, stdin, stdout, stderr, store dir fds...]``. The launcher
   clones each store directory as a detached read-only mount and hands the call to
   the spare of its tool, a child forked ahead. rg's is already in its own mount
   namespace with a tmpfs on the work directory (see ``jail.mounts``): it attaches
   the stores there, applies the rest of the policy and execs rg. sed's has applied
   its whole policy but seccomp before the call (chroot, limits, Landlock, root
   dropped): it puts the stdio fds in place, loads the filter and execs sed.
   When the child is reaped it sends one JSON reply on the reply socket:
   ``{"status": "exited", "code": N}``, ``"signaled"`` (+``signal``), ``"timeout"``,
   ``"cancelled"`` or ``"failed"`` (+``error``, the policy could not be applied).
   If the client shuts the reply socket down (output limit, gave up), the child is
   killed. When the control socket closes, every child is killed and the launcher exits.

The launcher is single-threaded (so forking it is safe), never runs tool code itself,
and imports as little as possible (no pydantic): a fork costs more the bigger the
process. Everything that does not depend on the call is prepared once, so the forked
child only makes the system calls of the policy before ``execve``. Children die with
the launcher (PR_SET_PDEATHSIG), and its work directory, always empty, is named after
its pid: a later launcher removes those of dead launchers.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import dataclasses
import fcntl
import json
import os
import re
import selectors
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jail import mounts, privileges
from jail.policy import Policy, Prepared, apply, confine, prepare, set_limits, start_ruleset
from jail.seccomp import load as load_seccomp

MAX_MESSAGE = 1 << 20
MAX_FDS = 250
EXEC_FAILED = 127  # child exit status when the tool could not be executed
WORK_DIR_PREFIX = "memfs-jail-"
_WORK_DIR_NAME = re.compile(r"memfs-jail-([0-9]+)-[A-Za-z0-9_]+")

_SYS_CLOSE_RANGE = 436  # the same on every architecture
_CLOSE_RANGE_CLOEXEC = 1 << 2
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


@dataclass(frozen=True)
class Tool:
    """How to run one tool: its binary (host path), environment and base policy."""

    exe: str
    env: Mapping[str, str]
    policy: Policy

    def to_json(self) -> dict[str, Any]:
        return {"exe": self.exe, "env": dict(self.env), "policy": self.policy.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tool:
        if set(data) != {"exe", "env", "policy"}:
            raise ValueError(f"bad tool description: keys {sorted(data)}")
        env = {str(k): str(v) for k, v in dict(data["env"]).items()}
        return cls(str(data["exe"]), env, Policy.from_json(data["policy"]))


@dataclass
class _Ready:
    """A tool with everything prepared ahead of its calls."""

    tool: Tool
    prepared: Prepared
    exe: int  # O_PATH fd of the binary: exec by fd, no path lookup per call
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class _Job:
    pid: int
    pidfd: int
    reply: socket.socket
    status_read: int
    deadline: float
    tool: str
    ended: str | None = None  # "timeout" or "cancelled" once we killed it
    namespace: int | None = None  # the child's mount namespace, held (see start)


@dataclass
class _Spare:
    """A child forked ahead of the next call of ``tool``, waiting for it on ``sock``."""

    tool: str
    pid: int
    pidfd: int
    sock: socket.socket
    status_read: int


class Launcher:
    """The event loop: requests in, children out, replies when they are reaped.

    One child per tool is always forked ahead (its spare, see :func:`_spare_main`): a
    call hands its fds to the spare of its tool, which goes straight to the part of the
    policy that depends on the call, so the fork (and for sed the whole confinement) is
    not on the call's path. A new spare is forked once the reply is sent (or on demand
    when calls overlap), and is killed with the launcher.
    """

    def __init__(self, control: socket.socket, tools: dict[str, _Ready], work_dir: str) -> None:
        self.control = control
        self.tools = tools
        self.work_dir = work_dir
        self.selector = selectors.DefaultSelector()
        self.jobs: dict[int, _Job] = {}  # by pidfd
        self.spares: dict[str, _Spare] = {}  # by tool

    def run(self) -> None:
        self.selector.register(self.control, selectors.EVENT_READ, None)
        try:
            self.replenish()
            while True:
                now = time.monotonic()
                deadlines = [job.deadline for job in self.jobs.values() if job.ended is None]
                timeout = max(0.0, min(deadlines) - now) if deadlines else None
                for key, _ in self.selector.select(timeout):
                    job: _Job | _Spare | None = key.data
                    if job is None:
                        if not self.on_request():
                            return
                    elif isinstance(job, _Spare):
                        self.on_spare_exit(job)
                    elif self.jobs.get(job.pidfd) is not job:
                        continue  # reaped earlier in this same batch of events
                    elif key.fileobj is job.reply:
                        self.on_reply_socket(job)
                    else:
                        self.on_exit(job)
                now = time.monotonic()
                for running in list(self.jobs.values()):
                    if running.ended is None and now >= running.deadline:
                        self.kill(running, "timeout")
        finally:
            for spare in list(self.spares.values()):
                self.drop_spare(spare)
            for left in list(self.jobs.values()):
                self.kill(left, "cancelled")
                os.waitpid(left.pid, 0)
                self.cleanup(left)

    def on_request(self) -> bool:
        """Start one job; False when the client closed the control socket."""
        try:
            data, fds, _flags, _addr = socket.recv_fds(
                self.control, MAX_MESSAGE, MAX_FDS, socket.MSG_CMSG_CLOEXEC
            )
        except ConnectionError:
            return False
        if not data:
            for fd in fds:
                os.close(fd)
            return False
        try:
            message = json.loads(data)
            ready = self.tools[message["tool"]]
            if len(fds) != 4 + len(message["stores"]):
                raise ValueError("wrong number of file descriptors")
            # The spare lives in its own mount namespace already: it gets read-only
            # clones of the store directories, made here (see jail.mounts).
            for i in range(4, len(fds)):
                fds[i], store = mounts.clone_read_only(fds[i]), fds[i]
                os.close(store)
        except (OSError, ValueError, KeyError, TypeError) as error:
            self.reply_now(fds, {"status": "failed", "error": f"bad request: {error}"})
            return True
        try:
            self.start(data, message["tool"], ready.tool.policy.timeout_seconds, fds)
        except OSError as error:  # fork failed (EAGAIN, ENOMEM): this call fails, not us
            self.reply_now(fds, {"status": "failed", "error": f"cannot fork: {error}"})
        return True

    def reply_now(self, fds: list[int], message: dict[str, object]) -> None:
        if fds:
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fds[0])) as reply:
                reply.send(json.dumps(message).encode(), socket.MSG_NOSIGNAL)
        for fd in fds:
            os.close(fd)

    def fork_spare(self, tool: str) -> _Spare:
        """Fork a child that waits for a call of ``tool`` (raises OSError if fork fails)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        status_read, status_write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (status_read, status_write):
                os.close(fd)
            mine.close()
            theirs.close()
            raise
        if pid == 0:  # child: never returns
            mine.close()
            _spare_main(self.tools, tool, self.work_dir, theirs, status_write)
        theirs.close()
        os.close(status_write)
        return _Spare(tool, pid, os.pidfd_open(pid), mine, status_read)

    def replenish(self, *tools: str) -> None:
        """Have a spare of each of ``tools`` (default: every tool) ready for the next
        call (best effort)."""
        for tool in tools or tuple(self.tools):
            if tool in self.spares:
                continue
            try:
                spare = self.fork_spare(tool)
            except OSError:
                return  # the next call forks on demand, and reports the error if any
            self.spares[tool] = spare
            self.selector.register(spare.pidfd, selectors.EVENT_READ, spare)

    def take_spare(self, tool: str) -> _Spare:
        spare = self.spares.pop(tool, None)
        if spare is None:
            return self.fork_spare(tool)
        self.selector.unregister(spare.pidfd)
        return spare

    def on_spare_exit(self, spare: _Spare) -> None:
        """An idle spare died: forget it; fork another if it was killed by someone, not
        if it failed to confine itself (the next call of its tool forks one on demand,
        which reports the failure; no fork loop)."""
        if self.spares.get(spare.tool) is not spare:
            return  # taken by a call earlier in the same batch of events: not idle
        self.selector.unregister(spare.pidfd)
        del self.spares[spare.tool]
        failed = self.drop_spare(spare)
        if not failed:
            self.replenish(spare.tool)

    def drop_spare(self, spare: _Spare) -> str:
        """Kill and reap a spare; returns the failure it reported, if any."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(spare.pidfd, signal.SIGKILL)
        os.waitpid(spare.pid, 0)
        spare.sock.close()
        os.close(spare.pidfd)
        failure = _read_all(spare.status_read)
        os.close(spare.status_read)
        return failure

    def start(self, request: bytes, tool: str, timeout: float, fds: list[int]) -> None:
        """Hand the call to the spare of ``tool`` (or to a fresh child if it is gone)."""
        for attempt in (1, 2):
            spare = self.take_spare(tool)
            try:
                socket.send_fds(spare.sock, [request], fds[1:])
                break
            except OSError:
                self.drop_spare(spare)  # died in between: once more with a fresh one
                if attempt == 2:
                    raise
        spare.sock.close()
        reply = socket.socket(fileno=fds[0])
        for fd in fds[1:]:
            os.close(fd)
        job = _Job(
            pid=spare.pid,
            pidfd=spare.pidfd,
            reply=reply,
            status_read=spare.status_read,
            deadline=time.monotonic() + timeout,
            tool=tool,
        )
        self.jobs[job.pidfd] = job
        self.selector.register(job.pidfd, selectors.EVENT_READ, job)
        self.selector.register(reply, selectors.EVENT_READ, job)
        if not _confined_ahead(self.tools[tool]):
            # Hold the child's private mount namespace (the stores mounted in it): else
            # the tool's exit unmounts them, on the call's path, before its parent is
            # told; here they go when the call is cleaned up, after the reply. (While
            # the spare is attaching the stores: in parallel. If it has not entered its
            # own namespace yet, this is ours, and holding it changes nothing.)
            with contextlib.suppress(OSError):
                job.namespace = os.open(f"/proc/{job.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)

    def on_reply_socket(self, job: _Job) -> None:
        """The client shut its side down: it wants the tool stopped."""
        self.selector.unregister(job.reply)
        if job.ended is None:
            self.kill(job, "cancelled")

    def kill(self, job: _Job, why: str) -> None:
        job.ended = job.ended or why
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(job.pidfd, signal.SIGKILL)

    def on_exit(self, job: _Job) -> None:
        _pid, status = os.waitpid(job.pid, 0)
        failure = _read_all(job.status_read)
        if failure:
            reply: dict[str, object] = {"status": "failed", "error": failure}
        elif job.ended is not None:
            reply = {"status": job.ended}
        elif os.WIFSIGNALED(status):
            reply = {"status": "signaled", "signal": os.WTERMSIG(status)}
        else:
            reply = {"status": "exited", "code": os.waitstatus_to_exitcode(status)}
        with contextlib.suppress(OSError):
            job.reply.send(json.dumps(reply).encode(), socket.MSG_NOSIGNAL)
        self.cleanup(job)
        self.replenish(job.tool)  # after the reply: off the path of this call and the next

    def cleanup(self, job: _Job) -> None:
        for fileobj in (job.pidfd, job.reply):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fileobj)
        del self.jobs[job.pidfd]
        os.close(job.pidfd)
        os.close(job.status_read)
        job.reply.close()
        if job.namespace is not None:
            os.close(job.namespace)


def _plan(
    ready: _Ready, name: str, work_dir: str, request: bytes, fds: list[int]
) -> tuple[Policy, list[str]]:
    """The policy and argv of a call of tool ``name``; ``fds`` are stdin, stdout, stderr
    and the store directories. Raises ValueError, KeyError or TypeError for a bad
    request."""
    message = json.loads(request)
    if message["tool"] != name:
        raise ValueError(f"a call of {message['tool']!r} reached the spare of {name!r}")
    names = [str(store) for store in message["stores"]]
    if len(fds) != 3 + len(names):
        raise ValueError("wrong number of file descriptors")
    argv = [str(a) for a in message["argv"]]
    policy = ready.tool.policy
    if names:
        policy = policy.replace(cwd=work_dir, stores=tuple(zip(names, fds[3:], strict=True)))
    return policy, argv


def _warm_up(ready: _Ready, name: str, work_dir: str) -> None:
    """Plan a dummy call: the first run of a code path in a forked child writes to many
    shared pages (reference counts), each write copying a page; done here, while
    waiting, rather than on the call's path (it halves the planning time)."""
    stores = [] if _confined_ahead(ready) else ["warm-up"]
    request = json.dumps({"tool": name, "argv": ["x"], "stores": stores}).encode()
    _plan(ready, name, work_dir, request, [0, 1, 2] + [0] * len(stores))


def _confined_ahead(ready: _Ready) -> bool:
    """Whether the spare of this tool applies all of its policy but seccomp before its
    call: true for a tool run in a chroot (sed), whose calls never bring a store
    (``Policy`` refuses stores with a chroot), so that nothing of the policy depends
    on the call."""
    return ready.tool.policy.chroot is not None


def _close_all_but(keep: set[int]) -> None:
    """Close every fd but ``keep`` (the launcher's sockets, pipes and pidfds, inherited
    by the fork, have nothing to do in a spare)."""
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _spare_main(
    tools: Mapping[str, _Ready], name: str, work_dir: str, sock: socket.socket, status: int
) -> None:
    """In a spare child of tool ``name``: confine it as far as its calls allow, wait for
    one call, then finish and exec (never returns).

    Always done before waiting: own session (the launcher kills the whole process
    group), signal mask, death with the launcher, every inherited fd closed but those
    needed, the resource limits, a Landlock ruleset with the tool's path rules. Then:

    - sed (run in a chroot, no stores): the whole policy but seccomp (``policy.confine``):
      the spare waits chrooted, as the unprivileged uid with no capability, inside its
      Landlock domain; the call brings only stdio and argv; the seccomp filter is
      loaded after they are received (it would refuse ``recvmsg``), just before exec;
    - rg: a private mount namespace with a tmpfs on the work directory, still root:
      the stores of the call are attached there, then the rest of the policy applied.
    """
    ready = tools[name]
    policy = ready.tool.policy
    ahead = _confined_ahead(ready)
    ruleset: int | None = None
    try:
        os.setsid()
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        privileges.die_with_parent()
        keep = {0, 1, 2, sock.fileno(), status, ready.exe}
        keep.update(fd for fd, _ in ready.prepared.path_rules)
        _close_all_but(keep)
        ruleset = start_ruleset(ready.prepared)
        if ahead:
            confine(policy, ready.prepared, ruleset=ruleset)
            ruleset = None  # enforced and closed
        else:
            mounts.enter_namespace(work_dir)
            set_limits(policy.limits)
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


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _child(
    ready: _Ready,
    policy: Policy,
    argv: list[str],
    stdio: list[int],
    status: int,
    ruleset: int | None,
) -> None:
    """In the spare, once its call came: stdio in place, the rest of the policy applied,
    tool executed. Never returns. With ``ruleset`` (started ahead, the stores still to
    attach): ``policy.apply``; without (the spare was confined ahead by
    ``policy.confine``): only its last step, the seccomp filter.

    Kept to system calls: the signal dispositions need no reset (the launcher catches
    rather than ignores, and exec resets caught signals), everything else was prepared.
    Errors before the seccomp filter is loaded go to the status pipe; an exec failure
    (after it) can only be told on stderr, with exit status 127.
    """
    try:
        # stdin, stdout, stderr to 0, 1, 2 without clobbering one with another; every
        # other fd (store dirs, the status pipe, the prepared rule paths, the binary) is
        # already close-on-exec, and made so again here, wholesale.
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in stdio]
        for target, fd in enumerate(moved):
            os.dup2(fd, target, inheritable=True)
        if _libc.syscall(_SYS_CLOSE_RANGE, 3, ctypes.c_uint(0xFFFFFFFF), _CLOSE_RANGE_CLOEXEC):
            raise OSError(ctypes.get_errno(), "close_range(CLOEXEC)")
        if ruleset is None:
            load_seccomp(ready.prepared.seccomp)
        else:
            apply(policy, ready.prepared, ruleset=ruleset, in_namespace=True, limits_set=True)
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


def remove_stale_work_dirs(parent: str) -> list[str]:
    """Remove the work directories (``memfs-jail-PID-XXXX``, root's) of launchers that
    are gone, e.g. killed by SIGKILL; returns their paths. A pid that is alive again
    (reused) keeps its directory: it is empty, and removed once that pid is gone."""
    removed = []
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            found = _WORK_DIR_NAME.fullmatch(entry.name)
            if found is None or int(found.group(1)) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
                    continue
                if _alive(int(found.group(1))):
                    continue
                shutil.rmtree(entry.path)
                removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _prepare_tools(specs: Mapping[str, Any], seccomp_code: bytes) -> dict[str, _Ready]:
    tools: dict[str, _Ready] = {}
    try:
        for name, spec in specs.items():
            tool = Tool.from_json(spec)
            prepared = prepare(tool.policy, seccomp_code)
            try:
                exe = os.open(tool.exe, os.O_PATH | os.O_CLOEXEC)
            except BaseException:
                prepared.close()
                raise
            tools[name] = _Ready(tool, prepared, exe, dict(tool.env))
    except BaseException:
        for ready in tools.values():
            ready.prepared.close()
            os.close(ready.exe)
        raise
    return tools


def _hello(control: socket.socket) -> tuple[dict[str, _Ready], str]:
    data = control.recv(MAX_MESSAGE)
    message = json.loads(data)
    tools = _prepare_tools(message["tools"], base64.b64decode(message["seccomp"]))
    # Once for all children (they inherit it), rather than ~40 prctl calls in each.
    privileges.drop_bounding_set()
    for ready in tools.values():
        ready.prepared = dataclasses.replace(ready.prepared, capabilities=range(0))
    parent = message.get("work_dir") or tempfile.gettempdir()
    remove_stale_work_dirs(parent)
    work_dir = tempfile.mkdtemp(prefix=f"{WORK_DIR_PREFIX}{os.getpid()}-", dir=parent)
    os.chmod(work_dir, 0o711)
    return tools, work_dir


def _ignore(signum: int, frame: object) -> None:
    """Caught, not ignored: exec resets a caught signal to its default in the tool."""


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    # The daemon's Ctrl-C is not for us; SIGPIPE/SIGXFSZ must not kill us. Python
    # ignores the last two (SIG_IGN, which exec would pass on to the tools).
    for signum in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, _ignore)
    for fd in (0, 1, 2):  # so that no received fd ever gets one of these numbers
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)
    work_dir = None
    try:
        tools, work_dir = _hello(control)
        abi = next(iter(tools.values())).prepared.abi if tools else 0
        control.send(json.dumps({"ok": True, "abi": abi, "pid": os.getpid()}).encode())
    except Exception as error:
        with contextlib.suppress(OSError):
            control.send(json.dumps({"ok": False, "error": f"{error}"}).encode())
        if work_dir is not None:
            shutil.rmtree(work_dir, ignore_errors=True)
        sys.exit(1)
    try:
        Launcher(control, tools, work_dir).run()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
