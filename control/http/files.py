"""REST ``/v1``: stores, files, search. Each endpoint builds the very request model
the socket decodes (control/ops/registry.py) and hands it to ``Dispatcher.execute`` in a
worker thread, for the agent of the bearer token (control/http/auth.py); no second
dispatch. Errors are problem details (control/http/problems.py).

``/v1/search``: jailed ripgrep (``pattern`` or ``arg``): rg's text, or with
``format=json`` structured matches (jail/rg_json.py); with ``q``, ranked recall
(control/http/recall.py).

Files, as ``/v1/stores/{store}/files/{path}``:

* ``GET``: the raw bytes (a ``read``: the version is recorded as seen, exactly like a
  socket read; a missing file records that too), ``ETag`` = the blake3 digest in
  quotes; an ``If-None-Match`` that names it (or ``*``) gives 304 (still a read).
  ``?record=false``: the same bytes and headers, recorded as nothing (a remote
  mount's scan, control/http/mounts.py).
  ``?at=REV``: the file as it was at REV (a ``show``: records nothing). ``HEAD``: a
  ``stat`` (records nothing), with the status and headers of the GET (304 alike; with
  ``?at=REV`` the show's), no body. Both carry ``X-Memfs-Seen``: the digest the agent
  last read or wrote (empty: none; the mount's ``user.memfs.seen``).
* ``PUT`` (raw body): replace or create, version-checked against the agent's record
  like every write; ``?force=true`` skips that check. 201 when created.
* ``PATCH`` with JSON ``{"append": TEXT}`` or ``{"sed": [SCRIPT, ...]}`` (and
  ``"force"``), ``DELETE``.

Every change takes ``If-Match`` and ``If-None-Match`` (control/http/preconditions.py),
checked by the engine under the store lock, in addition to the agent's record (also
with ``force``, which skips only the record): one that does not hold is 412 and changes
nothing.
"""

from __future__ import annotations

import collections
import functools
import mimetypes
import re
from email.utils import formatdate
from typing import Any
from urllib.parse import quote

import anyio.to_thread
import blake3
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memfs.control import protocol as p
from memfs.control.http import preconditions
from memfs.control.http.problems import Problem, flag, guarded, json_object, query, read_body
from memfs.control.http.recall import recall, wants_recall
from memfs.control.ops.dispatcher import Dispatcher
from memfs.control.socket.server import max_line_bytes
from memfs.store.fs import backing
from memfs.store.fs.globs import MAX_GLOB_CHARS
from memfs.store.fs.paths import MemPath, glob_pattern, parse_path


def agent_of(request: Request) -> str:
    """The agent of the request's bearer token (set by the auth middleware)."""
    agent = request.scope.get("memfs.agent")
    if not isinstance(agent, str):
        raise Problem("unauthenticated", "no valid bearer token",
                      headers={"WWW-Authenticate": 'Bearer realm="memfs"'})
    return agent


INLINE_READ_LIMIT = 64 * 1024  # reads of files known to be this small skip the thread hop
SIZES_KEPT = 4096


