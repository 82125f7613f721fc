"""A small synchronous client for the control socket.

Deliberately free of pydantic, trio and the server stack so that ``memfs cat`` starts
fast; the dicts it sends are the JSON form of the ops' request models (control/ops/; a
test checks that they validate). Thread-safe: one request at a time per connection.
"""

from __future__ import annotations

import _socket  # not `socket`: its enum-heavy import costs the CLI startup time
import _thread
import binascii
import itertools

from memfs.control.client import jsonlite as jsonlite

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs startup time
if TYPE_CHECKING:
    from typing import Any, Protocol

    Records = list[dict[str, Any]]  # `list` is also a method name inside Client

    class Transport(Protocol):
        """How a `Client`'s requests are carried out: `exchange` returns an op's result
        or raises the MemfsClientError of its error code."""

        socket_path: str

        def exchange(self, op: str, fields: dict[str, Any]) -> dict[str, Any]: ...

        def peer_closed(self) -> bool: ...

        def close(self) -> None: ...

    from typing import NotRequired, TypedDict

    class Committed(TypedDict):
        """What an accepted write, edit or restore changed."""

        path: str
        digest: str  # of the new version
        size: int
        created: bool
        previous_digest: str | None  # the version it replaced (None: created)
        commit: str | None  # its history commit (None: no history, or unchanged)
        unchanged: bool  # the file held exactly this already: nothing was committed

    class FileVersion(TypedDict):
        """A version of a file as a read or a stat returns it."""

        path: str
        digest: str
        size: int
        changed_since_last_read: bool
        previous_digest: NotRequired[str | None]  # what the agent saw before (reads)
        seen: NotRequired[str | None]  # what the agent last saw (stat)
        last_writer: str | None
        last_written_at: float | None
        text: NotRequired[str]  # a read's lines (text reads)
        offset: NotRequired[int]
        lines: NotRequired[int]
        total_lines: NotRequired[int]
        next_offset: NotRequired[int | None]
        content_b64: NotRequired[str]  # a read's bytes (base64 reads)

DEFAULT_SOCKET = "/run/memfs/control.sock"
ABSENT = "absent"  # an expectation meaning "this connection saw no file here"
StrList = list[str]  # `list` is also a method name inside Client


def default_socket() -> str:
    """``MEMFS_SOCKET``, else the personal daemon's socket when this user runs one
    (memfs/places.py's `find_socket`: found from the uid alone too), else the system
    one (there or not)."""
    from memfs.places import NoDaemon, find_socket

    try:
        return find_socket()
    except NoDaemon:
        return DEFAULT_SOCKET


class MemfsClientError(Exception):
    """Base class of errors raised by the client. ``code`` is the error code
    (memfs/errors.py): the reply's, or ``connection`` when the daemon cannot be reached."""

    code = "internal"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class ConflictError(MemfsClientError):
    """The file changed since this agent last read it (or it never read it)."""

    code = "conflict"


class LeaseHeldError(MemfsClientError):
    """Another agent holds an unexpired lease on the task (details: holder, expires_at)."""

    code = "lease_held"


class LeaseLostError(MemfsClientError):
    """This agent no longer holds the task's lease (another agent took it, or it was
    released or completed)."""

    code = "lease_lost"


class ClosedError(MemfsClientError):
    """The record no longer takes this operation: a session handed off, a task done, a
    decision superseded; nothing was changed."""

    code = "closed"


class PermissionDeniedError(MemfsClientError):
    code = "permission_denied"


class NotFoundError(MemfsClientError):
    code = "not_found"


class InvalidError(MemfsClientError):
    code = "invalid"


class TooLargeError(MemfsClientError):
    code = "too_large"


class BusyError(MemfsClientError):
    """A daemon limit was reached (connections, buffered requests, jailed runs at
    once); nothing was done and the same call may succeed a moment later."""

    code = "busy"


class NoSpaceError(MemfsClientError):
    """The memory's disk is full: nothing was changed; the same call may succeed once
    space is freed."""

    code = "no_space"


