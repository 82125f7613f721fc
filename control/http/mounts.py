"""What a remote mount (``memfs mount URL``, control/client/remote/) asks the daemon
besides the file endpoints of control/http/files.py:

* ``GET /v1/stores/{store}/dir`` (``?path=FOLDER``, default the store's top): one
  folder as the local mount lists it (memfs/fuse/view.py): its files and folders with
  their size and times (nanoseconds), the folder's own times; symlinks, hard links,
  special files and names memfs refuses are left out, exactly as the local mount
  hides them. Records nothing (a listing is no read).
* ``GET /v1/stores/{store}/files/{path}?record=false``: the bytes of the current
  version, recorded as nothing (a scan; control/http/files.py).
* ``GET /v1/events``: the token's agent's change stream, server-sent events:
  ``commit`` with ``{"store", "path"}`` for every accepted change in a store the agent
  may read (``path`` empty: something in the store changed, through another daemon on
  the root), and, when they can be told, ``file`` (the file as a listing shows it
  now; null when it is gone) and ``folder`` (its folder's times): a mount updates
  what it holds without asking again; ``resync`` when events were lost (the stream
  fell behind: drop whatever is cached), ``end`` when the daemon stops or the token
  is revoked, and a comment every KEEPALIVE seconds, when the token is also checked
  again. One stream per mount;
  at most control/http/web/live.py's PER_AGENT per agent (503 beyond).
"""

from __future__ import annotations

import os
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memfs.control.http.files import Api, agent_of
from memfs.control.http.problems import Problem, guarded, query
from memfs.control.http.web import live
from memfs.fuse.nodes import _showable, kind_of
from memfs.store.errors import InvalidInput, NotFound
from memfs.store.fs import backing
from memfs.store.fs.paths import parse_path

KEEPALIVE = 5.0  # seconds between a stream's comments (a mount's liveness check)
QUEUE = 1024  # events buffered per mount stream before it is told to resync
MAX_ENTRIES = 100_000  # a folder listed at most this far (the local mount has no bound)


def _times(st: os.stat_result) -> dict[str, int]:
    return {"mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def list_folder(api: Api, agent: str, store: str, rel: str | None) -> dict[str, Any]:
    """The folder STORE/REL as the agent's local mount shows it (see the module
    docstring). Raises NotFound (no such store for the agent, no such folder),
    InvalidInput (a bad path)."""
    engine = api.dispatcher.engine
    path = parse_path(f"{store}/{rel}") if rel else parse_path(store, allow_store_only=True)
    engine.check_access(agent, path.store)
    store_fd = engine.store_fd(path.store)
    try:
        dir_fd = (backing.walk_parent(store_fd, (*path.parts, "x"), create=False)
                  if path.parts else backing.open_dir(store_fd, "."))
    except (FileNotFoundError, NotADirectoryError, InvalidInput):
        raise NotFound(f"no folder {path}") from None
    try:
        entries = []
        for name in sorted(os.listdir(dir_fd))[:MAX_ENTRIES]:
            if not _showable(name):
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            kind = kind_of(st)
            if kind is None:
                continue  # hidden, as on the local mount
            entries.append({"name": name, "dir": kind,
                            "size": 0 if kind else st.st_size, **_times(st)})
        return {**_times(os.fstat(dir_fd)), "entries": entries}
    finally:
        os.close(dir_fd)


def attributes(api: Api, path: str) -> dict[str, Any]:
    """What a commit event of STORE/PATH tells a mount besides the path: ``file``, the
    file as a listing gives it now (None: gone, or hidden), and ``folder``, its
    folder's times; both left out when they cannot be told (the mount then fetches
    the folder again). A few system calls, on the loop: no thread hop before the
    event leaves."""
    try:
        mem = parse_path(path)
        store_fd = api.dispatcher.engine.store_fd(mem.store)
        folder_fd = backing.walk_parent(store_fd, mem.parts, create=False)
    except Exception:  # a store-wide event, a folder gone meanwhile, ...
        return {}
    try:
        folder = _times(os.fstat(folder_fd))
        try:
            st = os.stat(mem.parts[-1], dir_fd=folder_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return {"file": None, "folder": folder}
        kind = kind_of(st)
        if kind is None:
            return {"file": None, "folder": folder}
        return {"file": {"dir": kind, "size": 0 if kind else st.st_size, **_times(st)},
                "folder": folder}
    except OSError:
        return {}
    finally:
        os.close(folder_fd)


def routes(api: Api, feed: live.CommitFeed | None) -> list[Route]:
    """The folder listing and the change stream."""

    @guarded
    async def folder(request: Request) -> Response:
        rel = query(request, {"path": "path"}).get("path")
        agent = agent_of(request)
        store = request.path_params["store"]
        listed = await anyio.to_thread.run_sync(list_folder, api, agent, store, rel)
        return JSONResponse(listed)

    @guarded
    async def events(request: Request) -> Response:
        query(request, {})
        agent = agent_of(request)
        if feed is None:
            raise Problem("not_found", "this daemon has no change stream")
        token_id = request.scope.get("memfs.token")
        tokens = api.dispatcher.tokens
        try:
            stream = feed.open(agent, queue=QUEUE)
        except live.TooManyStreams as error:
            # busy, as the OpenAPI document says: problem+json from the one error table
            raise Problem("busy", str(error), headers={"Retry-After": "5"}) from None

        def alive() -> bool:
            return isinstance(token_id, str) and tokens.active(token_id) is not None

        return live.EventStream(feed, stream, alive, keepalive=KEEPALIVE,
                                ended="the token was revoked",
                                detail=lambda store, path: attributes(api, path))

    return [Route("/v1/stores/{store}/dir", folder, methods=["GET"]),
            Route("/v1/events", events, methods=["GET"])]
