"""A small synchronous client for the control socket.

Deliberately free of pydantic, trio and the server stack so that ``memfs cat`` starts
fast; the dicts it sends are the JSON form of the models in control/protocol.py (a
test checks that they validate). Thread-safe: one request at a time per connection.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import socket
import threading
from typing import Any

DEFAULT_SOCKET = "/run/memfs/control.sock"


def default_socket() -> str:
    return os.environ.get("MEMFS_SOCKET") or DEFAULT_SOCKET


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


class PermissionDeniedError(MemfsClientError):
    code = "permission_denied"


class NotFoundError(MemfsClientError):
    code = "not_found"


class InvalidError(MemfsClientError):
    code = "invalid"


class TooLargeError(MemfsClientError):
    code = "too_large"


class InternalError(MemfsClientError):
    code = "internal"


class ConnectionFailed(MemfsClientError):
    code = "connection"


_BY_CODE: dict[str, type[MemfsClientError]] = {
    cls.code: cls
    for cls in (ConflictError, PermissionDeniedError, NotFoundError, InvalidError,
                TooLargeError, InternalError)
}


class Client:
    def __init__(self, socket_path: str | None = None, as_agent: str | None = None) -> None:
        self.socket_path = socket_path or default_socket()
        self.as_agent = as_agent
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(self.socket_path)
        except OSError as error:
            self._sock.close()
            raise ConnectionFailed(
                f"cannot reach the memfs daemon at {self.socket_path}: {error.strerror}"
                " (is `memfs serve` running? set --socket or MEMFS_SOCKET)"
            ) from None
        self._reader = self._sock.makefile("rb")

    def close(self) -> None:
        self._reader.close()
        self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return its result; raises the MemfsClientError
        subclass matching the reply's error code."""
        request = {"op": op, "id": next(self._ids), **fields}
        if self.as_agent is not None:
            request["as_agent"] = self.as_agent
        line = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            try:
                self._sock.sendall(line)
                reply_line = self._reader.readline()
            except OSError as error:
                raise ConnectionFailed(f"connection to the daemon failed: {error}") from None
        if not reply_line:
            raise ConnectionFailed("the daemon closed the connection")
        reply = json.loads(reply_line)
        if reply.get("ok"):
            result: dict[str, Any] = reply["result"]
            return result
        error = reply.get("error") or {}
        cls = _BY_CODE.get(error.get("code"), InternalError)
        raise cls(error.get("message", "unknown error"), error.get("details"))

    # -- operations ----------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        return self.call("whoami")

    def list(self, *patterns: str) -> list[str]:
        paths: list[str] = self.call("list", patterns=list(patterns))["paths"]
        return paths

    def read(self, path: str, offset: int = 1, limit: int | None = None) -> dict[str, Any]:
        """Read text lines [offset, offset+limit); the result carries ``text``,
        ``next_offset`` and ``changed_since_last_read``."""
        return self.call("read", path=path, offset=offset, limit=limit)

    def read_bytes(self, path: str) -> tuple[bytes, dict[str, Any]]:
        """The exact bytes of the file and the reply's metadata."""
        result = self.call("read", path=path, encoding="base64")
        return base64.b64decode(result.pop("content_b64")), result

    def stat(self, path: str) -> dict[str, Any]:
        return self.call("stat", path=path)

    def write(self, path: str, content: bytes | str, *, append: bool = False,
              force: bool = False) -> dict[str, Any]:
        if isinstance(content, str):
            return self.call("write", path=path, content=content, append=append, force=force)
        b64 = base64.b64encode(content).decode("ascii")
        return self.call("write", path=path, content_b64=b64, append=append, force=force)

    def edit(self, path: str, scripts: list[str], *, force: bool = False) -> dict[str, Any]:
        return self.call("write", path=path, sed=list(scripts), force=force)

    def delete(self, path: str, *, force: bool = False) -> dict[str, Any]:
        return self.call("delete", path=path, force=force)

    def search(self, args: list[str]) -> dict[str, Any]:
        return self.call("search", args=list(args))
