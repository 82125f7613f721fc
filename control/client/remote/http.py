"""The daemon over HTTP(S), for the remote mount: blocking requests on a small pool of
keep-alive connections (the standard library's http.client), run by the mount in
worker threads.

Guarantees. Every request carries ``Authorization: Bearer TOKEN`` (the token is held
in memory only, never logged). A request that cannot reach the daemon (refused,
reset, timed out, TLS failure) is tried again with backoff until ``wait`` seconds have
passed, then raises `Unreachable`. A 401 raises `Refused` and from then on every
request raises it at once (the token was revoked or expired: nothing will work again
until the mount is restarted with a good one). Other answers are returned as they are.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote

from memfs.control.client.http import parse_url

log = logging.getLogger("memfs.remote")

POOL = 16  # idle connections kept
TIMEOUT = 30.0  # seconds a request may take once connected (a 64 MiB file included)
FIRST_RETRY, MAX_RETRY = 0.05, 1.0  # backoff between attempts (seconds)


class Unreachable(Exception):
    """The daemon could not be reached within the wait."""


class Refused(Exception):
    """The daemon refused the token (401): revoked, expired or unknown."""


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes


def quoted(path: str) -> str:
    """A STORE/PATH or name as it goes in a URL path (percent-encoded UTF-8)."""
    return quote(path, safe="/")


class Daemon:
    """One daemon's base URL and token; thread-safe."""

    def __init__(self, url: str, token: str, *, wait: float = 5.0,
                 cafile: str | None = None) -> None:
        """``url``: checked as the CLI's ``--url`` is (`parse_url`: https, or plain http
        to a loopback host only); raises InvalidError. ``wait``: how long a request
        keeps trying to reach the daemon; ``cafile``: the certificates to trust for
        https (default: the system's)."""
        scheme, self._host, self._port, self._prefix = parse_url(url)
        host = f"[{self._host}]" if ":" in self._host else self._host  # IPv6 literal
        self.url = f"{scheme}://{host}:{self._port}"
        self._tls = ssl.create_default_context(cafile=cafile) if scheme == "https" else None
        self._auth = f"Bearer {token}"
        self.wait = wait
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.refused = False
        self._refusal_logged = False

    def connection(self, timeout: float = TIMEOUT) -> http.client.HTTPConnection:
        """A new connection (not yet connected)."""
        if self._tls is not None:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self._tls)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"Authorization": self._auth, **(extra or {})}

    def target(self, path: str) -> str:
        return self._prefix + path

    def _take(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self.connection()

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < POOL:
                self._idle.append(conn)
                return
        conn.close()

    def refuse(self, why: str) -> Refused:
        """Note that the token is refused (logged once) and return the exception."""
        self.refused = True
        if not self._refusal_logged:
            self._refusal_logged = True
            log.error("the daemon at %s refuses this mount's token (%s): it was revoked, "
                      "expired or never valid; every operation now fails with EACCES "
                      "(unmount, and mount again with a valid token file)", self.url, why)
        return Refused(why)

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                *, wait: float | None = None) -> Reply:
        """``method`` ``path`` (already quoted) with the token; retried until ``wait``
        (default the daemon's) while the daemon cannot be reached. Raises Unreachable,
        Refused."""
        if self.refused:
            raise Refused("refused before")
        deadline = time.monotonic() + (self.wait if wait is None else wait)
        delay, fresh = FIRST_RETRY, 0
        while True:
            conn = self._take()
            try:
                conn.request(method, self.target(path), headers=self.headers(headers))
                response = conn.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                if fresh <= POOL and isinstance(error, http.client.RemoteDisconnected |
                                                BrokenPipeError | ConnectionResetError):
                    fresh += 1
                    continue  # an idle connection the daemon closed: another at once
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unreachable(f"cannot reach the daemon at {self.url}: "
                                      f"{_why(error)}") from None
                time.sleep(min(delay, left))
                delay = min(delay * 2, MAX_RETRY)
                continue
            if response.will_close:
                conn.close()
            else:
                self._give(conn)
            reply = Reply(response.status,
                          {name.lower(): value for name, value in response.getheaders()}, body)
            if reply.status == 401:
                raise self.refuse("401")
            return reply

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _why(error: BaseException) -> str:
    if isinstance(error, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
