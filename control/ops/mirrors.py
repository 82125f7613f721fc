"""The mirror ops (``memfs mirror status|push``), each declared with its request model
and handler (control/ops/registry.py): the state of each store's mirrors, and a push
now (memfs/store/history/mirror.py).

Status is for any agent, of the stores it may read; a push for an agent with
read_write on the store (a delegate acts for one with ``--as``): it changes nothing in
the memory, but it makes the daemon reach out to the remote now.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from memfs.control.ops.registry import Call, Rest, operation
from memfs.control.protocol.base import BaseRequest
from memfs.store.errors import NotFound


class MirrorStatusRequest(BaseRequest):
    """Each mirror of ``store`` (default: of every store the agent may read): its URL,
    state, whether a push is under way, last success, commits behind, last error."""

    op: Literal["mirror_status"]
    store: str | None = Field(default=None, max_length=64)


class MirrorPushRequest(BaseRequest):
    """Push ``store`` (default: every store with mirrors the agent may write) to its
    mirrors now, never forced, and answer once done: ``mirror_failed`` when a mirror
    is not up to date afterwards."""

    op: Literal["mirror_push"]
    store: str | None = Field(default=None, max_length=64)


def _named(call: Call, store: str, *, write: bool) -> list[str]:
    """[store], once checked: it exists and the agent may read (write) it."""
    if store not in call.engine.config.stores:
        raise NotFound(f"no store named {store!r}")
    call.engine.check_access(call.agent, store, write=write)
    return [store]


@operation(MirrorStatusRequest, summary="The state of each store's mirrors",
           rest=Rest("GET", "/v1/mirrors"))
def mirror_status(call: Call, request: MirrorStatusRequest) -> dict[str, Any]:
    stores = (_named(call, request.store, write=False) if request.store is not None
              else call.engine.readable_stores(call.agent))
    if request.store is not None:
        call.parts.mirrors.of(request.store)  # NotFound: it has none
    return {"mirrors": [status.fields() for status in call.parts.mirrors.status(stores)]}


@operation(MirrorPushRequest, summary="Push a store's history to its mirrors now (never "
           "forced) and wait for the result", access="write",
           rest=Rest("POST", "/v1/mirrors/push"))
def mirror_push(call: Call, request: MirrorPushRequest) -> dict[str, Any]:
    mirrors = call.parts.mirrors
    if request.store is not None:
        stores = _named(call, request.store, write=True)
    else:
        config = call.engine.config
        stores = [store for store in call.engine.readable_stores(call.agent)
                  if store in mirrors.stores and config.access(call.agent, store) == "read_write"]
        if not stores:
            raise NotFound("none of the stores you may write has a mirror")
    return {"mirrors": [status.fields() for status in mirrors.push(stores)]}
