"""Which ``Host`` and ``Origin`` a request to ``/mcp`` may carry.

MCP's streamable HTTP transport says a server must validate ``Origin`` (DNS rebinding:
a page of another site, its name pointed at 127.0.0.1, would otherwise reach a local
server) and answer 403 to a bad one. `OriginCheck` does it in front of the bearer
check, for the paths it is given:

* **Host** must be one of the listener's own names: the host of ``[http] listen``,
  the address the connection came to, and for a loopback address also ``localhost``,
  ``127.0.0.1`` and ``[::1]``, each with the port the listener bound (alone when it
  is the scheme's default), or the host[:port] of an ``[http] allowed_origins`` entry
  (a listener reached through a proxy under that name). A TLS listener takes any
  Host: the browser has already checked the name against the certificate, which a
  rebound name cannot pass. No Host at all (HTTP/1.0) is no browser's request.
* **Origin**, when there is one (browsers send it; other clients need not), must be
  the listener's own (``scheme://`` one of the Hosts above; with TLS the Host the
  request carries) or one of ``[http] allowed_origins``.

A refusal is a 403 ``permission_denied`` problem (memfs/errors.py) saying what to
configure, and one warning line at most every 10 s (control/ratelimit.py), so that a
hostile page cannot flood the log. The MCP SDK's own check is left off: it would
answer in plain text and log every refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from memfs.config import DEFAULT_PORTS, HttpConfig, is_loopback, parse_origin
from memfs.control.http.problems import problem
from memfs.control.ratelimit import RateLimitedLog

log = logging.getLogger("memfs.http")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
SHOWN = 200  # characters of a refused header value echoed in the answer (80 in the log)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _authority(origin: str) -> str:
    """``host[:port]`` of a normalized origin (parse_origin's form)."""
    return origin.partition("://")[2]


def _origin_of(scheme: str, host: str) -> str:
    """The origin of a page served over ``scheme`` under the Host ``host`` (normalized;
    a Host that is no valid name gives one that matches nothing)."""
    try:
        return parse_origin(f"{scheme}://{host}")
    except ValueError:
        return "invalid://"


class ListenerNames:
    """The names and origins of one listener (see the module doc)."""

    def __init__(self, http: HttpConfig) -> None:
        self.listen_host = _bracketed(http.address[0].lower())
        self.allowed_origins = frozenset(http.allowed_origins)
        self.proxied = frozenset(_authority(origin) for origin in self.allowed_origins)

    def own_hosts(self, scheme: str, local: tuple[str, int]) -> set[str]:
        """The Host values that name this listener, for a connection that came to
        the local address ``local`` (address, port) over ``scheme``."""
        address, port = local
        names = {self.listen_host, _bracketed(address.lower())}
        if is_loopback(address):
            names |= LOOPBACK_NAMES
        hosts = {f"{name}:{port}" for name in names}
        if port == DEFAULT_PORTS.get(scheme):
            hosts |= names
        return hosts

    def refusal(self, scheme: str, local: tuple[str, int], host: str | None,
                origin: str | None) -> str | None:
        """Why a request with these ``Host`` and ``Origin`` headers is refused, or
        None when it may go on."""
        host = None if host is None else host.strip().lower()
        if host and scheme != "https":
            hosts = self.own_hosts(scheme, local)
            if host not in hosts and host not in self.proxied:
                return (f"Host {host[:SHOWN]!r} is not a name of this listener (it answers "
                        f"to {', '.join(sorted(hosts))}): a name it is reached by through "
                        "a proxy goes in [http] allowed_origins")
        if origin is None:
            return None
        try:
            normalized = parse_origin(origin)
        except ValueError:
            normalized = None
        if normalized is not None:
            if normalized in self.allowed_origins:
                return None
            if scheme == "https":
                own = {_authority(_origin_of(scheme, host))} if host else set()
            else:
                own = self.own_hosts(scheme, local)
            if normalized.startswith(f"{scheme}://") and _authority(normalized) in own:
                return None
        return (f"requests from pages of Origin {origin[:SHOWN]!r} are refused: only "
                "this listener's own pages and the origins listed in [http] "
                "allowed_origins may call it (MCP checks Origin against DNS rebinding)")


class OriginCheck:
    """ASGI middleware: a request to one of ``paths`` whose Host or Origin is not
    this listener's (`ListenerNames.refusal`) gets 403 ``permission_denied``."""

    def __init__(self, app: ASGIApp, http: HttpConfig, paths: Collection[str]) -> None:
        self.app = app
        self.names = ListenerNames(http)
        self.paths = frozenset(paths)
        self._refused = RateLimitedLog(log)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        host = origin = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        server = scope.get("server") or ("", 0)
        why = self.names.refusal(scope["scheme"], (str(server[0]), int(server[1] or 0)),
                                 host, origin)
        if why is None:
            await self.app(scope, receive, send)
            return
        self._refused.log("http: refused a request to %s with Host %r and Origin %r",
                          scope["path"], (host or "")[:80], (origin or "")[:80])
        await problem("permission_denied", why)(scope, receive, send)
