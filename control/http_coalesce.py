"""One write per small HTTP/1.1 response: hypercorn writes a response's head and its
body with two sends, so a keep-alive client wakes twice per request (on this kind of
machine that costs a third of a 1 KiB GET). `install` makes hypercorn's HTTP/1.1
protocol hold the head of a response that declares its Content-Length until the body
(or its end) follows, and send both at once. Streaming responses (no Content-Length:
MCP's server-sent events) and informational ones are sent as before, at once.

Replaces one method of hypercorn's (guarded, like memfs/fuse/mount.py's wait): when
hypercorn does not look as expected, nothing is changed and responses simply take
two writes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from itertools import chain
from typing import Any

log = logging.getLogger("memfs.http")

_installed = False


def _coalescing(original: Callable[[Any, Any], Awaitable[None]]
                ) -> Callable[[Any, Any], Awaitable[None]]:
    import h11
    from hypercorn.events import RawData
    from hypercorn.protocol.events import Body, EndBody, Response

    async def stream_send(self: Any, event: Any) -> None:
        held: bytes | None = getattr(self, "_memfs_held", None)
        if held is not None:
            self._memfs_held = None
            if isinstance(event, Body | EndBody):
                message = h11.Data(data=event.data) if isinstance(event, Body) \
                    else h11.EndOfMessage()
                await self.send(RawData(data=held + self.connection.send(message)))
                return
            await self.send(RawData(data=held))  # anything else: the head goes first
        if (isinstance(event, Response) and event.status_code >= 200
                and any(name.lower() == b"content-length" for name, _ in event.headers)):
            headers = list(chain(event.headers, self.config.response_headers("h11")))
            if self.keep_alive_requests >= self.config.keep_alive_max_requests:
                headers.append((b"connection", b"close"))
            self._memfs_held = self.connection.send(
                h11.Response(headers=headers, status_code=event.status_code))
            return
        await original(self, event)

    return stream_send


def install() -> bool:
    """Make hypercorn send a sized response in one write (once per process); False
    when hypercorn is not the one this was written for (then nothing changed)."""
    global _installed
    if _installed:
        return True
    try:
        from hypercorn.config import Config
        from hypercorn.protocol.h11 import H11Protocol

        original = H11Protocol.stream_send
        needed = ("_send_h11_event", "_maybe_recycle", "handle")
        if not all(hasattr(H11Protocol, name) for name in needed) or \
                not hasattr(Config, "response_headers"):
            raise AttributeError("hypercorn's H11Protocol changed")
        patched = _coalescing(original)
    except (ImportError, AttributeError) as error:
        log.debug("responses left at two writes: %s", error)
        return False
    H11Protocol.stream_send = patched  # type: ignore[method-assign, assignment]
    _installed = True
    return True
