"""The storage ops: list, read, stat, write, delete, search and whoami, each declared
with its request model, its handler and its MCP tools (control/ops/registry.py). Their
REST endpoints (but whoami's) are shaped by hand (control/http/files.py): they are
about files, not about one request each. The tools that are not one request as such
(a search by pattern or by command line, a write by content or by sed, a local file's
download or upload) declare their arguments' model here; control/mcp/storage.py
carries them out."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Annotated, Any, Literal, Required

from pydantic import BaseModel, Field, field_validator, model_validator
from typing_extensions import TypedDict  # pydantic reads it (see jail/rg_json.py)

from memfs.control.ops.registry import ARGUMENTS_CONFIG, Call, Rest, Tool, operation
from memfs.control.protocol.base import (
    EXPECT_PATTERN,
    MAX_ARG_LEN,
    MAX_ARGS,
    Arg,
    BaseRequest,
    Encoding,
    matching,
    wire_encoding,
)
from memfs.control.protocol.wire import ProtocolError
from memfs.jail.rg_json import Match
from memfs.store.errors import InvalidInput
from memfs.store.fs.paths import MemPath

if TYPE_CHECKING:
    from memfs.store.engine import Committed
    from memfs.store.read.versions import Pinned


PATH_DESCRIPTION = ("File path as STORE/PATH, e.g. notes/oncall.md (a /memory/ prefix is "
                    "fine).")
FORCE_DESCRIPTION = ("Skip the version check and overwrite changes you have not seen. Only "
                     "on purpose, never to get past a conflict blindly.")
LocalPath = Annotated[str, Field(min_length=1, max_length=4096)]


class ListRequest(BaseRequest):
    op: Literal["list"]
    patterns: list[Arg] = Field(default_factory=list, max_length=MAX_ARGS, description=(
        'Globs over STORE/PATH, e.g. ["notes/**", "**/*.md"]; omit for every file you can '
        "read."))


class ReadRequest(BaseRequest):
    op: Literal["read"]
    path: Arg = Field(description=PATH_DESCRIPTION)
    offset: int = Field(default=1, ge=1, description="First line to show, 1-based (default 1).")
    # number of lines; None: to the end (a tool's page: 2000)
    limit: int | None = Field(default=None, ge=1, description=(
        "Number of lines to show (default 2000)."))
    encoding: Encoding = "text"

    _encoding = field_validator("encoding")(wire_encoding)


class StatRequest(BaseRequest):
    op: Literal["stat"]
    path: Arg


# A GNU sed script: no control character but tab and newline (sed has no command of
# one; a script meaning one writes its escape, \t or \x01). The OpenAPI document's
# PATCH takes the same (control/http/openapi.py).
SED_PATTERN = r"^[^\x00-\x08\x0b-\x1f\x7f]*$"
SedScript = Annotated[str, Field(max_length=65536), *matching(
    SED_PATTERN, "sed script", "no control characters but tab and newline (write them as "
    "sed escapes: \\x01)")]


class WriteRequest(BaseRequest):
    op: Literal["write"]
    path: Arg
    content: str | bytes | None = None  # bytes: in process only (JSON has none)
    content_b64: str | None = None
    sed: list[SedScript] | None = Field(
        default=None, min_length=1, max_length=MAX_ARGS
    )
    append: bool = False
    force: bool = False
    # The version this connection last read or wrote, or "absent" when it saw no file
    # there (clients fill it in, never the model): two processes of one agent share
    # its record, this tells them apart.
    expect: str | None = Field(default=None, pattern=EXPECT_PATTERN)

    @model_validator(mode="after")
    def _one_source(self) -> WriteRequest:
        given = [self.content is not None, self.content_b64 is not None, self.sed is not None]
        if sum(given) != 1:
            raise ValueError("give exactly one of content, content_b64, sed")
        if self.sed is not None and self.append:
            raise ValueError("append cannot be combined with a sed script")
        return self

    def data(self) -> bytes:
        """The content bytes (not for sed requests); raises ProtocolError on bad base64."""
        if isinstance(self.content, bytes):
            return self.content
        if self.content is not None:
            try:
                return self.content.encode("utf-8")
            except UnicodeEncodeError:  # decode_request refuses these; kept for safety
                raise ProtocolError("invalid", "content is not valid Unicode text",
                                    self.id) from None
        try:  # strict: only the alphabet and correct padding (checked in C, no regex)
            return binascii.a2b_base64(self.content_b64 or "", strict_mode=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("invalid", "content_b64 is not valid base64", self.id) from None


class DeleteRequest(BaseRequest):
    op: Literal["delete"]
    path: Arg
    force: bool = False
    expect: str | None = Field(default=None, pattern=EXPECT_PATTERN)


class SearchRequest(BaseRequest):
    op: Literal["search"]
    # ripgrep arguments as typed: flags, pattern, optional STORE[/PATH]s
    args: list[Arg] = Field(min_length=1, max_length=MAX_ARGS)
    format: Literal["text", "json"] = Field(default="text", description=(
        "text: rg's own output (`output`); json: structured matches (`matches`: path, "
        "line, text, submatches, before, after), from rg's JSON output"))


class SearchArguments(BaseModel):
    """storage_search's: a pattern with flags and paths, or rg's whole command line."""

    model_config = ARGUMENTS_CONFIG

    pattern: str | None = Field(default=None, max_length=MAX_ARG_LEN, description=(
        "The regex to search for (ripgrep syntax). Give this or `args`."))
    flags: list[Arg] | None = Field(default=None, max_length=64, description=(
        'ripgrep flags to use with `pattern`, e.g. ["-i", "-C", "2"].'))
    paths: list[Arg] | None = Field(default=None, max_length=64, description=(
        'Limit the search to these stores, folders or files, e.g. ["notes"] or '
        '["ops/runbooks"]. Default: every store you can read.'))
    args: list[Arg] | None = Field(default=None, max_length=128, description=(
        'Instead of pattern/flags/paths: the whole rg command line, e.g. ["-i", "-w", '
        '"timeout", "ops"].'))


class SearchOutput(TypedDict, total=False):
    """What storage_search's text shows, as data: the matches (path, line, text, the
    matched spans in characters of text, the context lines before and after), or rg's
    own text as output when the flags print something else (-l, -c, -o...); rg's exit
    code (0 matches, 1 none, 2 errors); truncated: some was left out."""

    matches: list[Match]
    output: str
    exit_code: Required[int]
    truncated: Required[bool]


class WriteArguments(BaseModel):
    """storage_write's: the new content (or the text to append), or sed scripts."""

    model_config = ARGUMENTS_CONFIG

    path: Arg = Field(min_length=1, description=PATH_DESCRIPTION)
    content: str | None = Field(default=None, description=(
        "The full new text of the file, or with append=true the text to add at its end. "
        "Give this or `sed`."))
    append: bool = Field(default=False, description=(
        "Add `content` at the end of the file (creating it if needed) instead of replacing "
        "it; needs no prior read."))
    sed: str | list[Annotated[str, Field(max_length=65536)]] | None = Field(
        default=None, max_length=MAX_ARGS, description=(
            'A GNU sed script, or a list of scripts applied in order, run on the file\'s '
            'current content, e.g. "s/old/new/g" or ["/^DRAFT/d", "$a\\\\last line"]. '
            "Give this or `content`."))
    force: bool = Field(default=False, description=FORCE_DESCRIPTION)


