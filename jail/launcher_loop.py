"""The launcher's event loop: requests in, children out, replies when they are reaped.

Runs in the launcher process (``jail.launcher``), single-threaded, once the hello is
answered; the messages are those of ``jail.wire``.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import time
from dataclasses import dataclass

from memfs.jail.spare_child import Ready
from memfs.jail.spares import Spare, Spares, read_all
from memfs.jail.wire import MAX_FDS, MAX_MESSAGE


@dataclass
class _Job:
    pid: int
    pidfd: int
    reply: socket.socket
    status_read: int
    deadline: float
    tool: str
    ended: str | None = None  # "timeout" or "cancelled" once we killed it
    namespace: int | None = None  # the tool's mount namespace, held (see on_exec)


def _mount_namespace(pid: int) -> int:
    """An fd of the mount namespace of the tool run by child ``pid``: the child's own
    once it has executed the tool; or (below Landlock ABI 6, where the child waits for
    the tool as PID 1 of a PID namespace and stays not dumpable) its only child's."""
    try:
        return os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except PermissionError:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            tool = int(children.read().split()[0])
        return os.open(f"/proc/{tool}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)


class Launcher:
    """The event loop: requests in, children out, replies when they are reaped.

    One child per tool is always forked ahead (its spare, see ``jail.spares``): a call
    hands its fds to the spare of its tool, which goes straight to the part of the
    policy that depends on the call, so the fork (and for sed the whole confinement) is
    not on the call's path. A new spare is forked once the reply is sent (or on demand
    when calls overlap), and is killed with the launcher.
    """

    def __init__(self, control: socket.socket, tools: dict[str, Ready], work_dir: str) -> None:
        self.control = control
        self.tools = tools
        self.work_dir = work_dir
        self.selector = selectors.DefaultSelector()
        self.jobs: dict[int, _Job] = {}  # by pidfd
        self.spares = Spares(tools, work_dir, self.selector)

    def run(self) -> None:
        self.selector.register(self.control, selectors.EVENT_READ, None)
        try:
            self.spares.replenish()
            while True:
                now = time.monotonic()
                deadlines = [job.deadline for job in self.jobs.values() if job.ended is None]
                timeout = max(0.0, min(deadlines) - now) if deadlines else None
                for key, _ in self.selector.select(timeout):
                    job: _Job | Spare | None = key.data
                    if job is None:
                        if not self.on_request():
                            return
                    elif isinstance(job, Spare):
                        self.spares.on_exit(job)
                    elif self.jobs.get(job.pidfd) is not job:
                        continue  # reaped earlier in this same batch of events
                    elif key.fileobj is job.reply:
                        self.on_reply_socket(job)
                    elif key.fileobj == job.status_read:
                        self.on_exec(job)
                    else:
                        self.on_exit(job)
                now = time.monotonic()
                for running in list(self.jobs.values()):
                    if running.ended is None and now >= running.deadline:
                        self.kill(running, "timeout")
        finally:
            self.spares.drop_all()
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
            stores = len(message["stores"])
            if len(fds) != 4 + (stores + 1 if stores else 0):
                raise ValueError("wrong number of file descriptors")
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

    def start(self, request: bytes, tool: str, timeout: float, fds: list[int]) -> None:
        """Hand the call to the spare of ``tool`` (or to a fresh child if it is gone)."""
        for attempt in (1, 2):
            spare = self.spares.take(tool)
            try:
                socket.send_fds(spare.sock, [request], fds[1:])
                break
            except OSError:
                self.spares.drop(spare)  # died in between: once more with a fresh one
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
        self.selector.register(job.status_read, selectors.EVENT_READ, job)

    def on_exec(self, job: _Job) -> None:
        """The child's status pipe is readable: it closed at exec (or the child wrote
        why it failed, left for on_exit to read). Hold the tool's mount namespace (the
        stores or the sed root mounted in it): else the tool's exit unmounts them, on
        the call's path, before its parent is told; here they go when the call is
        cleaned up, after the reply. Only now can it be opened: before its exec, the
        child is not dumpable, as the launcher is not (below Landlock ABI 6 the tool is
        the child's child, see jail.kernel.become_pid_one, and the child stays so)."""
        self.selector.unregister(job.status_read)
        with contextlib.suppress(OSError, ValueError, IndexError):  # gone, or failed early
            job.namespace = _mount_namespace(job.pid)

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
        failure = read_all(job.status_read)
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
        self.spares.replenish(job.tool)  # after the reply: off the path of this call and the next

    def cleanup(self, job: _Job) -> None:
        for fileobj in (job.pidfd, job.reply, job.status_read):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fileobj)
        del self.jobs[job.pidfd]
        os.close(job.pidfd)
        os.close(job.status_read)
        job.reply.close()
        if job.namespace is not None:
            os.close(job.namespace)
