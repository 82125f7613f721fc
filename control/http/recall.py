"""``GET /v1/search?q=QUERY[&store=S&limit=N&page=P]``: ranked recall over the token's
agent's stores (the ``recall`` op, control/ops/recall.py), best first, a page at a
time (the result's ``next_page``). ``/v1/search`` without ``q`` stays ripgrep
(control/http/files.py's search, which hands a request with ``q`` here)."""

from __future__ import annotations

from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memfs.control.http.problems import query

PARAMETERS = {"q": "query", "store": "store", "limit": "limit", "page": "page"}


class Executes(Protocol):
    """What recall needs of control/http/files.py's ``Api`` (named here, not imported:
    files.py hands requests with ``q`` to this module, so importing it back would be
    a cycle)."""

    async def execute(self, request: Request, op: str, fields: dict[str, Any], *,
                      lax: bool = False, conditional: bool = False) -> dict[str, Any]: ...


def wants_recall(request: Request) -> bool:
    """Whether a ``/v1/search`` request asks for ranked recall (it has ``q``)."""
    return "q" in request.query_params


async def recall(api: Executes, request: Request) -> Response:
    """The recall's result as JSON; a bad parameter is 400 ``invalid``."""
    fields: dict[str, Any] = query(request, PARAMETERS)
    return JSONResponse(await api.execute(request, "recall", fields, lax=True))


def openapi_parameters() -> list[dict[str, Any]]:
    """The query parameters of recall, for the OpenAPI document's /v1/search."""
    from memfs.control.ops import registry

    properties = registry.op("recall").request.model_json_schema()["properties"]
    return [{"name": name, "in": "query", "required": False,
             "schema": {key: value for key, value in properties[field].items()
                        if key != "title"},
             "description": properties[field].get("description", "")}
            for name, field in PARAMETERS.items()]