class Api:
    """What every endpoint needs: the dispatcher, the limits, and `execute`."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.config = dispatcher.engine.config
        self.max_file = self.config.max_file_size
        self.max_json = max_line_bytes(self.max_file)
        # path -> size at its last read or write here (an LRU): which reads are small
        self._sizes: collections.OrderedDict[str, int] = collections.OrderedDict()

    def _run(self, agent: str, op: str, fields: dict[str, Any], lax: bool,
             precondition: preconditions.Precondition | None) -> dict[str, Any]:
        return self.dispatcher.run(agent, op, fields, lax=lax, precondition=precondition)

    async def execute(self, request: Request, op: str, fields: dict[str, Any], *,
                      lax: bool = False, conditional: bool = False) -> dict[str, Any]:
        """Build the ``op`` request from ``fields`` (``lax``: query-string text) and
        carry it out for the token's agent in a worker thread (never abandoned: a
        commit that started finishes); ``conditional``: the request's If-Match and
        If-None-Match must hold for the file it changes. Raises what the Dispatcher
        raises (ConditionFailed: a precondition did not hold).

        A read of a file last seen here at most INLINE_READ_LIMIT bytes runs on the
        event loop instead, like the mount's opens of small files: the thread hop
        would cost more than the read (a file that grew meanwhile is read inline
        once, then goes back to the thread)."""
        agent = agent_of(request)
        condition = preconditions.of(request.headers) if conditional else None
        path = fields.get("path")
        known = self._sizes.get(path) if op == "read" and isinstance(path, str) else None
        if known is not None and known <= INLINE_READ_LIMIT:
            result = self._run(agent, op, fields, lax, condition)
        else:
            result = await anyio.to_thread.run_sync(
                functools.partial(self._run, agent, op, fields, lax, condition))
        if op in ("read", "stat", "write") and isinstance(path, str) and \
                isinstance(result.get("size"), int):
            self._sizes[path] = result["size"]
            self._sizes.move_to_end(path)
            if len(self._sizes) > SIZES_KEPT:
                self._sizes.popitem(last=False)
        return result


def read_unrecorded(api: Api, agent: str, path: MemPath) -> tuple[bytes, dict[str, Any]]:
    """The current version's bytes and its digest, size and last writer, recorded as
    nothing (the agent's record stays as it was: a remote mount's scan). Raises
    NotFound, PermissionDenied, InvalidInput."""
    pinned = api.dispatcher.engine.open_version(agent, path, record=False)
    with backing.closing_fd(pinned.fd):
        data = backing.read_all(pinned.fd, pinned.version.size)
    version = pinned.version
    return data, {"digest": version.digest, "size": version.size, "seen": pinned.previous,
                  "last_writer": version.last_write.agent,
                  "last_written_at": version.last_write.at}


def location(request: Request) -> str:
    """The request's own path as a header carries it: percent-encoded UTF-8 (RFC 3986),
    so that any name (``日本語.md``, ``a b%c.md``) gives a valid, ASCII header."""
    return quote(request.scope["path"], safe="/")


def _file_path(request: Request) -> str:
    return f"{request.path_params['store']}/{request.path_params['path']}"


def _tag(digest: str) -> str:
    return f'"{digest}"'


def not_modified(request: Request, digest: str) -> bool:
    """Whether a GET or HEAD of the version ``digest`` is answered 304: its
    If-None-Match names it (weakly) or is ``*``; raises ProtocolError when it is
    malformed."""
    value = request.headers.get("if-none-match")
    return value is not None and not preconditions.if_none_match_holds(
        preconditions.parse(value, "If-None-Match"), digest)


def _committed(result: dict[str, Any]) -> JSONResponse:
    headers = {"ETag": _tag(result["digest"])} if result.get("digest") else {}
    return JSONResponse(result, 201 if result.get("created") else 200, headers)


def _version_headers(result: dict[str, Any]) -> dict[str, str]:
    headers = {"ETag": _tag(result["digest"]),
               "X-Memfs-Changed-Since-Last-Read":
                   "true" if result.get("changed_since_last_read") else "false"}
    if "seen" in result:  # a stat's: what the agent last read or wrote (user.memfs.seen)
        headers["X-Memfs-Seen"] = result["seen"] or ""
    if result.get("last_writer"):
        headers["X-Memfs-Last-Writer"] = str(result["last_writer"])
    if result.get("last_written_at"):
        headers["Last-Modified"] = formatdate(result["last_written_at"], usegmt=True)
    return headers


def routes(api: Api) -> list[Route]:
    """The stores, files and search endpoints."""

    @guarded
    async def stores(request: Request) -> Response:
        query(request, {})
        me = await api.execute(request, "whoami", {})
        specs = api.config.stores
        return JSONResponse({"agent": me["agent"], "stores": [
            {"name": name, "access": access, "history": specs[name].history,
             "structured": specs[name].structured}
            for name, access in sorted(me["stores"].items()) if name in specs]})

    @guarded
    async def files(request: Request) -> Response:
        store = request.path_params["store"]
        globs = query(request, {"glob": "glob"}, repeated=frozenset({"glob"})).get("glob")
        for glob in globs or []:
            _check_glob(glob)
        patterns = [f"{store}/{g.lstrip('/')}" for g in globs or ["**"]]
        return JSONResponse(await api.execute(request, "list", {"patterns": patterns}))

    @guarded
    async def read_file(request: Request) -> Response:
        path = _file_path(request)
        asked = query(request, {"at": "rev", "record": "record"})
        at = asked.get("rev")
        record = flag(asked.get("record", "true"), "record")
        if not record and at is None and request.method == "GET":  # (HEAD, at: no record)
            data, info = await anyio.to_thread.run_sync(
                read_unrecorded, api, agent_of(request), parse_path(path))
            headers = _version_headers(info)
            if not_modified(request, info["digest"]):
                return Response(status_code=304, headers=headers)
            return Response(data, headers=headers, media_type=_media_type(path))
        if request.method == "HEAD" and at is None:
            info = await api.execute(request, "stat", {"path": path})
            headers = _version_headers(info)
            if not_modified(request, info["digest"]):
                return Response(status_code=304, headers=headers)
            # the headers a GET would send, without the body
            return Response(headers={**headers, "Content-Length": str(info["size"])},
                            media_type=_media_type(path))
        if at is not None:  # (a HEAD too: the headers of this GET, no body)
            shown = await api.execute(request, "show", {"path": path, "rev": at,
                                                        "encoding": "bytes"})
            data = shown["content"]
            headers = {"ETag": _tag(blake3.blake3(data).hexdigest()),
                       "X-Memfs-Rev": shown["rev"]}
            return Response(data, headers=headers, media_type=_media_type(path))
        result = await api.execute(request, "read", {"path": path, "encoding": "bytes"})
        headers = _version_headers({**result, "seen": result["digest"]})  # recorded now
        if not_modified(request, result["digest"]):
            return Response(status_code=304, headers=headers)
        return Response(result["content"], headers=headers, media_type=_media_type(path))

    @guarded
    async def put_file(request: Request) -> Response:
        force = flag(query(request, {"force": "force"}).get("force"), "force")
        body = await read_body(request, api.max_file)
        result = await api.execute(request, "write", {"path": _file_path(request),
                                                      "force": force, "content": body},
                                   conditional=True)
        response = _committed(result)
        if result.get("created"):
            response.headers["Location"] = location(request)
        return response

    @guarded
    async def patch_file(request: Request) -> Response:
        query(request, {})
        edit = await json_object(request, api.max_json)
        unknown = set(edit) - {"append", "sed", "force"}
        if unknown or ("append" in edit) == ("sed" in edit):
            raise p.ProtocolError("invalid", 'PATCH takes {"append": TEXT} or {"sed": '
                                  '[SCRIPT, ...]}, and optionally "force"')
        force = edit.get("force", False)
        if not isinstance(force, bool):
            raise p.ProtocolError("invalid", "force must be true or false")
        fields: dict[str, Any] = {"path": _file_path(request), "force": force}
        if "append" in edit:
            fields.update(content=edit["append"], append=True)
        else:
            sed = edit["sed"]
            fields["sed"] = [sed] if isinstance(sed, str) else sed
        return _committed(await api.execute(request, "write", fields, conditional=True))

    @guarded
    async def delete_file(request: Request) -> Response:
        force = flag(query(request, {"force": "force"}).get("force"), "force")
        result = await api.execute(request, "delete", {"path": _file_path(request),
                                                       "force": force}, conditional=True)
        return JSONResponse(result)

    @guarded
    async def search(request: Request) -> Response:
        if wants_recall(request):  # ?q=: ranked recall, not ripgrep
            return await recall(api, request)
        fields = query(request, {"pattern": "pattern", "flag": "flags", "path": "paths",
                                 "arg": "args", "format": "format"},
                       repeated=frozenset({"flag", "path", "arg"}))
        found = {"format": fields.pop("format")} if "format" in fields else {}
        # pattern (with flag and path) xor arg: the OpenAPI document says it (oneOf)
        if "args" in fields:
            if set(fields) != {"args"}:
                raise p.ProtocolError("invalid", "arg parameters are a whole rg command "
                                      "line: give no pattern, flag or path with them")
            args = fields["args"]
        elif "pattern" in fields:
            args = [*fields.get("flags", []), "--regexp", fields["pattern"], "--",
                    *fields.get("paths", [])]
        else:
            raise p.ProtocolError("invalid", "give pattern (with optional flag and path "
                                  "parameters) or arg parameters (a whole rg command line)")
        return JSONResponse(await api.execute(request, "search", {"args": args, **found}))

    file_path = "/v1/stores/{store}/files/{path:path}"
    return [
        Route("/v1/stores", stores, methods=["GET"]),
        Route("/v1/stores/{store}/files", files, methods=["GET"]),
        Route(file_path, read_file, methods=["GET", "HEAD"]),
        Route(file_path, put_file, methods=["PUT"]),
        Route(file_path, patch_file, methods=["PATCH"]),
        Route(file_path, delete_file, methods=["DELETE"]),
        Route("/v1/search", search, methods=["GET"]),
    ]


GLOB_CHARS = MAX_GLOB_CHARS - 65  # with "STORE/" before it, a glob the engine takes


@functools.cache
def _glob_regex() -> re.Pattern[str]:
    return re.compile(glob_pattern())


def _check_glob(glob: str) -> None:
    """Refuse (``invalid``) a ``glob`` parameter the OpenAPI document does not allow:
    longer than GLOB_CHARS, or not of `glob_pattern` (an empty, ``.`` or ``..`` name,
    one over 63 characters, a bracket range)."""
    if len(glob) > GLOB_CHARS:
        raise p.ProtocolError("invalid", f"a glob is at most {GLOB_CHARS} characters")
    if not _glob_regex().fullmatch(glob):
        raise p.ProtocolError("invalid", f"bad glob {glob[:80]!r}: names of 1-63 printable "
                              "characters, not '.' or '..', joined by '/' (with *, ? and "
                              "[...] but no ranges)")


def _media_type(path: str) -> str:
    return _media_type_of(path.rpartition("/")[2].rpartition(".")[2].lower())


@functools.lru_cache(maxsize=256)
def _media_type_of(suffix: str) -> str:
    guessed = mimetypes.guess_type(f"x.{suffix}")[0]
    if guessed is None:
        return "application/octet-stream"
    return f"{guessed}; charset=utf-8" if guessed.startswith("text/") else guessed