class DownloadArguments(BaseModel):
    """storage_download's: the memory file and the local destination."""

    model_config = ARGUMENTS_CONFIG

    path: Arg = Field(min_length=1, description=PATH_DESCRIPTION)
    dest: LocalPath = Field(description=(
        "Local destination file (or existing directory) on the machine running this tool, "
        "e.g. /tmp/work/orders.csv."))


class UploadArguments(BaseModel):
    """storage_upload's: the local file and the memory file it replaces or creates."""

    model_config = ARGUMENTS_CONFIG

    src: LocalPath = Field(description="Local file to send, on the machine running this tool.")
    path: Arg = Field(min_length=1, description=PATH_DESCRIPTION)
    force: bool = Field(default=False, description=FORCE_DESCRIPTION)


class WhoamiRequest(BaseRequest):
    op: Literal["whoami"]


@operation(WhoamiRequest, summary="Who the token's agent is, and its stores",
           rest=Rest("GET", "/v1/whoami"))
def whoami(call: Call, _: WhoamiRequest) -> dict[str, Any]:
    config = call.engine.config
    return {"agent": call.agent,
            "stores": {store: config.access(call.agent, store)
                       for store in call.engine.readable_stores(call.agent)}}


LIST_DESCRIPTION = """\
List files in shared memory, as STORE/PATH (one per line), across every store you may read.

`patterns` are optional globs over STORE/PATH: `*` matches within one path segment,
`**` across segments, `?` one character, `[abc]` a set.
Examples:
  storage_list()                           every file you can read
  storage_list(patterns=["notes/**"])      everything in the store "notes"
  storage_list(patterns=["**/*.md"])       every Markdown file in every store
  storage_list(patterns=["ops/**/*.csv", "notes/2026-*.md"])
Only files are listed (directories appear through their files)."""

