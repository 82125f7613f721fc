"""The launcher's spare children, from its side: one per tool, forked ahead of that
tool's next call, so that the fork (and for sed the whole confinement, see
``jail.spare_child``) is off the call's path.

The event loop (``jail.launcher_loop``) takes the spare of each call from here and
replenishes it once the reply is sent (a call that finds none forks on demand);
whatever is still idle when the launcher exits is killed.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
from dataclasses import dataclass

from memfs.jail.spare_child import Ready, spare_main


@dataclass
class Spare:
    """A child forked ahead of the next call of ``tool``, waiting for it on ``sock``."""

    tool: str
    pid: int
    pidfd: int
    sock: socket.socket
    status_read: int


class Spares:
    """The idle spares, by tool; each one's pidfd is watched by the launcher's
    ``selector`` (with the :class:`Spare` as data), which tells :meth:`on_exit`."""

    def __init__(
        self, tools: dict[str, Ready], work_dir: str, selector: selectors.BaseSelector
    ) -> None:
        self.tools = tools
        self.work_dir = work_dir
        self.selector = selector
        self.idle: dict[str, Spare] = {}  # by tool

    def fork(self, tool: str) -> Spare:
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
            spare_main(self.tools, tool, self.work_dir, theirs, status_write)
        theirs.close()
        os.close(status_write)
        return Spare(tool, pid, os.pidfd_open(pid), mine, status_read)

    def replenish(self, *tools: str) -> None:
        """Have a spare of each of ``tools`` (default: every tool) ready for the next
        call (best effort)."""
        for tool in tools or tuple(self.tools):
            if tool in self.idle:
                continue
            try:
                spare = self.fork(tool)
            except OSError:
                return  # the next call forks on demand, and reports the error if any
            self.idle[tool] = spare
            self.selector.register(spare.pidfd, selectors.EVENT_READ, spare)

    def take(self, tool: str) -> Spare:
        spare = self.idle.pop(tool, None)
        if spare is None:
            return self.fork(tool)
        self.selector.unregister(spare.pidfd)
        return spare

    def on_exit(self, spare: Spare) -> None:
        """An idle spare died: forget it; fork another if it was killed by someone, not
        if it failed to confine itself (the next call of its tool forks one on demand,
        which reports the failure; no fork loop)."""
        if self.idle.get(spare.tool) is not spare:
            return  # taken by a call earlier in the same batch of events: not idle
        self.selector.unregister(spare.pidfd)
        del self.idle[spare.tool]
        failed = self.drop(spare)
        if not failed:
            self.replenish(spare.tool)

    def drop(self, spare: Spare) -> str:
        """Kill and reap a spare; returns the failure it reported, if any."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(spare.pidfd, signal.SIGKILL)
        os.waitpid(spare.pid, 0)
        spare.sock.close()
        os.close(spare.pidfd)
        failure = read_all(spare.status_read)
        os.close(spare.status_read)
        return failure

    def drop_all(self) -> None:
        """Kill and reap every idle spare (the launcher is exiting)."""
        for spare in list(self.idle.values()):
            self.drop(spare)


def read_all(fd: int) -> str:
    """What a child wrote on its status pipe (read to EOF): why it failed, if it did."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")
