"""The HTTP transport of a `Client`: the same ops over a daemon's REST API
(``/v1``, control/http/), from another machine, with a bearer token.

Each op goes to the REST route made for it: files as ``/v1/stores/{store}/files/{path}``
(GET reads and records the version, HEAD stats, PUT replaces, PATCH appends or
sed-edits, DELETE deletes), search and recall as ``/v1/search``, history, sessions,
tasks and decisions as the ``/v1/stores/{store}/...`` routes the ops declare
(`ROUTES`, checked against control/http/op_routes.py by a test). What the client
sends as ``expect`` travels as ``If-Match: "DIGEST"`` (or ``If-None-Match: *`` when
this client saw no file there), which the daemon checks under the store lock on top
of the token agent's own record: one process's read-then-write is version-checked
exactly as over the socket. Errors are the problem documents' ``code``, raised as the
same MemfsClientError subclasses.

Standard library only (http.client, ssl), imported only when a URL is given: HTTPS
verifies the daemon's certificate against the system's CAs, or against ``cafile``
alone (a self-signed daemon: ``--cacert``, ``MEMFS_CACERT``).
"""

from __future__ import annotations

import binascii
import http.client
import json
import select
import ssl
import time
from email.utils import parsedate_to_datetime
from urllib.parse import quote, urlencode, urlsplit