READ_DESCRIPTION = """\
Read a text file from shared memory, with numbered lines like `cat -n`
(right-aligned line number, a tab, then the line). The numbers are for reference only:
never include them when you write the file back.

Long files come in pages of `limit` lines (default 2000) starting at line `offset`
(1-based, default 1); when more lines remain the result ends with the exact call that
continues, e.g. `storage_read(path="notes/log.md", offset=2001)`.
Examples:
  storage_read(path="notes/oncall.md")
  storage_read(path="ops/big.log", offset=500, limit=100)

Reading records the version you saw: a later storage_write of this file succeeds only if
nobody changed it since. If the file changed since your previous read, the result starts
with a note saying who changed it and when. For binary files use storage_download."""

SEARCH_DESCRIPTION = """\
Search file contents in shared memory with real ripgrep (rg); matches come back inline
as STORE/PATH:LINE:text. One call covers every store you may read, unless you name stores
or files in `paths`.

Either give `pattern` (a Rust regex) plus optional rg `flags` and `paths`:
  storage_search(pattern="timeout", flags=["-i", "-C", "2"])
  storage_search(pattern="checkout.*5\\\\d\\\\d", paths=["ops"])
  storage_search(pattern="TODO", flags=["-l"], paths=["notes/projects"])
or the whole rg command line as you would type it after `rg`, in `args`:
  storage_search(args=["-i", "-w", "payment failed", "notes", "ops"])
Useful flags: -i ignore case, -w whole words, -F literal string, -C N / -A N / -B N context
lines, -l only file names, -c counts, -m N max matches per file, -g GLOB filter files
(e.g. -g "*.md"), -U multiline. Results are sorted by path, with file names and line
numbers (-N hides line numbers). Flags that run programs or read outside memory (--pre, -z,
--follow, -f, ...) are refused. "No matches" is a normal answer, not an error."""

WRITE_DESCRIPTION = """\
Create, replace, append to or edit a file in shared memory (stores you may write).

Give exactly one of:
  content  the new text of the whole file, or with append=true the text to add at its end
           storage_write(path="notes/oncall.md", content="# On-call\\n...")
           storage_write(path="notes/oncall.md", content="- 03:10 db failover\\n", append=true)
  sed      a GNU sed script (or a list of scripts, applied in order) run on the current
           file, so you can change a few lines without sending the whole file:
           storage_write(path="notes/oncall.md", sed="s/queue-a/queue-b/g")
           storage_write(path="notes/oncall.md", sed=["/obsolete/d", "3a\\\\new line after 3"])
           (sed runs sandboxed: the e, r, w commands are unavailable).

Version check: replacing or sed-editing an existing file requires that you read it
(storage_read or storage_download) and that nobody changed it since. Appending and
creating a new file need no prior read. If the check fails you get a CONFLICT error naming
who changed the file and when: your write was NOT applied. Read the file again, redo your
change on the current content, then retry. Set force=true only to overwrite other agents'
changes on purpose. Content is UTF-8 text; include a final newline if you want one."""

DOWNLOAD_DESCRIPTION = """\
Copy a file from shared memory to a local file on the machine running this tool, to work
on it with other programs (scripts over a CSV, charts, binary files). Byte for byte; the
local file is replaced atomically. If `dest` is an existing directory (or ends with /),
the file keeps its name inside it; missing parent directories are created.
  storage_download(path="ops/orders.csv", dest="/tmp/work/orders.csv")
The version you downloaded is recorded: storage_upload later sends your changed copy back
and is refused if someone else changed the file in the meantime."""

UPLOAD_DESCRIPTION = """\
Copy a local file (on the machine running this tool) back into shared memory, byte for
byte, creating or replacing `path`.
  storage_upload(src="/tmp/work/orders.csv", path="ops/orders.csv")
Version check: replacing an existing file requires that you downloaded (or read) it and
that nobody changed it since; otherwise the upload is refused as a CONFLICT, so rows or
lines another agent added meanwhile are never erased. Then storage_download the file
again, redo your work on the new version, and upload again. force=true overwrites other
agents' changes on purpose."""


@operation(ListRequest, summary="The files of the agent's stores, by glob",
           tool=Tool("storage_list", LIST_DESCRIPTION, title="List memory files",
                     run="list_files"))
def list_files(call: Call, request: ListRequest) -> dict[str, Any]:
    return {"paths": call.engine.list(call.agent, request.patterns)}


@operation(ReadRequest, summary="A file's current version (recorded as read)",
           tool=(Tool("storage_read", READ_DESCRIPTION, title="Read a memory file",
                      omit=("encoding",), run="read"),
                 Tool("storage_download", DOWNLOAD_DESCRIPTION, title="Download a memory file",
                      arguments=DownloadArguments, run="download", local=True,
                      destructive=True)))
