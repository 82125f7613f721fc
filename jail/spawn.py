"""Starting a launcher process (``jail.launcher``) and handing it the tools: rg and sed
with their base policies, built from the settings, and the files they name, opened
here (the launcher's uid may not reach them: the sed root is under the daemon's
state directory)."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from memfs.jail import binaries, kernel, seccomp, userns
from memfs.jail.errors import JailUnavailable
from memfs.jail.policy import Limits, Policy, open_paths
from memfs.jail.settings import JailSettings
from memfs.jail.wire import Tool

_ENV = {"PATH": "/nonexistent", "LC_ALL": "C.UTF-8"}
_LAUNCHER_MAIN = "from memfs.jail.launcher import main; main()"


def spawn_launcher(
    settings: JailSettings, tools: dict[str, Tool], level: kernel.Level,
    namespaces: userns.Namespaces,
) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """Start a launcher process and hand it the tools, the ``level`` the jail runs at
    and the jail's ``namespaces`` (owned by the launcher's uid; the caller keeps its
    fds); raises JailUnavailable.

    The launcher runs under this process's uid, or, if this process is root, under
    ``settings.uid``/``gid`` with no supplementary group: the jail never holds a
    privilege, whoever starts it."""
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # where `import memfs` finds this package: not resolve()d, as in a checkout memfs/jail
    # is a symlink to the top folder jail/ (site-packages/memfs/jail once installed)
    package_parent = str(Path(__file__).absolute().parents[2])
    identity: dict[str, Any] = {}
    if os.geteuid() == 0:
        identity = {"user": settings.uid, "group": settings.gid, "extra_groups": []}
    uid = identity.get("user", os.geteuid())
    cannot = (f"as uid {uid}: it must be able to run {sys.executable} and read the jail "
              f"package in {package_parent}")
    with theirs:
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _LAUNCHER_MAIN, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env={"PYTHONPATH": package_parent, "PATH": os.defpath},
                stdin=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,  # terminal signals are not for the launcher
                **identity,
            )
        except OSError as error:
            control.close()
            raise JailUnavailable(f"cannot start the jail launcher {cannot}: {error}") from error
    files: list[int] = []
    try:
        hello = {
            "tools": {name: tool.to_json() for name, tool in tools.items()},
            "work_dir": str(settings.work_dir) if settings.work_dir else None,
            "seccomp": base64.b64encode(
                seccomp.compiled_filter(level.namespaces)).decode("ascii"),
            "level": dataclasses.asdict(level),
        }
        for tool in tools.values():
            files.append(os.open(tool.exe, os.O_PATH | os.O_CLOEXEC))
            files += open_paths(tool.policy).fds()
        # dup'ed: the fds sent are closed here, the caller keeps its namespaces
        files += [os.dup(fd) for fd in namespaces.fds()]
        socket.send_fds(control, [json.dumps(hello).encode()], files)
        control.settimeout(30)
        answer = json.loads(control.recv(65536) or b"{}")
        control.settimeout(None)
        if not answer.get("ok"):
            raise JailUnavailable(
                f"jail launcher: {answer.get('error', f'no answer (it runs {cannot})')}"
            )
    except BaseException as error:
        control.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if isinstance(error, OSError | ValueError):
            raise JailUnavailable(f"jail launcher: {error}") from error
        raise
    finally:
        for fd in files:
            os.close(fd)
    return control, process


def base_tools(settings: JailSettings) -> dict[str, Tool]:
    """The rg and sed tools with their base policies (stores are added per call)."""
    limits = Limits(
        cpu_seconds=settings.cpu_seconds,
        address_space_bytes=settings.memory_bytes,
    )

    def policy(**specific: Any) -> Policy:
        return Policy(
            limits=limits,
            timeout_seconds=settings.timeout_seconds,
            die_with_parent=True,
            **specific,
        )

    rg_path = settings.rg_path.resolve()
    rg = binaries.needs(rg_path)
    rg_exec = [str(rg_path)] + ([rg.loader] if rg.loader else [])
    rg_policy = policy(
        read_paths=(*rg.libraries, *(["/etc/ld.so.cache"] if rg.loader else [])),
        exec_paths=tuple(rg_exec),
    )
    sed_root = settings.sed_root.resolve()
    sed = binaries.check_sed_root(sed_root, settings.sed_path)
    sed_exec = [binaries.SED_IN_ROOT] + ([sed.loader] if sed.loader else [])
    sed_policy = policy(
        chroot=str(sed_root),
        read_paths=(*sed.libraries, binaries.LOCALE_IN_ROOT),
        exec_paths=tuple(sed_exec),
    )
    return {
        "rg": Tool(exe=str(rg_path), env=_ENV, policy=rg_policy),
        "sed": Tool(
            exe=str(sed_root / binaries.SED_IN_ROOT.lstrip("/")), env=_ENV, policy=sed_policy
        ),
    }
