"""The git command line, for what only it does: talking to remotes. A mirror's push,
ls-remote and fetch (memfs/store/history/mirror.py, memfs/store/history/restore.py) go through the
``git`` program, so that every URL git accepts works, with git's own transports,
ssh keys and credential helpers (the daemon's user's git config); the history itself
is written in process with pygit2 (memfs/store/history/writer.py).

Each run is a child process of the daemon, under its own uid and nothing more, with a
time limit, stdin closed and no terminal: git never waits for someone to type a
password or accept a host key (``GIT_TERMINAL_PROMPT=0``; a session of its own has no
controlling terminal, so ssh cannot prompt either). It dies with the thread that
started it (``setpriv --pdeathsig``: a daemon killed mid-push leaves no git behind,
and the remote drops the half-received push). It never runs hooks of the store's
repository, and never packs or prunes it (the daemon does, see repo.py).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

GIT = "git"
# Settings for every run: no hooks of ours, no housekeeping in the store's repository
# (the daemon packs it), messages in English (they are parsed and shown), and a fetch
# checks every object it receives.
_SETTINGS = ("core.hooksPath=/dev/null", "gc.auto=0", "maintenance.auto=false",
             "fetch.writeCommitGraph=false", "transfer.fsckObjects=true")
MAX_OUTPUT = 64 * 1024  # what is kept of a run's stdout or stderr
# the lines git adds to every failure of a kind, which hide its cause
_ADVICE = ("fatal: Could not read from remote repository", "Please make sure you have",
           "and the repository exists", "To add an exception for this directory",
           "git config --global --add safe.directory")


@dataclass(frozen=True)
class GitRun:
    """What one run of git did: its exit code (None: it could not run, or was killed
    at its time limit or by `GitRunner.stop`), its output, and its error text (both
    cut at MAX_OUTPUT); ``stopped``: ended (or never begun) by `GitRunner.stop`."""

    returncode: int | None
    stdout: str
    stderr: str
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def said(self) -> str:
        """git's error message in one line: what it said first (the cause: "unable
        to connect to ...", "... does not appear to be a git repository"), without
        the advice it adds to every failure, and its last line (a time limit)."""
        lines = [line.strip() for line in self.stderr.splitlines()
                 if line.strip() and not line.strip().startswith(_ADVICE)]
        if len(lines) > 3:
            lines = [*lines[:2], lines[-1]]
        text = "; ".join(lines) if lines else f"git exited with {self.returncode}"
        return text[:500]


def environment() -> dict[str, str]:
    """The environment git runs in: the daemon's, with no prompt, English messages, and
    HOME the daemon's user's (a daemon started as root keeps root's HOME after it
    dropped to its user, where git would look for that user's config in vain)."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "",
           "GCM_INTERACTIVE": "never"}
    home = env.get("HOME")
    try:
        if home is None or os.stat(home).st_uid != os.geteuid():
            env["HOME"] = pwd.getpwuid(os.geteuid()).pw_dir
    except (OSError, KeyError):
        with contextlib.suppress(KeyError):
            env["HOME"] = pwd.getpwuid(os.geteuid()).pw_dir
    return env


class GitRunner:
    """Runs git; `stop` ends every run under way (the daemon stopping), and no run
    starts after it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopped = False

    def run(self, args: list[str], *, git_dir: Path | None, timeout: float) -> GitRun:
        """``git -c ... [--git-dir GIT_DIR] ARGS`` with a time limit of ``timeout``
        seconds (then it and every process it started are killed). Never raises: git
        missing is a failed run that says so."""
        argv = [GIT]
        setpriv = shutil.which("setpriv")  # util-linux: on every Debian
        if setpriv is not None:
            argv = [setpriv, "--pdeathsig", "KILL", "--", GIT]
        for setting in _SETTINGS:
            argv += ["-c", setting]
        if git_dir is not None:
            argv += ["--git-dir", str(git_dir)]
        argv += args
        with self._lock:
            if self._stopped:
                return GitRun(None, "", "the daemon is stopping", stopped=True)
            try:
                process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, env=environment(), cwd=git_dir or "/",
                    start_new_session=True)  # no terminal to prompt on; killed as a group
            except OSError as error:
                return GitRun(None, "", f"cannot run git: {error} (scripts/setup installs "
                              "it)")
            self._running.add(process)
        try:
            try:
                out, err = process.communicate(timeout=timeout)
                code: int | None = process.returncode
            except subprocess.TimeoutExpired:
                _kill(process)
                out, err = process.communicate()
                code = None
                err += f"\ntimed out after {timeout:.0f} s".encode()
            if code is not None and code < 0:
                code = None  # killed by `stop`
        finally:
            with self._lock:
                self._running.discard(process)
                stopped = self._stopped and code is None
        return GitRun(code, out[-MAX_OUTPUT:].decode(errors="replace"),
                      err[-MAX_OUTPUT:].decode(errors="replace"), stopped)

    def stop(self) -> None:
        """Kill every run under way; later runs return at once, unsuccessful."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for process in running:
            _kill(process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill git and what it started (ssh, a remote helper): its session's group."""
    if process.returncode is not None:
        return  # ended and reaped: its id may be another's by now
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
