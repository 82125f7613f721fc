"""A small synchronous client for the control socket.

Deliberately free of pydantic, trio and the server stack so that ``memfs cat`` starts
fast; the dicts it sends are the JSON form of the models in control/protocol/wire.py (a
test checks that they validate). Thread-safe: one request at a time per connection.
"""

from __future__ import annotations

import _socket  # not `socket`: its enum-heavy import costs the CLI startup time
import _thread
import binascii
import itertools
import os

from control.client import jsonlite as jsonlite

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs startup time
if TYPE_CHECKING:
    from typing import Any

    Records = list[dict[str, Any]]  # `list` is also a method name inside Client

DEFAULT_SOCKET = "/run/memfs/control.sock"
ABSENT = "absent"  # an expectation meaning "this connection saw no file here"
StrList = list[str]  # `list` is also a method name inside Client


def default_socket() -> str:
    """``MEMFS_SOCKET``, else the personal daemon's socket when this user runs one
    (memfs/places.py: a socket of this uid there), else the system one."""
    from memfs.places import running_socket

    return os.environ.get("MEMFS_SOCKET") or running_socket() or DEFAULT_SOCKET


class MemfsClientError(Exception):
    """Base class of errors raised by the client. ``code`` is the protocol's error code
    (``connection`` when the daemon cannot be reached)."""

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


class InternalError(MemfsClientError):
    code = "internal"


class ConnectionFailed(MemfsClientError):
    code = "connection"


_BY_CODE: dict[str, type[MemfsClientError]] = {
    cls.code: cls
    for cls in (ConflictError, LeaseHeldError, LeaseLostError, PermissionDeniedError,
                NotFoundError, InvalidError, TooLargeError, BusyError, NoSpaceError,
                InternalError)
}


def encode_request(op: str, request_id: int, as_agent: str | None, **fields: Any) -> bytes:
    """One request line, the JSON form of control.protocol's models."""
    request = {"op": op, "id": request_id, **fields}
    if as_agent is not None:
        request["as_agent"] = as_agent
    return jsonlite.dumps(request).encode() + b"\n"


class Client:
    def __init__(self, socket_path: str | None = None, as_agent: str | None = None) -> None:
        self.socket_path = socket_path or default_socket()
        self.as_agent = as_agent
        self._ids = itertools.count(1)
        self._lock = _thread.allocate_lock()
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
        # path -> what this connection last saw there: the digest it read or wrote, or
        # ABSENT (a read found no file, or it deleted the file). Sent as ``expect``
        # with replaces, edits and deletes: another process of the same agent shares
        # the daemon's per-agent record, and this keeps their writes apart.
        self._versions: dict[str, str] = {}

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

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return its result; raises the MemfsClientError
        subclass matching the reply's error code."""
        line = encode_request(op, next(self._ids), self.as_agent, **fields)
        with self._lock:
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
        cls = _BY_CODE.get(str(failure.get("code")), InternalError)
        raise cls(failure.get("message", "unknown error"), failure.get("details"))

    # -- operations ----------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        return self.call("whoami")

    def list(self, *patterns: str) -> StrList:
        paths: StrList = self.call("list", patterns=[*patterns])["paths"]
        return paths

    def _key(self, path: str) -> str:
        return path.removeprefix("/memory/")

    def _versioned(self, op: str, path: str, force: bool, **fields: Any) -> dict[str, Any]:
        """A replace, edit or delete carrying this connection's version of ``path``."""
        expect = None if force else self._versions.get(self._key(path))
        result = self.call(op, path=path, force=force, expect=expect, **fields)
        self._versions[self._key(path)] = ABSENT if op == "delete" else result["digest"]
        return result

    def _observe(self, op: str, path: str, **fields: Any) -> dict[str, Any]:
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

    def read(self, path: str, offset: int = 1, limit: int | None = None) -> dict[str, Any]:
        """Read text lines [offset, offset+limit); the result carries ``text``,
        ``next_offset`` and ``changed_since_last_read``."""
        return self._observe("read", path, offset=offset, limit=limit)

    def read_bytes(self, path: str) -> tuple[bytes, dict[str, Any]]:
        """The exact bytes of the file and the reply's metadata."""
        result = self._observe("read", path, encoding="base64")
        return binascii.a2b_base64(result.pop("content_b64")), result

    def stat(self, path: str) -> dict[str, Any]:
        """Digest, size, last writer; records nothing, except that no file is there."""
        return self._observe("stat", path)

    def write(self, path: str, content: bytes | str, *, append: bool = False,
              force: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = (
            {"content": content} if isinstance(content, str)
            else {"content_b64": binascii.b2a_base64(content, newline=False).decode("ascii")}
        )
        if append:  # needs no version
            result = self.call("write", path=path, append=True, force=force, **data)
            key, previous = self._key(path), str(result.get("previous_digest") or "")
            # The new version is known here only if the one appended to was (or there
            # was none); otherwise this connection has not seen the whole file, and
            # expecting the version it appended to makes a later replace a conflict.
            known = not previous or self._versions.get(key) == previous
            self._versions[key] = result["digest"] if known else previous
            return result
        return self._versioned("write", path, force, **data)

    def edit(self, path: str, scripts: StrList, *, force: bool = False) -> dict[str, Any]:
        return self._versioned("write", path, force, sed=[*scripts])

    def delete(self, path: str, *, force: bool = False) -> dict[str, Any]:
        return self._versioned("delete", path, force)

    def search(self, args: StrList) -> dict[str, Any]:
        return self.call("search", args=[*args])

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

    def restore(self, path: str, rev: str, *, force: bool = False) -> dict[str, Any]:
        """Write the content ``path`` had at ``rev`` back (version-checked)."""
        return self._versioned("restore", path, force, rev=rev)
