"""The history ops: log, show, diff and restore, each declared with its request model
and handler (control/ops/registry.py); log, diff and restore also with their REST
endpoint; log (storage_history: a log, a diff or an old version) and restore with their
MCP tool. Like every handler, each takes the call and the request and returns the
result dict, raising the engine's exceptions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from memfs.control.ops.registry import ARGUMENTS_CONFIG, Call, Rest, Tool, operation
from memfs.control.ops.storage import (
    FORCE_DESCRIPTION,
    PATH_DESCRIPTION,
    committed_fields,
    content_fields,
)
from memfs.control.protocol.base import (
    EXPECT_PATTERN,
    MAX_ARG_LEN,
    Arg,
    BaseRequest,
    Encoding,
    Rev,
    Time,
    matching,
    wire_encoding,
)
from memfs.store.errors import InvalidInput
from memfs.store.history import revs
from memfs.store.read.pages import page_of_bytes

if TYPE_CHECKING:  # pygit2 is imported by the history only when an op runs
    from memfs.store.history.repo import Entry

STORE = "/v1/stores/{store}"


def store_path(fields: dict[str, Any]) -> dict[str, Any]:
    """REST's ``store`` and optional ``file`` within it -> the protocol's STORE[/PATH]."""
    store = fields.pop("store")
    rel = fields.pop("file", None)
    fields["path"] = store if rel in (None, "") else f"{store}/{str(rel).lstrip('/')}"
    return fields


class LogRequest(BaseRequest):
    op: Literal["log"]
    # STORE or STORE/PATH (a file or folder); None: every readable store with history
    path: str | None = Field(default=None, max_length=MAX_ARG_LEN)
    limit: int = Field(default=20, ge=1, le=10_000)
    since: Time | None = None  # only changes at or after it
    until: Time | None = None  # only changes at or before it
    # start at this revision instead of the newest (inclusive; needs a store or path):
    # paging, with the revision of the entry after the last one shown
    rev: Rev | None = None
    author: str | None = Field(default=None, max_length=64)
    patch: bool = False  # each entry with its diff


class ShowRequest(BaseRequest):
    """An old version of a file (also of one deleted since), paged like ``read``."""

    op: Literal["show"]
    path: Arg
    rev: Rev
    offset: int = Field(default=1, ge=1)
    limit: int | None = Field(default=None, ge=1)
    encoding: Encoding = "text"

    _encoding = field_validator("encoding")(wire_encoding)


class DiffRequest(BaseRequest):
    """A unified diff of one file: ``rev`` None = from the version this agent last saw
    to now; ``REV`` = from REV to now; ``REV..REV`` = between two revisions."""

    op: Literal["diff"]
    path: Arg
    rev: Annotated[str, Field(max_length=130), *matching(
        revs.RANGE_PATTERN, "range", "use REV or REV..REV (a commit id, HEAD~N or a "
        "time)")] | None = None


class RestoreRequest(BaseRequest):
    """Write the content the file had at ``rev`` back: a version-checked replace."""

    op: Literal["restore"]
    path: Arg = Field(description=PATH_DESCRIPTION)
    rev: Rev = Field(description=(
        "The revision to bring back (an id from storage_history, HEAD~N, or a time)."))
    force: bool = Field(default=False, description=FORCE_DESCRIPTION)
    expect: str | None = Field(default=None, pattern=EXPECT_PATTERN)


class HistoryArguments(BaseModel):
    """storage_history's: a log, a diff or an old version, by ``action``."""

    model_config = ARGUMENTS_CONFIG

    path: str | None = Field(default=None, max_length=MAX_ARG_LEN, description=(
        "A file (STORE/PATH), folder or store; omit for every store (log only)."))
    action: Literal["log", "diff", "show"] = Field(default="log", description=(
        "log: the changes; diff: a unified diff of one file; show: a file as it was at "
        "`rev`."))
    rev: str | None = Field(default=None, max_length=130, description=(
        "show: the revision; diff: REV or REV..REV (omit: since you last read the file)."))
    offset: int | None = Field(default=None, ge=1, description="show: first line, 1-based.")
    limit: int | None = Field(default=None, ge=1, le=10_000, description=(
        "log: how many changes (default 20); show: lines per page."))