class MirrorFailedError(MemfsClientError):
    """A push asked for did not bring a mirror up to date (details: ``mirrors``, each
    with its state and last error); the memory itself is unchanged."""

    code = "mirror_failed"


class UnavailableError(MemfsClientError):
    """This daemon cannot do it on its host (search and sed edits, when the kernel
    lacks what the jail needs; the message says what to enable)."""

    code = "unavailable"


class InternalError(MemfsClientError):
    code = "internal"


class UnauthenticatedError(MemfsClientError):
    """The daemon's HTTP listener refused the bearer token (unknown, revoked or
    expired) or got none (control/client/http.py)."""

    code = "unauthenticated"


class ConnectionFailed(MemfsClientError):
    code = "connection"


# Each class above names its code: one for each code of memfs/errors.py a client meets.
_BY_CODE: dict[str, type[MemfsClientError]] = {
    cls.code: cls for cls in MemfsClientError.__subclasses__()}


def request_content(data: bytes) -> dict[str, str]:
    """How a write's bytes travel: as text (``content``) when they are UTF-8 whose JSON
    string is no longer than their base64, else as base64 (``content_b64``). Either way
    the daemon gets the very bytes back; text spares both sides the base64 (in the
    daemon ~19% of the instructions of a 4 KiB replace), and the length rule keeps a
    file of control characters (6 bytes each, escaped) within the line limit, which
    counts on base64."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        # UTF-8 bytes of the JSON string: escaping touches only ASCII characters
        size = jsonlite.string_length(text) + len(data) - len(text)
        if size <= (len(data) + 2) // 3 * 4 + 2:
            return {"content": text}
    return {"content_b64": binascii.b2a_base64(data, newline=False).decode("ascii")}


def encode_request(op: str, request_id: int, as_agent: str | None, **fields: Any) -> bytes:
    """One request line, the JSON form of control.protocol's models."""
    request = {"op": op, "id": request_id, **fields}
    if as_agent is not None:
        request["as_agent"] = as_agent
    return jsonlite.dumps(request).encode() + b"\n"