from memfs.control.client.client import (
    ABSENT,
    ConflictError,
    ConnectionFailed,
    InvalidError,
    MemfsClientError,
    NotFoundError,
    UnauthenticatedError,
    UnavailableError,
    error_for,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

URL_ENV = "MEMFS_URL"
CACERT_ENV = "MEMFS_CACERT"
MOUNT_PREFIX = "/memory/"
STORE = "/v1/stores/{store}"

# op -> (method, path): the ops whose request the daemon builds from the path's
# parameters and the query string (GET) or JSON body (POST), field for field
# (control/http/op_routes.py; a test checks this table against it)
ROUTES: dict[str, tuple[str, str]] = {
    "whoami": ("GET", "/v1/whoami"),
    "reindex": ("POST", "/v1/reindex"),
    "mirror_status": ("GET", "/v1/mirrors"),
    "mirror_push": ("POST", "/v1/mirrors/push"),
    "summary": ("GET", f"{STORE}/summary"),
    "brief": ("GET", f"{STORE}/brief"),
    "session_start": ("POST", f"{STORE}/sessions"),
    "session_checkpoint": ("POST", f"{STORE}/sessions/{{session}}/checkpoints"),
    "session_handoff": ("POST", f"{STORE}/sessions/{{session}}/handoff"),
    "session_list": ("GET", f"{STORE}/sessions"),
    "session_show": ("GET", f"{STORE}/sessions/{{session}}"),
    "task_add": ("POST", f"{STORE}/tasks"),
    "task_list": ("GET", f"{STORE}/tasks"),
    "task_show": ("GET", f"{STORE}/tasks/{{task}}"),
    "task_claim": ("POST", f"{STORE}/tasks/{{task}}/claim"),
    "task_checkpoint": ("POST", f"{STORE}/tasks/{{task}}/checkpoint"),
    "task_complete": ("POST", f"{STORE}/tasks/{{task}}/complete"),
    "task_release": ("POST", f"{STORE}/tasks/{{task}}/release"),
    "decision_record": ("POST", f"{STORE}/decisions"),
    "decision_list": ("GET", f"{STORE}/decisions"),
    "decision_show": ("GET", f"{STORE}/decisions/{{decision}}"),
}
# ops with a route of their own shape (files, search, history): their methods below
SPECIAL = ("list", "read", "stat", "write", "delete", "search", "recall", "log", "show",
           "diff", "restore")
# what the daemon does only over its socket, on its own host
OPERATOR_OPS = ("token_create", "token_list", "token_revoke", "agent_list", "agent_rename",
                "agent_retire")


def parse_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, base path) of a daemon's URL such as
    ``https://memfs.example:7800`` (a path prefix is kept, for a proxy); raises
    InvalidError naming what is wrong. Plain ``http://`` only to a loopback host: the
    daemon serves nothing else without TLS, and the token must not cross a network
    in clear text."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as error:
        raise InvalidError(f"bad URL {url!r}: {error}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidError(f"bad URL {url!r}: it must start with https:// or http://")
    if not parts.hostname:
        raise InvalidError(f"bad URL {url!r}: no host")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidError(f"bad URL {url!r}: give scheme, host, port and path only "
                           "(the token comes from --token-file)")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise InvalidError(f"bad URL {url!r}: http:// would send the token in clear text; "
                           "use https:// (plain http only to localhost, 127.0.0.0/8, ::1, "
                           "as the daemon serves it)")
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname, port or default, parts.path.rstrip("/")


def _loopback(host: str) -> bool:
    """localhost or a loopback address (memfs/config.py's rule for a plain listener)."""
    if host == "localhost":
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split(path: str) -> tuple[str, str]:
    """STORE/PATH (or /memory/STORE/PATH) -> (STORE, PATH); PATH may be ''."""
    path = path.removeprefix(MOUNT_PREFIX).lstrip("/")
    store, _, rest = path.partition("/")
    if not store:
        raise InvalidError(f"bad path {path!r}: give STORE/PATH")
    return store, rest


def _tag(digest: str) -> str:
    return f'"{digest}"'


def _wildcard(text: str) -> bool:
    return any(char in text for char in "*?[")


def page(data: bytes, offset: int, limit: int | None) -> dict[str, Any]:
    """A read's text fields for lines [offset, offset+limit) of ``data``, as the daemon
    gives them (memfs/store/read/pages.py): a last line without a newline counts."""
    pieces = [line + b"\n" for line in data.split(b"\n")]
    pieces[-1] = pieces[-1][:-1]
    if not pieces[-1]:
        pieces.pop()
    total = len(pieces)
    before = offset - 1
    through = total if limit is None else before + limit
    shown = pieces[before:through]
    end = before + len(shown)
    return {"text": b"".join(shown).decode("utf-8", "replace"), "offset": offset,
            "lines": len(shown), "total_lines": total,
            "next_offset": end + 1 if end < total else None}


class HttpTransport:
    """Requests over a daemon's HTTP listener as the agent of ``token`` (one
    keep-alive connection, reopened when the daemon closed it). Raises
    ConnectionFailed when the daemon cannot be reached or TLS fails, InvalidError for
    a bad URL, UnauthenticatedError when the token is refused."""

    def __init__(self, url: str, token: str, *, cafile: str | None = None,
                 timeout: float = 120.0, token_source: str = "the token") -> None:
        self.scheme, self.host, self.port, self.base = parse_url(url)
        self.socket_path = f"{self.scheme}://{self.host}:{self.port}{self.base}"
        self._auth = f"Bearer {token}"
        self.token_source = token_source
        self.timeout = timeout
        self.cafile = cafile
        self._context: ssl.SSLContext | None = None
        if self.scheme == "https":
            try:
                self._context = ssl.create_default_context(cafile=cafile)
            except (OSError, ssl.SSLError) as error:
                raise ConnectionFailed(f"CA file {cafile}: {error}") from None
        self._conn: http.client.HTTPConnection | None = None
        self._stores: list[dict[str, Any]] | None = None

    # -- the connection --------------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def peer_closed(self) -> bool:
        return False  # a closed keep-alive connection is simply opened again

    def _connection(self) -> http.client.HTTPConnection:
        conn = self._conn
        # Readable between requests: the daemon closed it (idle, restart); open anew.
        if conn is not None and conn.sock is not None and \
                select.select([conn.sock], [], [], 0)[0]:
            self.close()
            conn = None
        if conn is None:
            if self._context is not None:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                   context=self._context)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._conn = conn
        return conn

    def _failed(self, error: Exception) -> ConnectionFailed:
        self.close()
        where = self.socket_path
        if isinstance(error, ssl.SSLCertVerificationError):
            return ConnectionFailed(
                f"TLS: the certificate of {where} is not trusted: {error.verify_message} "
                f"(a self-signed daemon: --cacert FILE or {CACERT_ENV})")
        if isinstance(error, ssl.SSLError):
            reason = error.reason or "the connection closed during the handshake"
            return ConnectionFailed(f"TLS with {where} failed: {reason} (is it https? the "
                                    "URL's scheme must match the listener)")
        if isinstance(error, http.client.RemoteDisconnected | http.client.BadStatusLine):
            return ConnectionFailed(f"{where} closed the connection without an HTTP answer "
                                    "(is it a memfs daemon's [http] listener, with the "
                                    "right scheme?)")
        if isinstance(error, TimeoutError):
            return ConnectionFailed(f"no answer from {where} in {self.timeout:.0f} s")
        reason = getattr(error, "strerror", None) or str(error)
        return ConnectionFailed(f"cannot reach the memfs daemon at {where}: {reason}")

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                body: bytes | None = None, json_body: Any = None,
                headers: dict[str, str] | None = None
                ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """(status, headers, body) of one request; an error status is raised as the
        MemfsClientError of its problem's code."""
        target = quote(self.base + path, safe="/")
        if query:
            items = [(name, self._text(value)) for name, value in query.items()
                     if value is not None and not isinstance(value, list)]
            items += [(name, self._text(item)) for name, value in query.items()
                      if isinstance(value, list) for item in value]
            if items:
                target += "?" + urlencode(items)
        sent = {"Authorization": self._auth, "Accept": "application/json",
                **(headers or {})}
        if json_body is not None:
            body = json.dumps(json_body, ensure_ascii=False).encode()
            sent["Content-Type"] = "application/json"
        elif body is not None:
            sent["Content-Type"] = "application/octet-stream"
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, target, body=body, headers=sent)
                response = conn.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as error:
                # a kept-alive connection the daemon closed just now: once more on a
                # new one, if the request is safe to repeat
                self.close()
                if attempt == 1 and method in ("GET", "HEAD"):
                    continue
                raise self._failed(error) from None
            except (OSError, http.client.HTTPException) as error:
                raise self._failed(error) from None
            if response.getheader("Connection", "").lower() == "close":
                self.close()
            if response.status >= 400:
                raise self._error(response.status, response.headers, data,
                                  path if method == "HEAD" else None)
            return response.status, response.headers, data
        raise AssertionError("unreachable")

    @staticmethod
    def _text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def _error(self, status: int, headers: http.client.HTTPMessage, data: bytes,
               head: str | None = None) -> MemfsClientError:
        """The exception of an error answer: its problem document's code and detail, or
        for one without (a HEAD of ``head``, or not a memfs daemon's) its status."""
        problem: dict[str, Any] = {}
        if "json" in (headers.get("Content-Type") or ""):
            try:
                found = json.loads(data)
            except ValueError:
                found = None
            if isinstance(found, dict):
                problem = found
        code = str(problem.get("code") or "")
        message = str(problem.get("detail") or "")
        if status == 401 or code == "unauthenticated":
            return UnauthenticatedError(
                f"{self.socket_path} refused {self.token_source}: "
                f"{message or 'HTTP 401'} (make one with `memfs token create AGENT` on "
                "the daemon's host)")
        if not code:
            fallback = {400: "invalid", 403: "permission_denied", 404: "not_found",
                        409: "conflict", 412: "conflict", 413: "too_large", 503: "busy",
                        507: "no_space"}
            code = fallback.get(status, "internal")
            reason = http.client.responses.get(status, "error")
            if head is not None:  # a HEAD's answer has no body: say what it was about
                file = head.removeprefix("/v1/stores/").replace("/files/", "/", 1)
                message = f"{file}: {reason.lower()} (HTTP {status})"
            else:
                message = (f"HTTP {status} {reason} from {self.socket_path} without a "
                           "memfs problem document (is the URL a memfs daemon's?)")
        details = problem.get("details")
        error = error_for(code, message, details if isinstance(details, dict) else None)
        error.precondition_failed = status == 412  # type: ignore[attr-defined]
        return error

    # -- ops -------------------------------------------------------------------------

    def exchange(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Carry out one op through its REST route and return its result; raises the
        MemfsClientError subclass of the answer's error code."""
        if op in SPECIAL:
            result: dict[str, Any] = getattr(self, f"_op_{op}")(**fields)
            return result
        route = ROUTES.get(op)
        if route is None:
            what = "an operator's, on the daemon's host" if op in OPERATOR_OPS else "not"
            raise UnavailableError(f"{op} is {what} available over HTTP "
                                   f"({self.socket_path}); use the daemon's socket")
        method, template = route
        fields = {name: value for name, value in fields.items() if value is not None}
        if "{store}" in template and "store" not in fields:
            fields["store"] = self._default_store()
        params = {}
        for name in ("store", "session", "task", "decision"):
            if f"{{{name}}}" in template:
                if name not in fields:
                    raise InvalidError(f"{op} needs {name}")
                params[name] = quote(str(fields.pop(name)), safe="")
        path = template.format(**params)
        if method == "GET":
            return self._json(method, path, query=fields)
        return self._json(method, path, json_body=fields)

    def _json(self, method: str, path: str, **how: Any) -> dict[str, Any]:
        _, _, data = self.request(method, path, **how)
        result: dict[str, Any] = json.loads(data) if data else {}
        return result

    def stores(self) -> list[dict[str, Any]]:
        """The token agent's stores (``GET /v1/stores``: name, access, history,
        structured), asked once."""
        if self._stores is None:
            self._stores = list(self._json("GET", "/v1/stores")["stores"])
        return self._stores

    def _default_store(self) -> str:
        """The agent's only structured store, as the daemon picks it
        (memfs/memory/model.py)."""
        mine = [s["name"] for s in self.stores() if s.get("structured")]
        if len(mine) == 1:
            return str(mine[0])
        if not mine:
            raise InvalidError("you have no structured store (one with structured = true)")
        raise InvalidError(f"you have several structured stores ({', '.join(mine)}): "
                           "name the one to use (`store`; --store on the command line)")

    @staticmethod
    def _file(path: str) -> str:
        store, rest = _split(path)
        if not rest:
            raise InvalidError(f"{path!r} names a store, not a file: give STORE/PATH")
        return f"/v1/stores/{store}/files/{rest}"

    @staticmethod
    def _version(path: str, headers: http.client.HTTPMessage, size: int) -> dict[str, Any]:
        """A read's or stat's fields from the headers of a GET or HEAD."""
        written = headers.get("Last-Modified")
        at = None
        if written:
            try:
                at = parsedate_to_datetime(written).timestamp()
            except (TypeError, ValueError):
                at = None
        return {"path": path.removeprefix(MOUNT_PREFIX).lstrip("/"),
                "digest": (headers.get("ETag") or "").strip('"'), "size": size,
                "changed_since_last_read":
                    headers.get("X-Memfs-Changed-Since-Last-Read") == "true",
                "last_writer": headers.get("X-Memfs-Last-Writer"),
                "last_written_at": at}

    def _op_read(self, path: str, offset: int = 1, limit: int | None = None,
                 encoding: str = "text") -> dict[str, Any]:
        _, headers, data = self.request("GET", self._file(path))
        result = self._version(path, headers, len(data))
        if encoding == "base64":
            result["content_b64"] = binascii.b2a_base64(data, newline=False).decode("ascii")
        else:
            result.update(page(data, offset, limit))
        return result

    def _op_stat(self, path: str) -> dict[str, Any]:
        _, headers, _ = self.request("HEAD", self._file(path))
        result = self._version(path, headers, int(headers.get("Content-Length") or 0))
        result["seen"] = headers.get("X-Memfs-Seen") or None  # empty: the agent saw none
        return result

    def _op_show(self, path: str, rev: str, offset: int = 1, limit: int | None = None,
                 encoding: str = "text") -> dict[str, Any]:
        _, headers, data = self.request("GET", self._file(path), query={"at": rev})
        commit = headers.get("X-Memfs-Rev") or rev
        result: dict[str, Any] = {"path": path.removeprefix(MOUNT_PREFIX).lstrip("/"),
                                  "rev": commit, "short": commit[:7], "size": len(data)}
        if encoding == "base64":
            result["content_b64"] = binascii.b2a_base64(data, newline=False).decode("ascii")
        else:
            result.update(page(data, offset, limit))
        return result

    @staticmethod
    def _condition(expect: str | None) -> dict[str, str]:
        """The precondition header of what this client last saw of the file."""
        if expect is None:
            return {}
        if expect == ABSENT:
            return {"If-None-Match": "*"}
        return {"If-Match": _tag(expect)}

    def _checked(self, expect: str | None, path: str, send: Any) -> dict[str, Any]:
        """``send()``'s result; a failed If-Match / If-None-Match is told as the socket
        tells a failed ``expect``."""
        try:
            result: dict[str, Any] = send()
            return result
        except ConflictError as error:
            if expect is None or not getattr(error, "precondition_failed", False):
                raise  # the daemon's own check of the agent's record: its words
            raise _stale(path, expect, error.details) from None

    def _op_write(self, path: str, force: bool = False, expect: str | None = None,
                  append: bool = False, content: str | None = None,
                  content_b64: str | None = None, sed: list[str] | None = None
                  ) -> dict[str, Any]:
        target = self._file(path)
        headers = self._condition(expect)
        if sed is not None or append:
            edit: dict[str, Any] = {"sed": sed} if sed is not None else {}
            if append:
                if content is None:
                    data = binascii.a2b_base64(content_b64 or "")
                    try:
                        content = data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise InvalidError(f"{path}: over HTTP an append is UTF-8 text; "
                                           "write the whole file instead") from None
                edit["append"] = content
            if force:
                edit["force"] = True
            return self._checked(expect, path, lambda: self._json(
                "PATCH", target, json_body=edit, headers=headers))
        body = content.encode() if content is not None else \
            binascii.a2b_base64(content_b64 or "")
        return self._checked(expect, path, lambda: self._json(
            "PUT", target, body=body, query={"force": True} if force else None,
            headers=headers))

    def _op_delete(self, path: str, force: bool = False, expect: str | None = None
                   ) -> dict[str, Any]:
        return self._checked(expect, path, lambda: self._json(
            "DELETE", self._file(path), query={"force": True} if force else None,
            headers=self._condition(expect)))

    def _op_restore(self, path: str, rev: str, force: bool = False,
                    expect: str | None = None) -> dict[str, Any]:
        store, rest = _split(path)
        return self._checked(expect, path, lambda: self._json(
            "POST", f"/v1/stores/{store}/restore", json_body={
                "path": rest, "rev": rev, "force": force},
            headers=self._condition(expect)))

    def _op_diff(self, path: str, rev: str | None = None) -> dict[str, Any]:
        store, rest = _split(path)
        return self._json("GET", f"/v1/stores/{store}/diff", query={"path": rest, "rev": rev})

    def _op_log(self, path: str | None = None, limit: int = 20, **given: Any
                ) -> dict[str, Any]:
        query = {"n": limit, **given}
        if path is not None:
            store, rest = _split(path)
            return self._json("GET", f"/v1/stores/{store}/history",
                              query={**query, "path": rest or None})
        # every store with history, newest first, as the daemon merges them
        entries: list[dict[str, Any]] = []
        for spec in self.stores():
            if spec.get("history"):
                entries += self._json("GET", f"/v1/stores/{spec['name']}/history",
                                      query=query)["entries"]
        entries.sort(key=lambda entry: entry["at"], reverse=True)
        return {"entries": entries[:limit]}

    def _op_list(self, patterns: list[str]) -> dict[str, Any]:
        stores = [str(s["name"]) for s in self.stores()]
        wanted: dict[str, list[str]] = {}
        expanded: set[str] = set()  # stores a wildcard named: nothing there is no error
        for pattern in patterns or ["**"]:
            store, rest = _split(pattern)
            if store == "**":  # across stores and folders: within each store
                names, glob = stores, pattern.removeprefix(MOUNT_PREFIX).lstrip("/")
            elif _wildcard(store):
                from fnmatch import fnmatchcase

                names, glob = [s for s in stores if fnmatchcase(s, store)], rest or "**"
            else:
                names, glob = [store], rest or "**"
            for name in names:
                wanted.setdefault(name, []).append(glob)
            if names != [store]:
                expanded.update(names)
        found: set[str] = set()
        for name, globs in wanted.items():
            try:
                found.update(self._json("GET", f"/v1/stores/{name}/files",
                                        query={"glob": globs})["paths"])
            except NotFoundError:
                if name not in expanded:
                    raise
        return {"paths": sorted(found)}

    def _op_search(self, args: list[str], format: str = "text") -> dict[str, Any]:
        return self._json("GET", "/v1/search", query={"arg": args, "format": format})

    def _op_recall(self, query: str, **given: Any) -> dict[str, Any]:
        return self._json("GET", "/v1/search", query={"q": query, **given})


def _stale(path: str, expect: str, details: dict[str, Any]) -> ConflictError:
    """The socket's conflict for a failed ``expect`` (memfs/store/errors.py's
    Conflict): what this client saw, what is there now, and who wrote it."""
    path = str(details.get("path") or path)
    if details.get("current_digest") is None:
        what = f"{path} was deleted since you last read it"
    elif expect == ABSENT:
        what = f"{path} was created since you found it absent"
    else:
        what = f"{path} changed since you last read it"
    writer, at = details.get("last_writer"), details.get("last_written_at")
    if writer:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at or 0))
        what += f" (last written by {writer} at {stamp})"
    return ConflictError(what + "; read it again, then retry (or force to overwrite on "
                         "purpose)", {**details, "seen_digest": None if expect == ABSENT
                                      else expect, "seen_absent": expect == ABSENT})


def http_client(url: str, token_file: str | None, *, cafile: str | None = None) -> Any:
    """A `Client` over HTTP to ``url`` with the token of ``token_file``
    (control/client/tokenfile.py); raises InvalidError when no token file is given or
    it cannot be used."""
    from memfs.control.client.client import Client
    from memfs.control.client.tokenfile import TOKEN_FILE_ENV, TokenFileError, read_token_file

    if not token_file:
        raise InvalidError(f"a URL needs a token: --token-file FILE or {TOKEN_FILE_ENV} "
                           "(a file of mode 0600 holding a token from `memfs token create`)")
    try:
        token = read_token_file(token_file)
    except TokenFileError as error:
        raise InvalidError(str(error)) from None
    return Client(transport=HttpTransport(url, token, cafile=cafile,
                                          token_source=f"the token of {token_file}"))