def read(call: Call, request: ReadRequest) -> dict[str, Any]:
    path = call.path(request.path)
    if request.encoding != "text":
        if request.offset != 1 or request.limit is not None:
            raise InvalidInput(f"offset and limit page through text; not with {request.encoding}")
        data, pinned = call.engine.read_bytes(call.agent, path)
        result = version_fields(path, pinned)
        result.update(content_fields(request.encoding, data))
        return result
    page, pinned = call.engine.read_page(call.agent, path, request.offset, request.limit)
    result = version_fields(path, pinned)
    result.update(text=page.text, offset=page.offset, lines=page.lines,
                  total_lines=page.total_lines, next_offset=page.next_offset)
    return result


@operation(StatRequest, summary="A file's digest, size and last writer")
def stat(call: Call, request: StatRequest) -> dict[str, Any]:
    info = call.engine.info(call.agent, call.path(request.path))
    return {
        "path": str(info.path), "digest": info.digest, "size": info.size,
        "seen": info.seen, "changed_since_last_read": info.seen not in (None, info.digest),
        "last_writer": info.last_writer, "last_written_at": info.last_written_at,
    }


@operation(WriteRequest, summary="Replace, append to or sed-edit a file (version-checked)",
           access="write",
           tool=(Tool("storage_write", WRITE_DESCRIPTION, title="Write a memory file",
                      arguments=WriteArguments, run="write", destructive=True),
                 Tool("storage_upload", UPLOAD_DESCRIPTION, title="Upload a memory file",
                      arguments=UploadArguments, run="upload", local=True,
                      destructive=True)))
def write(call: Call, request: WriteRequest) -> dict[str, Any]:
    path = call.path(request.path)
    if request.sed is not None:
        jail, scripts, agent = call.jail(), request.sed, call.agent
        committed = call.engine.edit(
            agent, path, lambda data: jail.sed(scripts, data, caller=agent),
            force=request.force, expected=request.expect, precondition=call.precondition,
        )
    else:
        committed = call.engine.write(
            call.agent, path, request.data(), append=request.append, force=request.force,
            expected=request.expect, precondition=call.precondition,
        )
    return committed_fields(committed)


@operation(DeleteRequest, summary="Delete a file (version-checked)", access="write")
def delete(call: Call, request: DeleteRequest) -> dict[str, Any]:
    path = call.path(request.path)
    committed = call.engine.delete(call.agent, path, force=request.force,
                                   expected=request.expect, precondition=call.precondition)
    return {"path": str(path), "deleted": True, "commit": committed.commit}


@operation(SearchRequest, summary="ripgrep over the agent's stores, jailed (not a read): "
           "its text, or structured matches",
           tool=Tool("storage_search", SEARCH_DESCRIPTION, title="Search memory (ripgrep)",
                     arguments=SearchArguments, run="search", output=SearchOutput))
def search(call: Call, request: SearchRequest) -> dict[str, Any]:
    jail, engine = call.jail(), call.engine
    stores = {name: engine.store_dir(name) for name in engine.readable_stores(call.agent)}

    def exists(path: str) -> None:
        # A path to search is checked before rg runs, as any command's path: a store
        # the agent cannot see or a path that does not exist is not_found, with the
        # names it may have meant (never rg's own error about a missing file).
        engine.require(call.agent, call.store_or_path(path))

    outcome = jail.search(stores, request.args, check=exists, hidden=engine.planted,
                          mount=str(engine.config.mount), caller=call.agent,
                          structured=request.format == "json")
    found: dict[str, Any] = (
        {"output": outcome.output.decode("utf-8", "replace")} if outcome.matches is None
        else {"matches": outcome.matches})
    return {**found, "exit_code": outcome.exit_code, "truncated": outcome.truncated,
            "stderr": outcome.stderr}


def committed_fields(committed: Committed) -> dict[str, Any]:
    """The reply of a write, edit or restore: the new version, the one it replaced
    (None: created), its commit, and ``unchanged`` (the file already held exactly
    this: nothing was committed)."""
    return {"path": str(committed.path), "digest": committed.digest,
            "size": committed.size, "created": committed.created,
            "previous_digest": committed.previous, "commit": committed.commit,
            "unchanged": committed.unchanged}


def content_fields(encoding: str, data: bytes) -> dict[str, Any]:
    """A whole file's bytes in a reply: as they are (``bytes``, in process) or base64."""
    if encoding == "bytes":
        return {"content": data}
    return {"content_b64": base64.b64encode(data).decode("ascii")}


def version_fields(path: MemPath, pinned: Pinned) -> dict[str, Any]:
    """The reply fields of a version read: digest, size, writer, what the agent saw."""
    version = pinned.version
    return {
        "path": str(path),
        "digest": version.digest,
        "size": version.size,
        "changed_since_last_read": pinned.changed_since_seen,
        "previous_digest": pinned.previous,
        "last_writer": version.last_write.agent,
        "last_written_at": version.last_write.at,
    }
