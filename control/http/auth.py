"""Identity on the HTTP listener: ``Authorization: Bearer TOKEN``.

`BearerAuth` is pure ASGI middleware in front of everything but the public paths.
A missing, unknown, revoked or expired token (or one whose agent is no longer in the
config) is answered 401 with ``WWW-Authenticate: Bearer``; a good one puts its agent
and token id in the request scope (``memfs.agent``, ``memfs.token``), and the agent
then has exactly that agent's stores and access. Tokens are checked by memfs/tokens.py
(hash, constant-time compare) and never logged or echoed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from memfs.control.http.problems import problem
from memfs.tokens import Tokens

REALM = 'Bearer realm="memfs"'


class BearerAuth:
    def __init__(self, app: ASGIApp, tokens: Tokens, agents: Collection[str],
                 public: Callable[[str], bool]) -> None:
        self.app = app
        self.tokens = tokens
        self.agents = agents
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.public(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value
                break
        scheme, _, token = header.decode("latin-1").partition(" ")
        if not header:
            response = problem("unauthenticated", "this needs Authorization: Bearer TOKEN "
                               "(a token from `memfs token create AGENT`)",
                               headers={"WWW-Authenticate": REALM})
            await response(scope, receive, send)
            return
        record = self.tokens.verify(token.strip()) if scheme.lower() == "bearer" else None
        if record is None or record.agent not in self.agents:
            response = problem("unauthenticated", "the bearer token is unknown, revoked or "
                               "expired", headers={
                                   "WWW-Authenticate": f'{REALM}, error="invalid_token"'})
            await response(scope, receive, send)
            return
        scope["memfs.agent"] = record.agent
        scope["memfs.token"] = record.id
        await self.app(scope, receive, send)
