"""The public face of the jail: ``Jail.start``, ``search``, ``sed``, ``close``.

Calls are synchronous and thread-safe; each one costs a fork of the warm launcher
process (see ``jail.launcher``) plus the tool's own run. If the launcher dies (killed,
crashed), the next call starts a new one, once, and goes on; a call that was running
in the dead launcher fails with JailError.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from jail import binaries, landlock, rg_args, seccomp, sed_script
from jail.errors import BadArguments, JailError, JailLimit, JailUnavailable, ToolFailed
from jail.launcher import EXEC_FAILED, MAX_FDS, Tool
from jail.policy import Limits, Policy
from jail.settings import JailSettings

_GRACE_SECONDS = 5.0  # how long past the timeout we wait for the launcher's verdict
_ENV = {"PATH": "/nonexistent", "LC_ALL": "C.UTF-8"}
_LAUNCHER_MAIN = "from jail.launcher import main; main()"
_SANDBOX_REFUSAL = "commands disabled in sandbox mode"


@dataclass(frozen=True)
class SearchResult:
    """What rg printed. ``exit_code`` is rg's: 0 matches, 1 no match, 2 some error
    (then ``stderr`` says which, and ``output`` has what was found anyway). When the
    output exceeded the limit it is cut at a line end, ``truncated`` is True and a
    last line says so."""

    output: bytes
    exit_code: int
    truncated: bool
    stderr: str


@dataclass
class _Run:
    """The raw outcome of one jailed run."""

    reply: dict[str, Any]
    stdout: bytes
    stderr: str
    over_limit: bool


class Jail:
    """Runs rg and sed under the policy, through one launcher process."""

    def __init__(
        self,
        settings: JailSettings,
        control: socket.socket,
        process: subprocess.Popen[bytes],
        tools: dict[str, Tool] | None = None,
    ) -> None:
        """Use :meth:`start`."""
        self.settings = settings
        self._control = control
        self._process = process
        self._tools = tools or {}
        self._send_lock = threading.Lock()
        self._life_lock = threading.Lock()  # (re)starting and closing the launcher
        self._closed = False
        self.restarts = 0  # launchers started after the first one
        # rg's own default is one thread per CPU (at most 12); ours is capped too.
        self._threads = max(1, min(settings.max_threads, len(os.sched_getaffinity(0))))

    # -- life cycle -------------------------------------------------------------------

    @classmethod
    def start(cls, settings: JailSettings) -> Jail:
        """Check the kernel and the tools, start the launcher and try both tools once.

        Raises JailUnavailable with the reason when Landlock or seccomp is missing, the
        process is not root, rg is missing, or the sed root is missing or unsafe (it is
        not built here: run ``scripts/build-sed-jail SED_ROOT`` first).
        """
        if os.geteuid() != 0:
            raise JailUnavailable("the jail needs root (chroot, setuid) to start")
        abi = landlock.abi_version()
        if abi < 1:
            raise JailUnavailable(
                "Landlock is not available on this kernel (needs Linux >= 5.13 with "
                "landlock in the lsm= list); refusing to run rg and sed unconfined"
            )
        if not _seccomp_available():
            raise JailUnavailable("seccomp filters are not available on this kernel")
        tools = _tools(settings)
        control, process = _spawn_launcher(settings, tools)
        jail = cls(settings, control, process, tools)
        try:
            jail._self_test()
        except BaseException:
            jail.close()
            raise
        return jail

    @property
    def launcher_pid(self) -> int:
        """The pid of the current launcher process."""
        return self._process.pid

    def _ensure_launcher(self, failed: subprocess.Popen[bytes] | None = None) -> None:
        """Start a new launcher if the current one is dead (or is ``failed``, which the
        caller found unreachable). Raises JailError if the jail is closed, or the new
        launcher does not start."""
        with self._life_lock:
            if self._closed:
                raise JailError("the jail is closed")
            current = self._process
            if current.poll() is None and current is not failed:
                return
            if failed is not None and current is not failed:
                return  # another thread replaced it already
            with contextlib.suppress(OSError):
                self._control.close()
            if current.poll() is None:
                current.kill()
            current.wait()
            try:
                control, process = _spawn_launcher(self.settings, self._tools)
            except JailError:
                raise
            except Exception as error:
                raise JailError(f"cannot restart the jail launcher: {error}") from error
            self._control, self._process = control, process
            self.restarts += 1

    def _self_test(self) -> None:
        try:
            out = self.sed(["s/h.l/X/"], "h\u00e9llo\n".encode())
            version = self._run("rg", ["rg", "--version"], [], {}, None, 65536)
        except JailError as error:
            raise JailUnavailable(f"the jailed tools do not work: {error}") from error
        if out != b"Xlo\n":
            raise JailUnavailable(f"jailed sed is broken (UTF-8 locale?): got {out!r}")
        if version.reply != {"status": "exited", "code": 0}:
            raise JailUnavailable(f"jailed rg does not run: {version.reply} {version.stderr}")

    def close(self) -> None:
        """Stop the launcher (it kills any tool still running). Idempotent."""
        with self._life_lock:
            if self._closed:
                return
            self._closed = True
            self._control.close()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> Jail:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the two tools ----------------------------------------------------------------

    def search(
        self,
        stores: Mapping[str, Path],
        args: Sequence[str],
        *,
        known: Collection[str] | None = None,
    ) -> SearchResult:
        """Run ripgrep with the user's ``args`` over ``stores`` (name -> directory; only
        the stores the agent may read). Output paths read ``STORE/PATH``.

        ``known`` (every store there is, readable or not) tells a path naming a store
        that exists but is not readable (StoreNotReadable, a BadArguments) from one
        naming no store at all (BadArguments); the arguments are parsed once, here.

        Raises BadArguments (refused flag or path), JailLimit (timeout, CPU, memory),
        ToolFailed (rg error with no output at all), JailError (launcher gone).
        """
        if not stores and known is None:
            return SearchResult(b"", 1, False, "")
        for name in stores:
            if name in ("", ".", "..") or "/" in name or "\0" in name:
                raise BadArguments(f"bad store name {name!r}")
        command = rg_args.parse(
            args, stores, self.settings.max_threads, default_threads=self._threads, known=known
        )
        if not command.stores:
            return SearchResult(b"", 1, False, "")
        if len(command.stores) > MAX_FDS - 5:
            raise BadArguments(f"too many stores in one search (at most {MAX_FDS - 5})")
        limit = self.settings.output_limit_bytes
        run = self._run("rg", ["rg", *command.argv], command.stores, stores, None, limit)
        return _search_result(run, limit, self.settings.timeout_seconds)

    def sed(self, scripts: Sequence[str], data: bytes) -> bytes:
        """Return the output of ``sed --sandbox -e S1 -e S2 ...`` on ``data``.

        Raises BadArguments (refused script, or sed's own error, quoted), JailLimit
        (timeout, CPU, memory, output over ``sed_output_limit``), ToolFailed, JailError.
        """
        sed_script.check(scripts)
        argv = ["sed", "--sandbox"]
        for script in scripts:
            argv += ["-e", script]
        limit = self.settings.sed_output_limit
        run = self._run("sed", argv, (), {}, data, limit)
        return _sed_output(run, limit, self.settings.timeout_seconds)

    # -- one run ----------------------------------------------------------------------

    def _run(
        self,
        tool: str,
        argv: list[str],
        names: Sequence[str],
        stores: Mapping[str, Path],
        stdin: bytes | None,
        limit: int,
    ) -> _Run:
        """Send one request to the launcher, feed stdin, collect stdout (up to ``limit``:
        past it the tool is stopped and ``over_limit`` set), stderr and the verdict."""
        self._ensure_launcher()
        reply_sock, reply_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        mine = [stdin_w, stdout_r, stderr_r]
        theirs = [reply_theirs.detach(), stdin_r, stdout_w, stderr_w]
        try:
            for name in names:
                theirs.append(_open_store(name, stores[name]))
            request = json.dumps({"tool": tool, "argv": argv, "stores": list(names)}).encode()
            self._send(request, theirs)
        except BaseException:
            for fd in mine:
                os.close(fd)
            reply_sock.close()
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        with reply_sock:
            stdout, stderr, over = self._pump(mine, stdin, limit, reply_sock)
            reply = self._verdict(reply_sock)
        return _Run(reply, stdout, stderr.decode("utf-8", "replace"), over)

    def _send(self, request: bytes, fds: list[int]) -> None:
        """Send one request; if the launcher turns out to be gone (the request was not
        delivered), start a new one and send it there, once."""
        for attempt in (1, 2):
            process = self._process
            try:
                with self._send_lock:
                    socket.send_fds(self._control, [request], fds)
                return
            except OSError as error:
                if attempt == 2:
                    raise JailError(f"the jail launcher is gone: {error}") from error
                self._ensure_launcher(failed=process)

    def _pump(
        self, fds: list[int], stdin: bytes | None, limit: int, reply_sock: socket.socket
    ) -> tuple[bytes, bytes, bool]:
        """Feed stdin and drain stdout/stderr concurrently until both reach EOF (the
        tool exited or was killed). Closes the three fds."""
        stdin_w, stdout_r, stderr_r = fds
        out = bytearray()
        err = bytearray()
        over = False
        pending = memoryview(stdin or b"")
        deadline = time.monotonic() + self.settings.timeout_seconds + _GRACE_SECONDS
        selector = selectors.DefaultSelector()
        open_fds = set(fds)

        def done_with(fd: int) -> None:
            selector.unregister(fd)
            os.close(fd)
            open_fds.discard(fd)

        try:
            if pending:
                os.set_blocking(stdin_w, False)
                selector.register(stdin_w, selectors.EVENT_WRITE)
            else:
                os.close(stdin_w)
                open_fds.discard(stdin_w)
            selector.register(stdout_r, selectors.EVENT_READ)
            selector.register(stderr_r, selectors.EVENT_READ)
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise JailError("the jail launcher did not stop the tool in time")
                for key, _ in selector.select(remaining):
                    fd = int(key.fd)
                    if fd == stdin_w:
                        try:
                            pending = pending[os.write(stdin_w, pending[:65536]) :]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:  # the tool stopped reading: fine
                            pending = memoryview(b"")
                        if not pending:
                            done_with(stdin_w)
                        continue
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        done_with(fd)
                    elif fd == stderr_r:
                        err += chunk[: max(0, self.settings.stderr_limit_bytes - len(err))]
                    elif not over:
                        out += chunk
                        if len(out) > limit:
                            over = True  # more than we keep: have the launcher kill it
                            with contextlib.suppress(OSError):
                                reply_sock.shutdown(socket.SHUT_WR)
        finally:
            selector.close()
            for fd in open_fds:
                os.close(fd)
        return bytes(out), bytes(err), over

    def _verdict(self, reply_sock: socket.socket) -> dict[str, Any]:
        reply_sock.settimeout(self.settings.timeout_seconds + _GRACE_SECONDS)
        try:
            data = reply_sock.recv(65536)
        except (TimeoutError, OSError) as error:
            raise JailError(f"no answer from the jail launcher: {error}") from error
        if not data:
            raise JailError("the jail launcher is gone")
        reply: dict[str, Any] = json.loads(data)
        return reply


# -- helpers ----------------------------------------------------------------------------


def _seccomp_available() -> bool:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_get_seccomp = 21
    return int(libc.prctl(pr_get_seccomp, 0, 0, 0, 0)) >= 0


def _spawn_launcher(
    settings: JailSettings, tools: dict[str, Tool]
) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """Start a launcher process and hand it the tools; raises JailUnavailable."""
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    package_parent = str(Path(__file__).resolve().parent.parent)
    with theirs:
        process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER_MAIN, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env={"PYTHONPATH": package_parent, "PATH": os.defpath},
            stdin=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,  # terminal signals are not for the launcher
        )
    try:
        hello = {
            "tools": {name: tool.to_json() for name, tool in tools.items()},
            "work_dir": str(settings.work_dir) if settings.work_dir else None,
            "seccomp": base64.b64encode(seccomp.compiled_filter()).decode("ascii"),
        }
        control.send(json.dumps(hello).encode())
        control.settimeout(30)
        answer = json.loads(control.recv(65536) or b"{}")
        control.settimeout(None)
        if not answer.get("ok"):
            raise JailUnavailable(f"jail launcher: {answer.get('error', 'no answer')}")
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
    return control, process


def _tools(settings: JailSettings) -> dict[str, Tool]:
    """The rg and sed tools with their base policies (stores are added per call)."""
    limits = Limits(
        cpu_seconds=settings.cpu_seconds,
        address_space_bytes=settings.memory_bytes,
    )

    def policy(**specific: Any) -> Policy:
        return Policy(
            uid=settings.uid,
            gid=settings.gid,
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


def _open_store(name: str, path: Path) -> int:
    """Open a store directory as an O_PATH handle, refusing a symlinked store root."""
    try:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise JailError(f"cannot open store {name!r} at {path}: {error.strerror}") from error


def _common_failures(run: _Run, tool: str, timeout: float) -> None:
    """Raise for the outcomes that mean the same for rg and sed."""
    reply = run.reply
    status = reply.get("status")
    if status == "failed":
        raise JailError(f"could not start {tool} in the jail: {reply.get('error')}")
    if status == "timeout":
        raise JailLimit(f"{tool} took longer than {timeout:g} s and was stopped")
    if status == "signaled" and reply.get("signal") in (signal.SIGXCPU, signal.SIGKILL):
        raise JailLimit(f"{tool} used up its CPU time and was stopped")
    memory = ("memory allocation", "memory exhausted", "couldn't re-allocate memory")
    failed = status != "exited" or reply.get("code") != 0
    if failed and any(text in run.stderr for text in memory):
        raise JailLimit(f"{tool} ran out of memory: {run.stderr.strip()}")
    if status == "exited" and reply.get("code") == EXEC_FAILED:
        raise JailError(f"could not run {tool}: {run.stderr.strip()}")


def _search_result(run: _Run, limit: int, timeout: float) -> SearchResult:
    if run.over_limit:
        # We stopped rg ourselves; whatever its status, the output stands.
        cut = run.stdout[:limit]
        if b"\n" in cut:
            cut = cut[: cut.rindex(b"\n") + 1]
        note = f"[memfs: output truncated at {limit} bytes]\n".encode()
        return SearchResult(cut + note, 0, True, run.stderr)
    _common_failures(run, "rg", timeout)
    reply = run.reply
    if reply.get("status") != "exited":
        raise ToolFailed(f"rg was killed by signal {reply.get('signal')}", None, run.stderr)
    code = int(reply["code"])
    if code == 2 and not run.stdout:
        raise ToolFailed(f"rg failed: {run.stderr.strip()}", code, run.stderr)
    if code not in (0, 1, 2):
        raise ToolFailed(f"rg exited with status {code}: {run.stderr.strip()}", code, run.stderr)
    return SearchResult(run.stdout, code, False, run.stderr)


def _sed_output(run: _Run, limit: int, timeout: float) -> bytes:
    if run.over_limit:
        raise JailLimit(f"sed output exceeds {limit} bytes")
    _common_failures(run, "sed", timeout)
    reply = run.reply
    if reply.get("status") != "exited":
        raise ToolFailed(f"sed was killed by signal {reply.get('signal')}", None, run.stderr)
    code = int(reply["code"])
    stderr = run.stderr.strip()
    if code == 0:
        return run.stdout
    if code == 1 and _SANDBOX_REFUSAL in stderr:
        raise BadArguments(
            "sed script uses a command that runs a program or reads or writes a file "
            f"(e, r, R, w, W, s///e, s///w): not allowed; sed said: {stderr}"
        )
    # Script errors exit with 1, except a jump to a missing label (4).
    if code == 1 or (code == 4 and "can't find label" in stderr):
        raise BadArguments(f"sed rejected the script: {stderr}")
    raise ToolFailed(f"sed exited with status {code}: {stderr}", code, run.stderr)
