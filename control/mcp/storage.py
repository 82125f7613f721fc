"""The memfs tools for models, independent of the MCP SDK.

``StorageTools`` carries out storage_list / read / search / write / download / upload
through one control-socket ``Client`` and turns every outcome, good or bad, into a
``ToolOutcome``: the text the model reads, whether it is an error, and metadata kept
out of the model's sight (digests). The model never handles a digest: the daemon
records, per agent, the version each read returned, and checks writes against it.

control/mcp/server.py wires these methods to the MCP SDK; the descriptions below are
what the model sees. In the results, memfs's own sentences name paths, ids and agents
as JSON strings (``"notes/a.md"``) and quote memory's texts (``> ``), with every
character that is not printable escaped (memfs/memory/records.py); listings and tool
output (storage_list, rg's matches, numbered lines, diffs) are one entry per line, as
they come.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from memfs.control.client import (
    Client,
    ConflictError,
    ConnectionFailed,
    LeaseHeldError,
    LeaseLostError,
    MemfsClientError,
)

if TYPE_CHECKING:
    from memfs.control.client.client import Committed

from memfs.control.client.localfiles import (
    LocalFileError,
    confine,
    destination,
    read_local,
    save_atomically,
)
from memfs.errors import ERRORS
from memfs.jail import rg_args, rg_json
from memfs.jail.errors import BadArguments
from memfs.jail.rg_json import Match
from memfs.memory.records import escaped, literal

T = TypeVar("T")

DEFAULT_READ_LIMIT = 2000  # lines per storage_read page
MAX_LINE_CHARS = 4000  # longer lines are cut in storage_read output
MAX_OUTPUT_CHARS = 100_000  # per tool result (read page, search output, list)
MAX_LIST_PATHS = 2000

# -- what the model reads ------------------------------------------------------------------

INSTRUCTIONS = """\
memfs is shared, persistent memory: plain text files that several agents read and write.
Files live in named stores; every path is STORE/PATH, for example notes/incidents/db.md
(a leading /memory/ is accepted too). Use storage_list to see files, storage_search to grep
them, memory_recall to find the notes about a topic in your own words ("did we solve this
before?"), storage_read to read, storage_write to create, replace, append or sed-edit.
Read a file before you write it: replacing or editing needs the version you read.
Writes are version-checked for you: if another agent changed a file after you last read
it, your write is refused as a CONFLICT instead of erasing their work (a conflict means
someone else's change came first, not that you did something wrong). Then read the file
again and redo your change on the new content. The files are also resources
(memfs://STORE/PATH; reading one counts as reading the file), and the prompt "brief" is
the start-of-session brief."""


@dataclass
class ToolOutcome:
    """What a tool call returns: ``text`` for the model, ``is_error`` for MCP's isError,
    ``meta`` for the client program only (``_meta`` in MCP)."""

    text: str
    is_error: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    # the tool's structuredContent (a tool that declares an outputSchema), or None
    structured: dict[str, Any] | None = None


def when(at: float | None) -> str:
    if at is None:
        return "an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


class Connection:
    """One control-socket Client, opened lazily and reopened when the daemon restarts.

    Identity is the kernel's: the daemon reads SO_PEERCRED from this socket, so the
    agent is whoever runs this process, or ``as_agent`` when that uid is a delegate,
    or in personal mode the agent ``as_agent`` names (`bind` names it later).
    """

    def __init__(self, socket_path: str, as_agent: str | None = None,
                 factory: Callable[[str, str | None], Client] = Client) -> None:
        self.socket_path = socket_path
        self.as_agent = as_agent
        self._factory = factory
        self._client: Client | None = None
        self._lock = threading.Lock()

    def _get(self) -> Client:
        with self._lock:
            if self._client is not None and self._client.peer_closed():
                self._discard_locked()
            if self._client is None:
                self._client = self._factory(self.socket_path, self.as_agent)
            return self._client

    def twin(self) -> Connection:
        """A new connection for the same agent, with its own client (and so its own
        record of the versions it saw)."""
        return Connection(self.socket_path, self.as_agent, self._factory)

    def bind(self, as_agent: str) -> None:
        """Act as ``as_agent`` from now on (a client made before is dropped)."""
        with self._lock:
            self.as_agent = as_agent
            if self._client is not None:
                self._discard_locked()

    def _discard(self, client: Client) -> None:
        with self._lock:
            if self._client is client:
                self._discard_locked()

    def _discard_locked(self) -> None:
        assert self._client is not None
        with contextlib.suppress(OSError):
            self._client.close()
        self._client = None

    def run(self, op: Callable[[Client], T], *, idempotent: bool) -> T:
        """Run ``op`` on the client. A broken connection is dropped; an idempotent
        op is retried once on a fresh one (a write is not: it may have landed)."""
        client = self._get()
        try:
            return op(client)
        except ConnectionFailed:
            self._discard(client)
            if not idempotent:
                raise
        return op(self._get())

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._discard_locked()


def cut_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut at a line boundary to at most ``limit`` characters."""
    if len(text) <= limit:
        return text, False
    head = text[:limit]
    newline = head.rfind("\n")
    return (head[: newline + 1] if newline > 0 else head), True


class StorageTools:
    """The six storage tools; each method is synchronous, never raises, and returns a
    ToolOutcome. Thread-safe (the Client serializes requests)."""

    def __init__(self, connection: Connection, local_dir: str | None = None) -> None:
        self.conn = connection
        self.local_dir = local_dir  # download/upload stay inside it when set

    # -- shared error handling ---------------------------------------------------------

    def _guard(self, body: Callable[[], ToolOutcome], *, path: str | None = None,
               verb: str = "write") -> ToolOutcome:
        try:
            return body()
        except MemfsClientError as error:
            # The message may name what memory holds: escaped, it stays one line.
            error.message = escaped(error.message)
            return error_outcome(error, path, verb)
        except LocalFileError as error:
            return ToolOutcome(f"Local file error: {error}", True)

    # -- storage_list -------------------------------------------------------------------

    def list_files(self, patterns: str | list[str] | None = None) -> ToolOutcome:
        patterns = [patterns] if isinstance(patterns, str) else list(patterns or [])
        patterns = [p for p in patterns if p.strip()]

        def body() -> ToolOutcome:
            paths = self.conn.run(lambda c: c.list(*patterns), idempotent=True)
            if not paths:
                what = " or ".join(repr(p) for p in patterns) if patterns else "your stores"
                return ToolOutcome(f"No files match {what}." if patterns
                                   else "No files yet in any store you can read.",
                                   meta={"paths": []})
            shown = paths[:MAX_LIST_PATHS]
            text, cut = cut_text("\n".join(shown), MAX_OUTPUT_CHARS)
            count = text.count("\n") + 1
            if cut or len(shown) < len(paths):
                text += (f"\n[{count} of {len(paths)} files shown; narrow the pattern, "
                         "e.g. \"STORE/dir/**\"]")
            return ToolOutcome(text, meta={"paths": paths[:count], "total": len(paths)})

        return self._guard(body, verb="list")

    # -- storage_read -------------------------------------------------------------------

    def read(self, path: str, offset: int | None = None, limit: int | None = None) -> ToolOutcome:
        first = offset or 1
        count = limit or DEFAULT_READ_LIMIT
        if first < 1 or count < 1:
            return ToolOutcome("Invalid request: offset and limit must be at least 1.", True)

        def body() -> ToolOutcome:
            result = self.conn.run(lambda c: c.read(path, offset=first, limit=count),
                                   idempotent=True)
            return format_read(path, first, result)

        return self._guard(body, path=path, verb="read")

    # -- storage_search -----------------------------------------------------------------

    def search(self, pattern: str | None = None, args: list[str] | None = None,
               flags: list[str] | None = None, paths: list[str] | None = None) -> ToolOutcome:
        if (pattern is None) == (args is None):
            return ToolOutcome(
                "Invalid request: give exactly one of `pattern` (with optional `flags` and "
                "`paths`) or `args` (a full rg command line such as [\"-i\", \"timeout\"]).",
                True)
        if args is not None:
            if flags or paths:
                return ToolOutcome("Invalid request: `flags` and `paths` go with `pattern`; "
                                   "with `args`, put flags, pattern and paths all in `args`.",
                                   True)
            if not args:
                return ToolOutcome("Invalid request: `args` is empty; it needs at least a "
                                   "pattern.", True)
            rg = list(args)
        else:
            assert pattern is not None
            rg = [*(flags or []), "--regexp", pattern]
            if paths:
                rg += ["--", *paths]
        # Defaults first: the user's flags come later and win (-N, --sort=none, ...).
        rg = ["--line-number", "--with-filename", "--sort=path", *rg]
        structured, context = matches_for(rg)

        def body() -> ToolOutcome:
            result = self.conn.run(lambda c: c.search(rg, structured=structured),
                                   idempotent=True)
            return format_search(result, context=context)

        return self._guard(body, verb="search")

    # -- storage_write ------------------------------------------------------------------

    def write(self, path: str, content: str | None = None, append: bool = False,
              sed: str | list[str] | None = None, force: bool = False) -> ToolOutcome:
        if (content is None) == (sed is None):
            return ToolOutcome(
                "Invalid request: give exactly one of `content` (the text to write, or to add "
                "with append=true) or `sed` (a GNU sed script, or a list of scripts).", True)
        if sed is not None:
            if append:
                return ToolOutcome("Invalid request: `append` goes with `content`, not with "
                                   "`sed` (a sed script can append itself: '$a\\\\text').",
                                   True)
            scripts = [sed] if isinstance(sed, str) else list(sed)
            if not scripts:
                return ToolOutcome("Invalid request: `sed` is an empty list.", True)
            return self._guard(lambda: self._edit(path, scripts, force), path=path)
        assert content is not None
        return self._guard(lambda: self._write(path, content, append, force), path=path)

    def _write(self, path: str, content: str, append: bool, force: bool) -> ToolOutcome:
        result = self.conn.run(lambda c: c.write(path, content, append=append, force=force),
                               idempotent=False)
        size = result["size"]
        shown = literal(result["path"])
        if result.get("unchanged"):
            text = f"{shown} already held exactly this ({size} bytes): nothing was changed."
        elif append:
            text = f"Appended {len(content.encode())} bytes to {shown} (now {size} bytes)."
        elif result.get("created"):
            text = f"Created {shown} ({size} bytes)."
        else:
            text = f"Wrote {shown} ({size} bytes)."
        return ToolOutcome(text, meta=commit_meta(result))

    def _edit(self, path: str, scripts: list[str], force: bool) -> ToolOutcome:
        def op(client: Client) -> tuple[Committed, str | None]:
            try:
                before: str | None = client.stat(path)["digest"]
            except MemfsClientError:
                before = None  # the edit itself reports what is wrong
            return client.edit(path, scripts, force=force), before

        result, before = self.conn.run(op, idempotent=False)
        shown = literal(result["path"])
        if before is not None and result["digest"] == before:
            text = (f"sed left {shown} unchanged ({result['size']} bytes): the script matched "
                    "nothing. Check it against the file (storage_read).")
        else:
            text = f"Edited {shown} with sed (now {result['size']} bytes)."
        return ToolOutcome(text, meta=commit_meta(result))

    # -- storage_download / storage_upload ---------------------------------------------

    def download(self, path: str, dest: str) -> ToolOutcome:
        def body() -> ToolOutcome:
            target = confine(destination(confine(dest, self.local_dir), path), self.local_dir)
            data, meta = self.conn.run(lambda c: c.read_bytes(path), idempotent=True)
            save_atomically(target, data, make_parents=True)
            shown = meta.get("path") or path
            text = (f"Downloaded {literal(shown)} ({len(data)} bytes) to {literal(target)}.\n"
                    f"When your local changes are done, send it back with "
                    f"storage_upload(src={literal(target)}, path={literal(shown)}); that is "
                    "refused if another agent changes the file in the meantime.")
            if meta.get("changed_since_last_read"):
                text = _changed_note(shown, meta) + "\n" + text
            return ToolOutcome(text, meta={**_version_meta(meta), "dest": target})

        return self._guard(body, path=path, verb="download")

    def upload(self, src: str, path: str, force: bool = False) -> ToolOutcome:
        def body() -> ToolOutcome:
            data = read_local(confine(src, self.local_dir))
            result = self.conn.run(lambda c: c.write(path, data, force=force),
                                   idempotent=False)
            verb = "unchanged" if result.get("unchanged") else \
                "created" if result.get("created") else "replaced"
            return ToolOutcome(f"Uploaded {literal(src)} to {literal(result['path'])} "
                               f"({result['size']} bytes, {verb}).", meta=commit_meta(result))

        return self._guard(body, path=path, verb="upload")

    # -- identity --------------------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        """The daemon's view of this server's agent (raises MemfsClientError)."""
        return self.conn.run(lambda c: c.whoami(), idempotent=True)


# -- formatting ----------------------------------------------------------------------------


def _changed_note(path: str, result: Mapping[str, Any]) -> str:
    writer = result.get("last_writer")
    who = literal(writer) if writer else "another agent"
    return (f"[Note: {literal(path)} changed since you last read it; last written by {who} at "
            f"{when(result.get('last_written_at'))}. Below is the current version.]")


def _version_meta(result: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("path", "digest", "size", "last_writer", "last_written_at",
            "changed_since_last_read", "total_lines", "next_offset")
    return {key: result[key] for key in keys if key in result}


def commit_meta(result: Mapping[str, Any]) -> dict[str, Any]:
    return {key: result[key] for key in ("path", "digest", "size", "created") if key in result}


def format_read(path: str, offset: int, result: Mapping[str, Any]) -> ToolOutcome:
    """A read page as ``cat -n`` lines plus notes: changed-since-read, continue-at."""
    shown_path = result.get("path") or path
    total = int(result.get("total_lines", 0))
    text = str(result.get("text", ""))
    lines = text.split("\n")  # lines end with "\n" only, as the daemon counts them
    if text.endswith("\n") or not text:
        lines.pop()
    parts: list[str] = []
    if result.get("changed_since_last_read"):
        parts.append(_changed_note(shown_path, result))
    meta = _version_meta(result)
    if total == 0:
        parts.append(f"({literal(shown_path)} is empty)")
        return ToolOutcome("\n".join(parts), meta=meta)
    if not lines:
        parts.append(f"({literal(shown_path)} has {total} lines; offset {offset} is past the "
                     "end. Use a smaller offset.)")
        return ToolOutcome("\n".join(parts), meta=meta)
    budget = MAX_OUTPUT_CHARS
    body: list[str] = []
    binary = False
    for number, line in enumerate(lines, start=offset):
        binary = binary or "\x00" in line
        if len(line) > MAX_LINE_CHARS:
            line = (line[:MAX_LINE_CHARS]
                    + f"... [{len(line) - MAX_LINE_CHARS} more characters on this line]")
        entry = f"{number:>6}\t{line}"
        if body and len(entry) + 1 > budget:
            break
        body.append(entry)
        budget -= len(entry) + 1
    parts.append("\n".join(body))
    last = offset + len(body) - 1
    next_offset = last + 1 if last < total else None
    if binary:
        parts.append("[This looks like a binary file; storage_download gets its exact bytes.]")
    if next_offset is not None:
        parts.append(f"[Lines {offset}-{last} of {total}. More below: continue with "
                     f"storage_read(path={literal(shown_path)}, offset={next_offset}).]")
        meta["next_offset"] = next_offset
    elif offset > 1:
        parts.append(f"[Lines {offset}-{last} of {total}: end of file.]")
    return ToolOutcome("\n".join(parts), meta=meta)


def matches_for(rg: list[str]) -> tuple[bool, bool]:
    """Whether the search ``rg`` is asked for structured matches (its text output is
    exactly its matches printed back: rg_args.prints_matches; a flag such as -l, -c or
    -o asks for rg's own text instead), and whether it asks for context lines. A
    command line the jail refuses is asked for as text: the daemon says what is wrong."""
    try:
        options = rg_args.scan(rg).options
    except BadArguments:
        return False, False
    return rg_args.prints_matches(options), any(rg_args.context_of(options))


def format_search(result: dict[str, Any], *, context: bool = False) -> ToolOutcome:
    """A search's result for the model: rg's text (or the matches printed as rg prints
    them, ``context``: with ``--`` between groups of lines), cut to MAX_OUTPUT_CHARS;
    its structured content holds what the text shows (``output``, or ``matches``)."""
    stderr = escaped(str(result.get("stderr", "")).strip(), keep="\n")  # its lines name files
    code = int(result.get("exit_code", 2))
    meta = {"exit_code": code, "truncated": bool(result.get("truncated"))}
    found: list[Match] | None = result.get("matches")
    if found is None:
        output = str(result.get("output", ""))
        text, cut = cut_text(output, MAX_OUTPUT_CHARS)
        shown: dict[str, Any] = {"output": text}
    else:
        printed: list[str] = []  # whole matches only, within MAX_OUTPUT_CHARS
        length = 0
        for lines in rg_json.render(found, context=context):
            length += len(lines)
            if length > MAX_OUTPUT_CHARS:
                break
            printed.append(lines)
        output = "".join(printed)
        text, cut = output, len(printed) < len(found)
        shown = {"matches": found[:len(printed)]}
    structured = {**shown, **meta, "truncated": meta["truncated"] or cut}
    if code == 1 and not output:
        text = "No matches."
        if stderr:
            text += f"\nrg: {stderr}"
        return ToolOutcome(text, meta=meta, structured=structured)
    text = text.rstrip("\n")
    if cut or result.get("truncated"):
        text += ("\n[Output truncated: narrow the search (paths, -g GLOB, -w, -m N) or use -l "
                 "to list matching files first.]")
    if code not in (0, 1):
        if not output:
            return ToolOutcome(f"Search failed (rg exit {code}): {stderr or 'no details'}",
                               True, meta)
        text += f"\n[rg reported problems (exit {code}): {stderr or 'no details'}]"
    elif stderr:
        text += f"\n[rg: {stderr}]"
    return ToolOutcome(text, meta=meta, structured=structured)


def error_outcome(error: MemfsClientError, path: str | None, verb: str) -> ToolOutcome:
    """An error as a model should read it: its code's text (memfs/errors.py), a
    conflict told from its details, the lease's details kept in ``meta``."""
    if isinstance(error, ConflictError):
        return conflict_outcome(error, path, verb)
    text = ERRORS[error.code].model_text(error.message, about_path=path is not None)
    if isinstance(error, ConnectionFailed) and verb in ("write", "upload"):
        text += (". If the connection broke during the call the change may or may not "
                 "have been applied: storage_read the file to check before retrying.")
    lease = isinstance(error, LeaseHeldError | LeaseLostError)
    return ToolOutcome(text, True, {"lease": dict(error.details)} if lease else {})


def conflict_outcome(error: ConflictError, path: str | None, verb: str) -> ToolOutcome:
    """The conflict as a model should read it: what happened, who did it, what next."""
    details = error.details
    named = details.get("path") or path
    name = literal(named) if named else "the file"
    writer = details.get("last_writer")
    at = details.get("last_written_at")
    by = f" by {literal(writer)} at {when(at)}" if writer else ""
    refetch = "storage_download it again" if verb == "upload" else "read it again (storage_read)"
    redo = ("redo your local work on the new version, then upload again"
            if verb == "upload" else "redo your change on the current content, then retry")
    if "current_digest" not in details:  # not a version: the name is taken (PathTaken)
        text = ERRORS["conflict"].model_text(f"your {verb} was NOT applied: {error}.")
        return ToolOutcome(text.split(" Use force=true")[0], True, {"conflict": {}})
    if details.get("seen_absent"):
        what = f"{name} was created{by} after you found it absent"
        next_step = f"First {refetch} so that you see its content, then {redo}."
    elif details.get("current_digest") is None and details.get("seen_digest") is not None:
        what = f"{name} was deleted{by} after you last read it"
        next_step = ("If you still want it, write it again with force=true; otherwise leave "
                     "it deleted.")
    elif details.get("seen_digest") is None:
        written = f" (last written{by})" if by else ""
        what = f"{name} already exists{written} and you have not read it yet"
        next_step = f"First {refetch} so that you see its current content, then {redo}."
    else:
        what = f"{name} was changed{by}, after you last read it"
        next_step = f"To keep both changes: {refetch}, {redo}."
    text = ERRORS["conflict"].model_text(f"your {verb} was NOT applied: {what}. {next_step}")
    return ToolOutcome(text, True, {"conflict": dict(details)})
