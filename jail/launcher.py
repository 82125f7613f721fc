"""The launcher: a small warm root process that forks, confines and execs each tool.

``Jail.start`` runs :func:`main` once, in a new Python process, passing it FD: one end
of a SOCK_SEQPACKET socketpair. Messages are JSON; file descriptors travel with
SCM_RIGHTS:

1. hello (client -> launcher): ``{"tools": {"rg": Tool, "sed": Tool}, "work_dir": ...}``;
   the launcher compiles the seccomp filter, checks Landlock and answers
   ``{"ok": true, "abi": N}`` or ``{"ok": false, "error": "..."}``.
2. each call (client -> launcher): ``{"tool": "rg", "argv": [...], "stores": [names]}``
   with fds ``[reply socket, stdin, stdout, stderr, store dir fds...]``. The launcher
   forks a child that puts the fds in place, applies the policy and execs the tool.
   When the child is reaped it sends one JSON reply on the reply socket:
   ``{"status": "exited", "code": N}``, ``"signaled"`` (+``signal``), ``"timeout"``,
   ``"cancelled"`` or ``"failed"`` (+``error``, the policy could not be applied).
   If the client shuts the reply socket down (output limit, gave up), the child is
   killed. When the control socket closes, every child is killed and the launcher exits.

The launcher is single-threaded (so forking it is safe) and never runs tool code
itself; all per-call work beyond the fork happens in the child.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from jail import landlock, seccomp
from jail.policy import Policy, apply

MAX_MESSAGE = 1 << 20
MAX_FDS = 250
FIRST_STORE_FD = 3  # store i is fd 3 + i in the child; its symlink is /proc/self/fd/3+i
EXEC_FAILED = 127  # child exit status when the tool could not be executed


class Tool(BaseModel):
    """How to run one tool: its binary (host path), environment and base policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exe: str
    env: dict[str, str]
    policy: Policy


@dataclass
class _Job:
    pid: int
    pidfd: int
    reply: socket.socket
    status_read: int
    deadline: float
    folder: str | None
    ended: str | None = None  # "timeout" or "cancelled" once we killed it


