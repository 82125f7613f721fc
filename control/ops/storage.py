"""The storage ops: list, read, stat, write, delete, search and whoami, each declared
with its request model and handler (control/ops/registry.py). Their REST endpoints
(but whoami's) are shaped by hand (control/http/files.py) and so are their MCP tools
(control/mcp/storage.py): both are about files, not about one request each."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from control.ops.registry import Call, Rest, operation
from control.protocol.base import (
    EXPECT_PATTERN,
    MAX_ARGS,
    Arg,
    BaseRequest,
    Encoding,
    matching,
    wire_encoding,
)
from control.protocol.wire import ProtocolError
from memfs.store.errors import InvalidInput
from memfs.store.paths import MemPath

if TYPE_CHECKING:
    from memfs.store.engine import Committed
    from memfs.store.versions import Pinned


class ListRequest(BaseRequest):
    op: Literal["list"]
    patterns: list[Arg] = Field(default_factory=list, max_length=MAX_ARGS)


class ReadRequest(BaseRequest):
    op: Literal["read"]
    path: Arg
    offset: int = Field(default=1, ge=1)  # first line to return, 1-based
    limit: int | None = Field(default=None, ge=1)  # number of lines; None: to the end
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


class WhoamiRequest(BaseRequest):
    op: Literal["whoami"]


@operation(WhoamiRequest, summary="Who the token's agent is, and its stores",
           rest=Rest("GET", "/v1/whoami"))
def whoami(call: Call, _: WhoamiRequest) -> dict[str, Any]:
    config = call.engine.config
    return {"agent": call.agent,
            "stores": {store: config.access(call.agent, store)
                       for store in call.engine.readable_stores(call.agent)}}


@operation(ListRequest, summary="The files of the agent's stores, by glob")
def list_files(call: Call, request: ListRequest) -> dict[str, Any]:
    return {"paths": call.engine.list(call.agent, request.patterns)}


@operation(ReadRequest, summary="A file's current version (recorded as read)")
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
           access="write")
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
           "its text, or structured matches")
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
