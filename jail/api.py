"""The public face of the jail: ``Jail.start``, ``search``, ``sed``, ``close``.

Calls are synchronous and thread-safe; each one costs a fork of the warm launcher
process (see ``jail.launcher``) plus the tool's own run. If the launcher dies (killed,
crashed), the next call starts a new one, once, and goes on; a call that was running
in the dead launcher fails with JailError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from memfs.jail import kernel, rg_args, sed_script, userns
from memfs.jail.errors import BadArguments, JailError, JailUnavailable, KernelLacks
from memfs.jail.pump import pump, verdict
from memfs.jail.results import Run, SearchResult, search_matches, search_result, sed_output
from memfs.jail.settings import JailSettings
from memfs.jail.slots import FairSlots
from memfs.jail.spawn import base_tools, spawn_launcher
from memfs.jail.wire import MAX_FDS, Tool

__all__ = ["Jail", "SearchResult"]

# rg's JSON messages say more than the matches made of them (absolute offsets, each
# file's statistics, the path again on every line): a structured search lets rg print
# this many times the output limit, then keeps at most the limit of matches.
JSON_OUTPUT_FACTOR = 4


class Jail:
    """Runs rg and sed under the policy, through one launcher process."""

    def __init__(
        self,
        settings: JailSettings,
        control: socket.socket,
        process: subprocess.Popen[bytes],
        tools: dict[str, Tool],
        level: kernel.Level,
        namespaces: userns.Namespaces,
        own_namespaces: bool,
    ) -> None:
        """Use :meth:`start`."""
        self.settings = settings
        # the isolation level it runs at (jail.kernel): the daemon logs its describe()
        self.level = level
        # the jail's namespaces, handed to each launcher, and whether they are ours to
        # close
        self._namespaces, self._own_namespaces = namespaces, own_namespaces
        self._control = control
        self._process = process
        self._tools = tools
        self._send_lock = threading.Lock()
        limit = settings.max_concurrent_runs
        self._runs = None if limit is None else FairSlots(
            limit, per_caller=settings.queue_per_caller, seconds=settings.queue_seconds)
        self._life_lock = threading.Lock()  # (re)starting and closing the launcher
        self._closed = False
        self.restarts = 0  # launchers started after the first one
        # called after every run with (tool, seconds, completed): the daemon's metrics
        self.observer: Callable[[str, float, bool], None] | None = None
        # rg's own default is one thread per CPU (at most 12); ours is capped too.
        self._threads = max(1, min(settings.max_threads, len(os.sched_getaffinity(0))))

    # -- life cycle -------------------------------------------------------------------

    @classmethod
    def start(cls, settings: JailSettings, *, namespaces: userns.Namespaces | None = None
              ) -> Jail:
        """Check the kernel and the tools, start the launcher and try both tools once.

        Needs no privilege: started by root, the jail runs as ``settings.uid``; by any
        other uid, as that uid (see ``jail.spawn``). It runs at the level the kernel
        allows (``jail.kernel``: Landlock best-effort, from ABI 1). Its namespaces:
        ``namespaces`` if given (made by root for this uid with
        ``userns.make(as_ids=...)``, before it gave up root; the caller keeps and closes
        them), else made here (by root for ``settings.uid``; else unprivileged), kept
        for the launchers to come and closed with the jail. Forks once: call it while
        single-threaded.

        Raises KernelLacks, saying what to enable, when Landlock or seccomp is missing
        or user namespaces are refused; JailUnavailable when rg is missing, or the sed
        root is missing or unsafe (it is not built here: run ``scripts/build-sed-jail
        SED_ROOT`` first).
        """
        try:
            level = kernel.detect()
        except ValueError as error:
            raise JailUnavailable(str(error)) from None
        missing = level.missing()
        if missing is not None:
            raise KernelLacks(missing)
        tools = base_tools(settings)
        own = namespaces is None
        if namespaces is None:
            # Made here, by the caller's process: root makes them for the jail's user
            # (where unprivileged user namespaces are refused, root still may); any
            # other uid needs unprivileged ones, which an AppArmor profile of the
            # memfs binary (scripts/install --apparmor) allows on Ubuntu: the
            # launcher, another executable, would not be covered by it.
            as_ids = (settings.uid, settings.gid) if os.geteuid() == 0 else None
            try:
                namespaces = userns.make(as_ids=as_ids, refuse=level.no_userns)
            except userns.Unavailable as error:
                raise KernelLacks(f"search and sed edits are unavailable: {error}") from None
        try:
            control, process = spawn_launcher(settings, tools, level, namespaces)
        except BaseException:
            if own:
                namespaces.close()
            raise
        jail = cls(settings, control, process, tools, level, namespaces, own)
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
                control, process = spawn_launcher(self.settings, self._tools, self.level,
                                                  self._namespaces)
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
            if self._own_namespaces:
                self._namespaces.close()

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
        check: Callable[[str], None] | None = None,
        hidden: Callable[[str], Collection[str]] | None = None,
        mount: str | None = None,
        caller: str = "",
        structured: bool = False,
    ) -> SearchResult:
        """Run ripgrep with the user's ``args`` over ``stores`` (name -> directory; only
        the stores the agent may read). Output paths read ``STORE/PATH``.

        ``structured``: the result holds the matches (rg --json, read by
        jail/rg_json.py) instead of rg's text; the flags that print something else
        (-l, -c, --files...) are refused. rg's own JSON may reach JSON_OUTPUT_FACTOR
        times the output limit; the matches returned stay within the limit.

        ``check`` is called with each path argument as ``STORE[/PATH]`` before rg runs
        and may refuse it by raising (see rg_args.parse); the arguments are parsed
        once, here.
        ``hidden(store)`` gives the paths in a store never to search (planted special
        files, hard links): rg skips them, and a path argument naming one is refused.
        ``mount`` (the configured mount point) is accepted as a path prefix like
        ``/memory``. ``caller`` (the agent) names the queue the run waits in when every
        slot is taken (see jail/slots.py).

        Raises BadArguments (refused flag or path), what ``check`` raises, JailLimit
        (timeout, CPU, memory),
        ToolFailed (rg error with no output at all), JailBusy (too many runs at once,
        past the queue's bounds), JailError (launcher gone).
        """
        nothing = SearchResult(b"", 1, False, "", [] if structured else None)
        if not stores and check is None:
            return nothing
        for name in stores:
            if name in ("", ".", "..") or "/" in name or "\0" in name:
                raise BadArguments(f"bad store name {name!r}")
        command = rg_args.parse(
            args, stores, self.settings.max_threads, default_threads=self._threads, check=check,
            mount=mount, json=structured,
        )
        if not command.stores:
            return nothing
        if hidden is not None:
            excluded = tuple(f"{name}/{rel}" for name in command.stores for rel in hidden(name))
            refused = sorted(set(command.paths) & set(excluded))
            if refused:
                raise BadArguments(f"path {refused[0]!r} is not a file memfs shows (a special "
                                   "file, symlink or hard link planted in the store)")
            command = dataclasses.replace(command, excluded=excluded)
        if len(command.stores) > MAX_FDS - 5:
            raise BadArguments(f"too many stores in one search (at most {MAX_FDS - 5})")
        limit = self.settings.output_limit_bytes
        timeout = self.settings.timeout_seconds
        if structured:
            run = self._run("rg", ["rg", *command.argv], command.stores, stores, None,
                            limit * JSON_OUTPUT_FACTOR, caller)
            return search_matches(run, limit, timeout, rg_args.context_of(command.options)[1])
        run = self._run("rg", ["rg", *command.argv], command.stores, stores, None, limit,
                        caller)
        return search_result(run, limit, timeout)

    def sed(self, scripts: Sequence[str], data: bytes, *, caller: str = "") -> bytes:
        """Return the output of ``sed --sandbox -e S1 -e S2 ...`` on ``data``
        (``caller``: as for `search`).

        Raises BadArguments (refused script, or sed's own error, quoted), JailLimit
        (timeout, CPU, memory, output over ``sed_output_limit``), ToolFailed, JailBusy
        (too many runs at once, past the queue's bounds), JailError.
        """
        sed_script.check(scripts)
        argv = ["sed", "--sandbox"]
        for script in scripts:
            argv += ["-e", script]
        limit = self.settings.sed_output_limit
        run = self._run("sed", argv, (), {}, data, limit, caller)
        return sed_output(run, limit, self.settings.timeout_seconds)

    # -- one run ----------------------------------------------------------------------

    def _run(
        self,
        tool: str,
        argv: list[str],
        names: Sequence[str],
        stores: Mapping[str, Path],
        stdin: bytes | None,
        limit: int,
        caller: str = "",
    ) -> Run:
        """Send one request to the launcher, feed stdin, collect stdout (up to ``limit``:
        past it the tool is stopped and ``over_limit`` set), stderr and the verdict.
        When ``max_concurrent_runs`` are under way it first waits its turn in
        ``caller``'s queue; raises JailBusy past the queue's bounds. Timed for
        ``observer`` (completed False: the run raised), without the wait."""
        if self._runs is None:
            return self._timed(tool, argv, names, stores, stdin, limit)
        with self._runs.slot(caller):
            return self._timed(tool, argv, names, stores, stdin, limit)

    def _timed(
        self,
        tool: str,
        argv: list[str],
        names: Sequence[str],
        stores: Mapping[str, Path],
        stdin: bytes | None,
        limit: int,
    ) -> Run:
        start = time.monotonic()
        completed = False
        try:
            run = self._run_once(tool, argv, names, stores, stdin, limit)
            completed = True
            return run
        finally:
            if self.observer is not None:
                self.observer(tool, time.monotonic() - start, completed)

    def _run_once(
        self,
        tool: str,
        argv: list[str],
        names: Sequence[str],
        stores: Mapping[str, Path],
        stdin: bytes | None,
        limit: int,
    ) -> Run:
        self._ensure_launcher()
        reply_sock, reply_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        mine = [stdin_w, stdout_r, stderr_r]
        theirs = [reply_theirs.detach(), stdin_r, stdout_w, stderr_w]
        try:
            paths: list[str] = []
            for name in names:
                theirs.append(_open_directory(f"store {name!r}", stores[name]))
            if names:  # before the stores, as the spare expects (see jail.wire)
                common, paths = _beneath_one([stores[name] for name in names])
                theirs.insert(4, _open_directory("the stores' common directory", Path(common)))
            request = json.dumps(
                {"tool": tool, "argv": argv, "stores": list(names), "paths": paths}
            ).encode()
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
            stdout, stderr, over = pump(mine, stdin, limit, reply_sock, self.settings)
            reply = verdict(reply_sock, self.settings)
        return Run(reply, stdout, stderr.decode("utf-8", "replace"), over)

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


# -- helpers ----------------------------------------------------------------------------


def _beneath_one(paths: Sequence[Path]) -> tuple[str, list[str]]:
    """The deepest directory every one of ``paths`` is beneath (or is), and each path
    relative to it (symlinks above each path resolved): the jail looks the stores up
    from there, inside its own mount namespace (see ``jail.mounts``)."""
    resolved = [os.path.join(os.path.realpath(path.parent), path.name) for path in paths]
    common = os.path.commonpath(resolved)
    return common, [os.path.relpath(path, common) for path in resolved]


def _open_directory(what: str, path: Path) -> int:
    """Open a directory as an O_PATH handle, refusing a symlink (a symlinked store root)."""
    try:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise JailError(f"cannot open {what} at {path}: {error.strerror}") from error