HISTORY_DESCRIPTION = """\
Look at the past of shared memory: every change to a store is kept (who, when, what).

action="log" (default): the changes, newest first, of a file, a folder or a whole store
  (path "notes/oncall.md", "notes/incidents" or "notes"; omit path for every store):
    storage_history(path="notes/oncall.md")
    storage_history(path="notes", limit=50)
  Each line: revision, time (UTC), agent, what it did.
action="diff": a unified diff of one file. Without `rev`: what changed since YOU last read
  it (useful after a conflict). With rev="3f2c1e0": from that revision to now; with
  rev="3f2c1e0..9a8b7c6": between two revisions.
    storage_history(path="notes/oncall.md", action="diff")
action="show": the file's content at revision `rev` (also of a deleted file), with
  numbered lines paged by offset/limit like storage_read:
    storage_history(path="notes/oncall.md", action="show", rev="HEAD~3")
Revisions are ids from the log (7+ hex digits), HEAD~N (N changes ago in that store),
or a time such as 2026-11-30T10:00 (UTC). To bring an old version back, use
storage_restore."""

RESTORE_DESCRIPTION = """\
Bring back the content a file had at an earlier revision (from storage_history), as a
new change; nothing in the history is lost. Restoring a deleted file recreates it.
    storage_restore(path="notes/oncall.md", rev="3f2c1e0")
Version check, as for storage_write: you must have read the file's current version and
nobody changed it since; otherwise you get a CONFLICT and nothing is changed (read it,
check with storage_history(action="diff") what changed, then decide). force=true
overwrites other agents' changes on purpose."""


def iso(at: float) -> str:
    """UTC ISO-8601 with seconds, e.g. 2026-11-30T13:22:59Z."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry_fields(store: str, entry: Entry) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "store": store, "rev": entry.rev, "short": entry.short, "at": entry.at,
        "time": iso(entry.at), "author": entry.author, "op": entry.op,
        "summary": entry.summary, "forced": entry.forced, "digest": entry.digest,
        "delegate": entry.delegate,
    }
    if entry.patch is not None:
        fields["patch"] = entry.patch
    return fields


@operation(LogRequest, summary="Changes of the store, a folder or a file, newest first",
           rest=Rest("GET", f"{STORE}/history", renames={"n": "limit", "path": "file"},
                     adjust=store_path),
           tool=Tool("storage_history", HISTORY_DESCRIPTION, title="History of memory files",
                     arguments=HistoryArguments, run="history"))
def log(call: Call, request: LogRequest) -> dict[str, Any]:
    from memfs.store.history.repo import parse_time

    target = None if request.path is None else call.store_or_path(request.path)
    since = None if request.since is None else parse_time(request.since)
    until = None if request.until is None else parse_time(request.until)
    entries = call.engine.history.log(call.agent, target, limit=request.limit, since=since,
                              until=until, start=request.rev, author=request.author,
                              patch=request.patch)
    return {"entries": [entry_fields(store, entry) for store, entry in entries]}


@operation(ShowRequest, summary="A file as it was at REV")
def show(call: Call, request: ShowRequest) -> dict[str, Any]:
    path = call.path(request.path)
    commit, data = call.engine.history.version_at(call.agent, path, request.rev)
    result: dict[str, Any] = {"path": str(path), "rev": commit, "short": commit[:7],
                              "size": len(data)}
    if request.encoding != "text":
        if request.offset != 1 or request.limit is not None:
            raise InvalidInput(f"offset and limit page through text; not with {request.encoding}")
        result.update(content_fields(request.encoding, data))
        return result
    page = page_of_bytes(data, request.offset, request.limit)
    result.update(text=page.text, offset=page.offset, lines=page.lines,
                  total_lines=page.total_lines, next_offset=page.next_offset)
    return result


@operation(DiffRequest, summary="A unified diff of a file: since you last read it, from "
           "REV, or REV..REV",
           rest=Rest("GET", f"{STORE}/diff", renames={"path": "file"}, adjust=store_path))
def diff(call: Call, request: DiffRequest) -> dict[str, Any]:
    path = call.path(request.path)
    old = new = None
    if request.rev is not None:
        old, dots, rest = request.rev.partition("..")
        if dots:
            new = rest
        if not old or (dots and not rest):
            raise InvalidInput(f"bad range {request.rev!r}: use REV or REV..REV")
    found = call.engine.history.diff(call.agent, path, old, new)
    return {"path": str(path), "old": found.old, "new": found.new, "diff": found.text}


@operation(RestoreRequest, summary="Write a file back as it was at REV (version-checked; "
           "If-Match honoured)", access="write",
           rest=Rest("POST", f"{STORE}/restore", renames={"path": "file"}, adjust=store_path,
                     conditional=True),
           tool=Tool("storage_restore", RESTORE_DESCRIPTION, title="Restore an old version",
                     omit=("expect",), run="restore", destructive=True))
def restore(call: Call, request: RestoreRequest) -> dict[str, Any]:
    path = call.path(request.path)
    committed = call.engine.restore(call.agent, path, request.rev, force=request.force,
                                    expected=request.expect, precondition=call.precondition)
    return committed_fields(committed)
