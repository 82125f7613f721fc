"""What a jailed run means: the launcher's verdict, stdout and stderr turned into a
:class:`SearchResult`, sed's output, or the exception that says what went wrong."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from memfs.jail import rg_json
from memfs.jail.errors import BadArguments, JailError, JailLimit, ToolFailed
from memfs.jail.wire import EXEC_FAILED

_SANDBOX_REFUSAL = "commands disabled in sandbox mode"


@dataclass(frozen=True)
class SearchResult:
    """What rg printed. ``exit_code`` is rg's: 0 matches, 1 no match, 2 some error
    (then ``stderr`` says which, and ``output`` has what was found anyway). When the
    output exceeded the limit it is cut at a line end, ``truncated`` is True and a
    last line says so. A search for structured matches (rg --json) has them in
    ``matches`` instead (``output`` empty; jail/rg_json.py), and ``truncated`` when
    some were left out to keep within the limit."""

    output: bytes
    exit_code: int
    truncated: bool
    stderr: str
    matches: list[rg_json.Match] | None = None


@dataclass
class Run:
    """The raw outcome of one jailed run."""

    reply: dict[str, Any]
    stdout: bytes
    stderr: str
    over_limit: bool


def _common_failures(run: Run, tool: str, timeout: float) -> None:
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


def search_result(run: Run, limit: int, timeout: float) -> SearchResult:
    if run.over_limit:
        # We stopped rg ourselves; whatever its status, the output stands.
        cut = run.stdout[:limit]
        if b"\n" in cut:
            cut = cut[: cut.rindex(b"\n") + 1]
        note = f"[memfs: output truncated at {limit} bytes]\n".encode()
        return SearchResult(cut + note, 0, True, run.stderr)
    code = _rg_code(run, timeout, found=bool(run.stdout))
    return SearchResult(run.stdout, code, False, run.stderr)


def search_matches(run: Run, limit: int, timeout: float, after: int) -> SearchResult:
    """The matches of a run of ``rg --json`` (with ``after`` lines of context, -A), at
    most ``limit`` bytes of them (jail/rg_json.py counts them). Raises as
    `search_result`, and JailError when rg's output is not its JSON messages."""
    try:
        found, truncated = rg_json.matches(run.stdout, after=after, limit=limit,
                                           cut=run.over_limit)
    except rg_json.BadOutput as error:  # (not quoted: it holds memory's content)
        raise JailError(str(error)) from None
    # Stopped by us (rg's own JSON went past its cap): whatever its status, the
    # matches stand, as a cut text output does.
    code = 0 if run.over_limit else _rg_code(run, timeout, found=bool(found))
    return SearchResult(b"", code, truncated, run.stderr, found)


def _rg_code(run: Run, timeout: float, *, found: bool) -> int:
    """rg's exit status, 0 (matches), 1 (none) or 2 (errors, and ``found`` something
    anyway); raises for every other outcome."""
    _common_failures(run, "rg", timeout)
    reply = run.reply
    if reply.get("status") != "exited":
        raise ToolFailed(f"rg was killed by signal {reply.get('signal')}", None, run.stderr)
    code = int(reply["code"])
    if code == 2 and not found:
        raise ToolFailed(f"rg failed: {run.stderr.strip()}", code, run.stderr)
    if code not in (0, 1, 2):
        raise ToolFailed(f"rg exited with status {code}: {run.stderr.strip()}", code, run.stderr)
    return code


def sed_output(run: Run, limit: int, timeout: float) -> bytes:
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
