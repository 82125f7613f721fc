"""The root of memfs's exceptions, and the one table of the errors memfs reports.

Each kind of error has a code, and ``ERRORS`` one row per code saying what every edge
makes of it: the HTTP problem's status and title (control/http/problems.py), the CLI's
exit code (memfs/cli/__init__.py) and the text a model reads (control/mcp/storage.py). Where a
code comes from decides which edges meet it (``raised_by``): ``daemon`` codes are the
control protocol's (control/protocol/wire.py ``ERROR_CODES``), answered alike over the
socket, HTTP and MCP; ``http`` codes only the HTTP listener answers; ``client`` codes
only the client gives (no reply came).

An exception names its row with the class attribute ``code``: the engine's and the
memory model's (subclasses of `MemfsError`), the jail's (jail/errors.py, which imports
nothing of memfs), the client's (control/client/client.py, one class per code). So
"which exception is which code" is said once, next to each class, and the
dispatcher's ``describe`` only reads it.

Standard library only and cheap to import: the CLI's client reads it at start-up.
"""

from __future__ import annotations

(EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CONFLICT, EXIT_DENIED, EXIT_NOT_FOUND, EXIT_NO_SPACE,
 EXIT_MIRROR) = range(8)


class MemfsError(Exception):
    """Base class of every error memfs raises on purpose. ``code`` names its row of
    ``ERRORS``; None (this base's): a failure of memfs itself, which the edges log and
    answer ``internal``."""

    code: str | None = None


class Unavailable(MemfsError):
    """What this daemon cannot do on its host (search and sed edits without the jail);
    the message says what to enable."""

    code = "unavailable"


class ErrorKind:
    """One row of ``ERRORS``. ``status`` and ``title``: the HTTP problem's (None when
    HTTP never answers this code); ``exit_code``: the CLI's, and ``for_model``: what a
    model reads, a template with one ``{message}`` (both None when no client meets it).
    """

    __slots__ = ("code", "exit_code", "for_model", "path_hint", "raised_by", "status",
                 "title")

    def __init__(self, code: str, raised_by: str, *, status: int | None = None,
                 title: str | None = None, exit_code: int | None = None,
                 for_model: str | None = None, path_hint: str | None = None) -> None:
        self.code = code
        self.raised_by = raised_by
        self.status = status
        self.title = title
        self.exit_code = exit_code
        self.for_model = for_model
        self.path_hint = path_hint  # added for a model when the error is about a file path

    def model_text(self, message: str, *, about_path: bool = False) -> str:
        """What a model reads of an error of this kind with ``message`` (``about_path``:
        the call named a file path, and the kind's hint about paths is added)."""
        text = (self.for_model or "{message}").format(message=message)
        return f"{text} {self.path_hint}" if about_path and self.path_hint else text


ERRORS: dict[str, ErrorKind] = {kind.code: kind for kind in (
    ErrorKind("conflict", "daemon", status=409, title="Conflict", exit_code=EXIT_CONFLICT,
              # control/mcp/storage.py's conflict_outcome writes the message from the details
              for_model="CONFLICT: {message} Use force=true only if you deliberately want "
                        "to overwrite the other agent's changes."),
    ErrorKind("lease_held", "daemon", status=409, title="Lease held by another agent",
              exit_code=EXIT_CONFLICT, for_model="LEASE HELD: {message}. Nothing was changed."),
    ErrorKind("lease_lost", "daemon", status=409, title="Lease lost", exit_code=EXIT_CONFLICT,
              for_model="LEASE LOST: {message}. Stop working on this task; task_list shows "
                        "who holds it now."),
    # the record is closed to this operation: a session already handed off, a task
    # already done, a decision already superseded (nothing was changed)
    ErrorKind("closed", "daemon", status=409, title="Closed", exit_code=EXIT_CONFLICT,
              for_model="CLOSED: {message}. Nothing was changed."),
    ErrorKind("permission_denied", "daemon", status=403, title="Permission denied",
              exit_code=EXIT_DENIED,
              for_model="Permission denied: {message}. Your stores and their access are "
                        "listed in this server's instructions; storage_list shows what you "
                        "can read."),
    ErrorKind("not_found", "daemon", status=404, title="Not found", exit_code=EXIT_NOT_FOUND,
              for_model="Not found: {message}.",
              path_hint="Paths are STORE/PATH (e.g. notes/todo.md); use storage_list to see "
                        "existing files."),
    ErrorKind("invalid", "daemon", status=400, title="Invalid request", exit_code=EXIT_USAGE,
              for_model="Invalid request: {message}"),
    ErrorKind("too_large", "daemon", status=413, title="Too large", exit_code=EXIT_USAGE,
              for_model="Invalid request: {message}"),
    # a limit on shared resources (connections, buffered request bytes, jailed tool
    # runs) was reached: nothing was done, the same request may succeed later
    ErrorKind("busy", "daemon", status=503, title="Busy, retry shortly", exit_code=EXIT_ERROR,
              for_model="memfs is busy: {message}. Nothing was done; wait a moment and "
                        "retry the same call."),
    # the memory's disk is full: nothing was changed (retry once space is freed)
    ErrorKind("no_space", "daemon", status=507, title="Insufficient storage",
              exit_code=EXIT_NO_SPACE,
              for_model="The memory's disk is full; nothing was changed; free space or ask "
                        "the operator, then retry. ({message})"),
    # a push asked for did not bring a mirror up to date (down, or it refused the push:
    # diverged): the memory itself is unchanged, and the pusher carries on
    ErrorKind("mirror_failed", "daemon", status=502, title="Mirror push failed",
              exit_code=EXIT_MIRROR,
              for_model="A mirror push failed: {message}. The memory itself is unchanged; "
                        "tell the operator."),
    # this daemon cannot run search or sed edits: its kernel lacks what the jail needs
    # (Landlock, seccomp, user namespaces); the message says what to enable. Everything
    # else serves; nothing was done
    ErrorKind("unavailable", "daemon", status=501, title="Unavailable on this host",
              exit_code=EXIT_ERROR,
              for_model="Unavailable here: {message}. Nothing was done; read and write "
                        "files instead, and tell the operator."),
    ErrorKind("internal", "daemon", status=500, title="Internal error", exit_code=EXIT_ERROR,
              for_model="memfs internal error: {message}"),
    ErrorKind("unauthenticated", "http", status=401, title="Authentication required"),
    ErrorKind("method_not_allowed", "http", status=405, title="Method not allowed"),
    # the request line and headers together are longer than [http] max_head_bytes
    ErrorKind("head_too_large", "http", status=431,
              title="Request header fields too large"),
    ErrorKind("connection", "client", exit_code=EXIT_ERROR,
              for_model="memfs is unreachable: {message}"),
)}
