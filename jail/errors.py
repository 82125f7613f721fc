"""Exceptions raised by the jail. Each class says when it is raised, and names in
``code`` the error code memfs reports it as (memfs/errors.py, which the jail does not
import: it stands on its own)."""

from __future__ import annotations


class JailError(Exception):
    """Base class of every jail error; raised as such for internal failures, e.g. the
    launcher process died or a store directory could not be opened. ``code`` None:
    the daemon logs it and answers ``internal``."""

    code: str | None = None


class JailUnavailable(JailError):
    """``Jail.start`` cannot provide the promised isolation: no Landlock or seccomp in
    the kernel, not running as root, a missing or unsafe sed root (run
    ``scripts/build-sed-jail DEST``), a tool that does not run under the policy.
    Never a silent fallback to running unjailed."""

    code = "internal"


class KernelLacks(JailUnavailable):
    """The kernel lacks what the jail cannot do without: Landlock, seccomp filters, or
    (unprivileged, for a jail not started by root) user namespaces. The message says
    what to enable. The daemon serves on, refusing search and sed edits with it."""


class BadArguments(JailError):
    """The caller's input is refused before or by the tool: an rg flag outside the
    allow-list, a path outside the readable stores, a glob with ``..``, a sed script
    that uses ``e``/``r``/``w``... or that sed rejects (syntax error); the message
    names the offending flag or includes sed's own error."""

    code = "invalid"


class JailLimit(JailError):
    """The tool hit a limit: the wall-clock timeout, the CPU-time or memory limit, or
    (for sed) the output size limit. Nothing is returned in that case."""

    code = "invalid"


class JailBusy(JailError):
    """``max_concurrent_runs`` tool runs are under way already; nothing was run. The
    same call may succeed once one of them has finished."""

    code = "busy"


class ToolFailed(JailError):
    """The tool ran and failed on its own: rg exited with status 2 (error messages in
    ``stderr``), sed exited with an unexpected status, or was killed by a signal."""

    code = "invalid"

    def __init__(self, message: str, exit_code: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr = stderr
