"""The launcher: a small warm process that forks, confines and execs each tool.

``Jail.start`` runs :func:`main` once, in a new Python process, passing it FD: one end
of a SOCK_SEQPACKET socketpair, over which the client and the launcher talk as told in
``jail.wire``. This module is the process's entry point and setup (the hello: tools
prepared, work directory made); then ``jail.launcher_loop`` serves the calls, each
handed to a spare child forked ahead (``jail.spares``), which confines itself and
execs the tool (``jail.spare_child``).

It needs no privilege: it runs under an unprivileged uid (the daemon's own, or the
jail's user when started by root, see ``jail.spawn``), gives up any capability it
was started with, and is not dumpable (no process of its uid may ptrace it or read
its memory and fds). At the hello it receives the jail's namespaces
(``jail.userns``, made by the daemon's process), in which its children make their
private views.

The launcher is single-threaded (so forking it is safe), never runs tool code itself,
and imports as little as possible (no pydantic): a fork costs more the bigger the
process. Everything that does not depend on the call is prepared once, so the forked
child only makes the system calls of the policy before ``execve``; the files the
policies name come opened from the daemon, which may reach paths this uid may not.
Children die with the launcher (PR_SET_PDEATHSIG), and its work directory, always
empty, is named after its pid: a later launcher removes those of dead launchers.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from memfs.jail import kernel, privileges, userns
from memfs.jail.launcher_loop import Launcher
from memfs.jail.policy import Opened, prepare
from memfs.jail.spare_child import Ready
from memfs.jail.wire import MAX_FDS, MAX_MESSAGE, Tool

WORK_DIR_PREFIX = "memfs-jail-"
_WORK_DIR_NAME = re.compile(r"memfs-jail-([0-9]+)-[A-Za-z0-9_]+")


def remove_stale_work_dirs(parent: str) -> list[str]:
    """Remove the work directories (``memfs-jail-PID-XXXX``, of this uid) of launchers
    that are gone, e.g. killed by SIGKILL; returns their paths. A pid that is alive
    again (reused) keeps its directory: it is empty, and removed once that pid is gone."""
    removed = []
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            found = _WORK_DIR_NAME.fullmatch(entry.name)
            if found is None or int(found.group(1)) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
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


def _prepare_tools(
    specs: Mapping[str, Any], seccomp_code: bytes, fds: list[int],
    namespaces: userns.Namespaces, level: kernel.Level,
) -> dict[str, Ready]:
    """Each tool of the hello, prepared; ``fds`` are, tool after tool, its binary then
    the files its policy names (``Opened.fds``), as the daemon opened them."""
    tools: dict[str, Ready] = {}
    taken = 0
    try:
        for name, spec in specs.items():
            tool = Tool.from_json(spec)
            exe, first = fds[taken], taken + 1
            taken = first + Opened.count(tool.policy)
            opened = Opened.from_fds(tool.policy, fds[first:taken])
            prepared = prepare(tool.policy, seccomp_code, opened=opened, namespaces=namespaces,
                               level=level)
            if tool.policy.chroot is None:
                # rg's children join the jail's namespace on their call's path, which
                # gives them a full bounding set. They keep it (emptying it takes 41
                # system calls, a tenth of a millisecond): it can give them nothing, as
                # their exec gains no capability (no_new_privs ignores file
                # capabilities, and root, the one uid an exec gives capabilities to, is
                # not mapped in the namespace), and seccomp refuses capset and prctl.
                # sed's spare, confined ahead of its call, empties it.
                prepared = dataclasses.replace(prepared, capabilities=range(0))
            tools[name] = Ready(tool, prepared, exe, dict(tool.env))
        if taken != len(fds):
            raise ValueError("wrong number of file descriptors in the hello")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return tools


def _hello(control: socket.socket) -> tuple[dict[str, Ready], str]:
    data, fds, _flags, _addr = socket.recv_fds(
        control, MAX_MESSAGE, MAX_FDS, socket.MSG_CMSG_CLOEXEC
    )
    try:
        message = json.loads(data)
        level = kernel.level_from(message["level"])
        if len(fds) < 2:
            raise ValueError("the hello brings no namespaces")
        namespaces = userns.Namespaces(fds[-2], fds[-1])
        fds = fds[:-2]
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    tools = _prepare_tools(message["tools"], base64.b64decode(message["seccomp"]), fds,
                           namespaces, level)
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
        privileges.start_unprivileged()
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
