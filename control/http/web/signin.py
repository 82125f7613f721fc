"""Signing in to the web view with a bearer token, and the cookie that carries it.

A person pastes a token (from ``memfs token create``) into ``/ui/login``; the daemon
verifies it like a bearer header and opens a *web session*: a random 256-bit id,
kept in this daemon's memory (only its sha256, as the key) with the token's id, its
agent, an expiry and a CSRF value. The cookie ``memfs_ui`` carries the random id,
never the token: ``HttpOnly``, ``SameSite=Strict``, ``Path=/ui``, ``Secure`` when the
listener speaks TLS.

Every request re-checks the session: past its expiry (LIFETIME, and never beyond the
token's own expiry), or once its token is revoked or expired (`Tokens.active`, which
sees a revocation by any daemon on the root), or its agent left the config, the
session is gone. A restart of the daemon ends every session. Sessions are bounded
(`SignIns`): per agent, whose own oldest end first, and in all, where a sign-in is
refused rather than ending another agent's live session.

CSRF: the only forms are sign-in and sign-out (POST). Both need the request's
``Origin`` (or, without one, its ``Referer``) to be this listener's own origin;
sign-in also needs a double-submit value (a cookie set with the form, echoed in the
form), sign-out the session's CSRF value.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from starlette.requests import Request

from memfs.tokens import TokenRecord, Tokens

COOKIE = "memfs_ui"
LOGIN_COOKIE = "memfs_ui_login"
LIFETIME = 12 * 3600.0  # a web session ends after this, whatever happens
LOGIN_FORM_SECONDS = 3600  # the sign-in form's double-submit cookie lives this long
MAX_SESSIONS = 10_000  # sessions kept at once, in all (a sign-in beyond is refused)
MAX_PER_AGENT = 32  # ... of one agent (beyond, its own oldest sessions end)
_NEXT = re.compile(r"/ui/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*")


@dataclass
class WebSession:
    token_id: str
    agent: str
    expires: float
    csrf: str


class TooManySessions(Exception):
    """Every place for a web session is taken by live sessions of other agents;
    ``retry_after`` is how many seconds until the first of them expires."""

    def __init__(self, most: int, retry_after: int) -> None:
        super().__init__(
            f"too many people are signed in to this memfs's web view ({most} sessions, "
            "the most it keeps): try again later, or ask someone to sign out")
        self.retry_after = retry_after


def _key(cookie: str) -> str:
    return hashlib.sha256(cookie.encode("utf-8", "surrogateescape")).hexdigest()


class SignIns:
    """The web sessions of one daemon (used from its event loop only).

    At most ``per_agent`` sessions of one agent: a sign-in beyond ends that agent's
    own oldest session. At most ``most`` in all: a sign-in beyond first forgets the
    sessions that ended (expired, token revoked or expired, agent gone) and is
    refused (TooManySessions) if that frees no place; a live session of another
    agent is never ended to make room.
    """

    def __init__(self, tokens: Tokens, agents: Collection[str], *,
                 lifetime: float = LIFETIME, clock: Callable[[], float] = time.time,
                 most: int = MAX_SESSIONS, per_agent: int = MAX_PER_AGENT) -> None:
        self.tokens = tokens
        self.agents = agents
        self.lifetime = lifetime
        self.clock = clock
        self.most = most
        self.per_agent = per_agent
        self._sessions: dict[str, WebSession] = {}  # key -> session, oldest first
        self._of_agent: dict[str, dict[str, None]] = {}  # agent -> its keys, oldest first

    def open(self, record: TokenRecord) -> tuple[str, WebSession]:
        """A new session for a verified token: (the cookie value, the session).
        Raises TooManySessions."""
        now = self.clock()
        mine = self._of_agent.get(record.agent, {})
        while len(mine) >= self.per_agent:
            self._drop(next(iter(mine)))  # the agent's own oldest
        if len(self._sessions) >= self.most:
            self._sweep(now)
            if len(self._sessions) >= self.most:
                first = min(s.expires for s in self._sessions.values())
                raise TooManySessions(self.most, max(1, int(first - now) + 1))
        expires = now + self.lifetime
        if record.expires is not None:
            expires = min(expires, record.expires)
        cookie = secrets.token_urlsafe(32)
        session = WebSession(record.id, record.agent, expires, secrets.token_urlsafe(24))
        key = _key(cookie)
        self._sessions[key] = session
        self._of_agent.setdefault(record.agent, {})[key] = None
        return cookie, session

    def check(self, cookie: str | None) -> WebSession | None:
        """The live session of a cookie value, else None (and an ended one is
        forgotten): unknown, expired, its token revoked or expired, its agent gone."""
        if not cookie or len(cookie) > 128:
            return None
        key = _key(cookie)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self.clock()
        record = self.tokens.active(session.token_id, now)
        if now >= session.expires or record is None or record.agent != session.agent \
                or session.agent not in self.agents:
            self._drop(key)
            return None
        return session

    def close(self, cookie: str | None) -> None:
        """End the session of a cookie value (nothing if there is none)."""
        if cookie:
            self._drop(_key(cookie))

    def __len__(self) -> int:
        return len(self._sessions)

    def _drop(self, key: str) -> None:
        session = self._sessions.pop(key, None)
        if session is not None:
            mine = self._of_agent[session.agent]
            del mine[key]
            if not mine:
                del self._of_agent[session.agent]

    def _sweep(self, now: float) -> None:
        """Forget every session that ended (one read of the token file)."""
        active = {r.id for r in self.tokens.list() if r.state(now) == "active"}
        for key in [k for k, s in self._sessions.items()
                    if now >= s.expires or s.token_id not in active
                    or s.agent not in self.agents]:
            self._drop(key)


def secure(request: Request) -> bool:
    """Whether the request came over TLS (the cookie is then ``Secure``)."""
    return request.url.scheme == "https"


def same_origin(request: Request) -> bool:
    """Whether a form was posted from a page of this very listener: its ``Origin``
    (else its ``Referer``) names the scheme and host the request was sent to.
    Neither header: refused (every current browser sends ``Origin`` on a POST)."""
    host = request.headers.get("host", "").lower()
    if not host:
        return False
    expected = f"{request.url.scheme}://{host}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin.lower() == expected
    referer = request.headers.get("referer", "")
    return referer.lower() == expected or referer.lower().startswith(expected + "/")


def same_value(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of two form/cookie values; False when either is missing."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"),
                               expected.encode("utf-8", "replace"))


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a path of the web view, else ``/ui/`` (never
    another site)."""
    if value and _NEXT.fullmatch(value) and "//" not in value and "\\" not in value:
        return value
    return "/ui/"