class Launcher:
    """The event loop: requests in, children out, replies when they are reaped."""

    def __init__(self, control: socket.socket, tools: dict[str, Tool], work_dir: str) -> None:
        self.control = control
        self.tools = tools
        self.work_dir = work_dir
        self.selector = selectors.DefaultSelector()
        self.jobs: dict[int, _Job] = {}  # by pidfd
        self.counter = itertools.count()

    def run(self) -> None:
        self.selector.register(self.control, selectors.EVENT_READ, None)
        try:
            while True:
                now = time.monotonic()
                deadlines = [job.deadline for job in self.jobs.values() if job.ended is None]
                timeout = max(0.0, min(deadlines) - now) if deadlines else None
                for key, _ in self.selector.select(timeout):
                    job: _Job | None = key.data
                    if job is None:
                        if not self.on_request():
                            return
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
            request = json.loads(data)
            tool = self.tools[request["tool"]]
            stores = [str(name) for name in request["stores"]]
            if len(fds) != 4 + len(stores):
                raise ValueError("wrong number of file descriptors")
            argv = [str(a) for a in request["argv"]]
            folder = self.make_folder(stores) if stores else None
        except (OSError, ValueError, KeyError, TypeError) as error:
            self.reply_now(fds, {"status": "failed", "error": f"bad request: {error}"})
            return True
        try:
            self.start(tool, argv, folder, len(stores), fds)
        except OSError as error:  # fork failed (EAGAIN, ENOMEM): this call fails, not us
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            self.reply_now(fds, {"status": "failed", "error": f"cannot fork: {error}"})
        return True

    def reply_now(self, fds: list[int], message: dict[str, object]) -> None:
        if fds:
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fds[0])) as reply:
                reply.send(json.dumps(message).encode())
        for fd in fds:
            os.close(fd)

    def start(
        self, tool: Tool, argv: list[str], folder: str | None, n_stores: int, fds: list[int]
    ) -> None:
        policy = tool.policy
        if folder is not None:
            store_fds = tuple(range(FIRST_STORE_FD, FIRST_STORE_FD + n_stores))
            policy = policy.model_copy(update={"cwd": folder, "read_fds": store_fds})
        status_read, status_write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(status_read)
            os.close(status_write)
            raise
        if pid == 0:  # child: never returns
            _child(tool, policy, argv, fds[1:], status_write)
        os.close(status_write)
        reply = socket.socket(fileno=fds[0])
        for fd in fds[1:]:
            os.close(fd)
        job = _Job(
            pid=pid,
            pidfd=os.pidfd_open(pid),
            reply=reply,
            status_read=status_read,
            deadline=time.monotonic() + policy.timeout_seconds,
            folder=folder,
        )
        self.jobs[job.pidfd] = job
        self.selector.register(job.pidfd, selectors.EVENT_READ, job)
        self.selector.register(reply, selectors.EVENT_READ, job)

    def make_folder(self, stores: list[str]) -> str:
        """The throwaway folder rg runs in: ``NAME -> /proc/self/fd/N`` per store, where
        fd N is the store's directory, opened by the daemon and inherited by rg."""
        for name in stores:
            if name in ("", ".", "..") or "/" in name or "\0" in name:
                raise ValueError(f"bad store name {name!r}")
        folder = os.path.join(self.work_dir, f"call-{next(self.counter)}")
        os.mkdir(folder, 0o700)
        try:
            for i, name in enumerate(stores):
                os.symlink(f"/proc/self/fd/{FIRST_STORE_FD + i}", os.path.join(folder, name))
            os.chmod(folder, 0o711)  # the jailed uid may look names up, not list or write
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder

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
        self.remove_folder(job)  # before replying: the caller may look right away
        with contextlib.suppress(OSError):
            job.reply.send(json.dumps(reply).encode())
        self.cleanup(job)

    def cleanup(self, job: _Job) -> None:
        for fileobj in (job.pidfd, job.reply):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fileobj)
        del self.jobs[job.pidfd]
        os.close(job.pidfd)
        os.close(job.status_read)
        job.reply.close()
        self.remove_folder(job)

    def remove_folder(self, job: _Job) -> None:
        if job.folder is not None:
            shutil.rmtree(job.folder, ignore_errors=True)
            job.folder = None


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _child(tool: Tool, policy: Policy, argv: list[str], fds: list[int], status: int) -> None:
    """In the forked child: fds in place, policy applied, tool executed. Never returns.

    ``fds`` are stdin, stdout, stderr, then the store directories. Errors before the
    seccomp filter is loaded go to the status pipe; an exec failure (after it) can only
    be told on stderr, with exit status 127.
    """
    try:
        os.setsid()  # own process group: the launcher kills the whole group
        for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)  # Python ignores some: exec keeps that
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        # Move fds to 0, 1, 2, 3.. (status last) without clobbering one with another.
        sources = [*fds, status]
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, len(sources)) for fd in sources]
        for target, fd in enumerate(moved):
            os.dup2(fd, target, inheritable=target < len(fds))
        status = len(fds)
        os.closerange(status + 1, os.sysconf("SC_OPEN_MAX"))
        exe = os.open(tool.exe, os.O_PATH | os.O_CLOEXEC)  # exec by fd: no path lookup
        apply(policy)
    except BaseException as error:  # report anything, then die without cleanup
        with contextlib.suppress(BaseException):
            os.write(status, f"{type(error).__name__}: {error}".encode())
        os._exit(EXEC_FAILED)
    try:
        os.execve(exe, argv, tool.env)
    except BaseException as error:
        with contextlib.suppress(BaseException):
            os.write(2, f"memfs-jail: cannot execute {tool.exe}: {error}\n".encode())
    os._exit(EXEC_FAILED)


def _hello(control: socket.socket) -> tuple[dict[str, Tool], str]:
    data = control.recv(MAX_MESSAGE)
    message = json.loads(data)
    tools = {name: Tool.model_validate(spec) for name, spec in message["tools"].items()}
    parent = message.get("work_dir") or tempfile.gettempdir()
    work_dir = tempfile.mkdtemp(prefix="memfs-jail-", dir=parent)
    os.chmod(work_dir, 0o711)
    return tools, work_dir


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon's Ctrl-C is not for us
    work_dir = None
    try:
        tools, work_dir = _hello(control)
        abi = landlock.abi_version()
        if abi < 1:
            raise OSError(0, "Landlock is not available on this kernel (or not enabled)")
        seccomp.compiled_filter()  # compile once, before any fork
        control.send(json.dumps({"ok": True, "abi": abi}).encode())
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