class SocketTransport:
    """Requests over the daemon's Unix socket, one line each way; ``as_agent`` goes in
    every request (a delegate acting for that agent; in personal mode the agent's
    name). Raises ConnectionFailed when the daemon cannot be reached."""

    def __init__(self, socket_path: str | None = None, as_agent: str | None = None) -> None:
        from memfs.places import NoDaemon, find_socket

        try:
            self.socket_path = find_socket(socket_path)
        except NoDaemon as error:
            raise ConnectionFailed(str(error)) from None
        self.as_agent = as_agent
        self._ids = itertools.count(1)
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self._sock.connect(self.socket_path)
        except OSError as error:
            self._sock.close()
            raise ConnectionFailed(
                f"cannot reach the memfs daemon at {self.socket_path}: {error.strerror}"
                " (is `memfs serve` running? set --socket or MEMFS_SOCKET)"
            ) from None
        self._pending = b""  # bytes received after the last reply line

    def close(self) -> None:
        self._sock.close()

    def peer_closed(self) -> bool:
        """True if the daemon closed this connection (e.g. it restarted). The daemon
        never sends unprompted, so a readable socket between calls means EOF.
        Never blocks."""
        try:
            peeked = self._sock.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return peeked == b""

    def _readline(self) -> bytes:
        """The next reply line without its newline; b"" if the daemon hung up."""
        chunks = [self._pending]
        while b"\n" not in chunks[-1]:
            chunk = self._sock.recv(1 << 20)
            if not chunk:
                return b""
            chunks.append(chunk)
        line, _, self._pending = b"".join(chunks).partition(b"\n")
        return line

    def _last_words(self) -> bytes:
        """A complete line the daemon sent before the connection broke, or b"".
        Never blocks."""
        data = self._pending
        try:
            while b"\n" not in data:
                chunk = self._sock.recv(1 << 16, _socket.MSG_DONTWAIT)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        line, newline, self._pending = data.partition(b"\n")
        return line if newline else b""

    def exchange(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its result; raises the MemfsClientError
        subclass matching the reply's error code. The caller holds the client's lock."""
        line = encode_request(op, next(self._ids), self.as_agent, **fields)
        try:
            self._sock.sendall(line)
            reply_line = self._readline()
        except OSError as error:
            # A daemon over its connection limit sends one error line and closes:
            # report that line rather than the broken pipe it causes.
            reply_line = self._last_words()
            if not reply_line:
                raise ConnectionFailed(f"connection to the daemon failed: {error}") from None
        if not reply_line:
            raise ConnectionFailed("the daemon closed the connection")
        reply = jsonlite.loads(reply_line.decode())
        if reply.get("ok"):
            result: dict[str, Any] = reply["result"]
            return result
        failure = reply.get("error") or {}
        raise error_for(str(failure.get("code")), failure.get("message", "unknown error"),
                        failure.get("details"))


def error_for(code: str, message: str, details: dict[str, Any] | None = None
              ) -> MemfsClientError:
    """The client's exception for a protocol error code (InternalError for one it does
    not know)."""
    return _BY_CODE.get(code, InternalError)(message, details)


class Client:
    """The ops as methods, over one transport: the daemon's socket (the default,
    `SocketTransport`), its HTTP listener (control/client/http.py: ``expect`` travels
    as If-Match) or a dispatcher in this very process (control/client/inproc.py). It
    keeps what this connection last saw of each path and sends it as ``expect`` with
    replaces, edits and deletes: another process of the same agent shares the
    daemon's per-agent record, and this keeps their writes apart."""

    def __init__(self, socket_path: str | None = None, as_agent: str | None = None, *,
                 transport: Transport | None = None) -> None:
        self.transport = transport or SocketTransport(socket_path, as_agent)
        self._lock = _thread.allocate_lock()
        # path -> what this connection last saw there: the digest it read or wrote, or
        # ABSENT (a read found no file, or it deleted the file)
        self._versions: dict[str, str] = {}

    @property
    def socket_path(self) -> str:
        """Where requests go (a socket path, or what the transport calls itself)."""
        return self.transport.socket_path

    def close(self) -> None:
        self.transport.close()

    def peer_closed(self) -> bool:
        """True if the other end closed this connection (e.g. the daemon restarted)."""
        return self.transport.peer_closed()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Carry out one request and return its result; raises the MemfsClientError
        subclass matching its error code."""
        with self._lock:
            return self.transport.exchange(op, fields)

    # -- operations ----------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        return self.call("whoami")

    def list(self, *patterns: str) -> StrList:
        paths: StrList = self.call("list", patterns=[*patterns])["paths"]
        return paths

    def _key(self, path: str) -> str:
        return path.removeprefix("/memory/")

    def _versioned(self, op: str, path: str, force: bool, **fields: Any) -> Any:
        """A replace, edit or delete carrying this connection's version of ``path``."""
        expect = None if force else self._versions.get(self._key(path))
        result = self.call(op, path=path, force=force, expect=expect, **fields)
        self._versions[self._key(path)] = ABSENT if op == "delete" else result["digest"]
        return result

    def _observe(self, op: str, path: str, **fields: Any) -> Any:
        """A read or stat; what it saw (a digest, or that no file is there) becomes
        this connection's version of ``path``."""
        try:
            result = self.call(op, path=path, **fields)
        except NotFoundError:
            self._versions[self._key(path)] = ABSENT
            raise
        if op == "read":
            self._versions[self._key(path)] = result["digest"]
        return result

    def read(self, path: str, offset: int = 1, limit: int | None = None) -> FileVersion:
        """Read text lines [offset, offset+limit); the result carries ``text``,
        ``next_offset`` and ``changed_since_last_read``."""
        version: FileVersion = self._observe("read", path, offset=offset, limit=limit)
        return version

    def read_bytes(self, path: str) -> tuple[bytes, FileVersion]:
        """The exact bytes of the file and the reply's metadata."""
        result: FileVersion = self._observe("read", path, encoding="base64")
        return binascii.a2b_base64(result.pop("content_b64")), result

    def stat(self, path: str) -> FileVersion:
        """Digest, size, last writer; records nothing, except that no file is there."""
        version: FileVersion = self._observe("stat", path)
        return version

    def write(self, path: str, content: bytes | str, *, append: bool = False,
              force: bool = False) -> Committed:
        data = {"content": content} if isinstance(content, str) else request_content(content)
        try:
            return self._write(path, data, append=append, force=force)
        except TooLargeError as error:
            limit = error.details.get("max_file_size")
            if limit is None:
                raise
            size = len(content.encode() if isinstance(content, str) else content)
            grown = error.details.get("size")
            what = (f"appending {size} bytes would make it {grown} bytes," if append and grown
                    else f"{size} bytes is")
            raise TooLargeError(f"{path}: {what} more than the daemon takes in one file "
                                f"(max_file_size = {limit} bytes)", error.details) from None

    def _write(self, path: str, data: dict[str, Any], *, append: bool, force: bool
               ) -> Committed:
        if append:  # needs no version
            result: Any = self.call("write", path=path, append=True, force=force, **data)
            key, previous = self._key(path), str(result.get("previous_digest") or "")
            # The new version is known here only if the one appended to was (or there
            # was none); otherwise this connection has not seen the whole file, and
            # expecting the version it appended to makes a later replace a conflict.
            known = not previous or self._versions.get(key) == previous
            self._versions[key] = result["digest"] if known else previous
            appended: Committed = result
            return appended
        committed: Committed = self._versioned("write", path, force, **data)
        return committed

    def edit(self, path: str, scripts: StrList, *, force: bool = False) -> Committed:
        committed: Committed = self._versioned("write", path, force, sed=[*scripts])
        return committed

    def delete(self, path: str, *, force: bool = False) -> dict[str, Any]:
        deleted: dict[str, Any] = self._versioned("delete", path, force)
        return deleted

    def search(self, args: StrList, *, structured: bool = False) -> dict[str, Any]:
        """ripgrep with ``args``: its text (``output``), or with ``structured`` its
        matches (``matches``: see jail/rg_json.py). ``format`` is sent only when
        structured: a daemon from before it answers the text form as ever."""
        if structured:
            return self.call("search", args=[*args], format="json")
        return self.call("search", args=[*args])

    def recall(self, query: str, *, store: str | None = None, limit: int = 10,
               page: int = 1) -> dict[str, Any]:
        """Ranked recall: the files that best match ``query`` (records nothing)."""
        return self.call("recall", query=query, store=store, limit=limit, page=page)

    def reindex(self, store: str | None = None) -> dict[str, Any]:
        """Rebuild recall's index of ``store`` (None: each store you may read)."""
        return self.call("reindex", store=store)

    # -- history -------------------------------------------------------------------

    def log(self, target: str | None = None, *, limit: int = 20, since: str | None = None,
            author: str | None = None, patch: bool = False) -> Records:
        """Changes newest first, of a file, folder or store (``target``) or of every
        store this agent reads."""
        entries: Records = self.call(
            "log", path=target, limit=limit, since=since, author=author, patch=patch)["entries"]
        return entries

    def show(self, path: str, rev: str, offset: int = 1,
             limit: int | None = None) -> dict[str, Any]:
        """Text lines of ``path`` as it was at ``rev`` (paged like ``read``)."""
        return self.call("show", path=path, rev=rev, offset=offset, limit=limit)

    def show_bytes(self, path: str, rev: str) -> tuple[bytes, dict[str, Any]]:
        result = self.call("show", path=path, rev=rev, encoding="base64")
        return binascii.a2b_base64(result.pop("content_b64")), result

    def diff(self, path: str, rev: str | None = None) -> dict[str, Any]:
        """A unified diff: ``rev`` None = since this agent last saw the file; ``REV`` =
        from REV to now; ``REV..REV``."""
        return self.call("diff", path=path, rev=rev)

    def restore(self, path: str, rev: str, *, force: bool = False) -> Committed:
        """Write the content ``path`` had at ``rev`` back (version-checked)."""
        committed: Committed = self._versioned("restore", path, force, rev=rev)
        return committed
