"""control/http_coalesce.py: a sized response goes out in one write (head and body),
byte for byte what hypercorn would have sent in two; streaming responses are not held."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import h11
from hypercorn.config import Config
from hypercorn.events import RawData
from hypercorn.protocol.events import Body, EndBody, Response
from hypercorn.protocol.h11 import H11Protocol

from control.http_coalesce import install


def protocol(sent: list[bytes]) -> Any:
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert isinstance(connection.next_event(), h11.Request)
    connection.next_event()  # EndOfMessage

    async def send(event: Any) -> None:
        assert isinstance(event, RawData)
        sent.append(event.data)

    fake = SimpleNamespace(connection=connection, config=Config(), keep_alive_requests=1,
                           send=send)
    fake._send_h11_event = lambda event: H11Protocol._send_h11_event(fake, event)
    return fake


async def test_sized_response_is_one_write() -> None:
    assert install() and install()  # idempotent
    sent: list[bytes] = []
    fake = protocol(sent)
    await H11Protocol.stream_send(fake, Response(stream_id=1, status_code=200,
                                                 headers=[(b"content-length", b"5")]))
    assert sent == []
    await H11Protocol.stream_send(fake, Body(stream_id=1, data=b"hello"))
    await H11Protocol.stream_send(fake, EndBody(stream_id=1))
    assert len(sent) == 2 and sent[1] == b""  # the end of a sized body is no bytes
    assert sent[0].startswith(b"HTTP/1.1 200 ") and sent[0].endswith(b"\r\n\r\nhello")
    assert fake.connection.our_state is h11.DONE


async def test_empty_and_streaming_responses() -> None:
    sent: list[bytes] = []
    fake = protocol(sent)
    await H11Protocol.stream_send(fake, Response(stream_id=1, status_code=204,
                                                 headers=[(b"content-length", b"0")]))
    await H11Protocol.stream_send(fake, EndBody(stream_id=1))
    assert len(sent) == 1 and sent[0].startswith(b"HTTP/1.1 204 ")
    streamed: list[bytes] = []
    fake = protocol(streamed)
    await H11Protocol.stream_send(fake, Response(stream_id=1, status_code=200, headers=[
        (b"content-type", b"text/event-stream")]))
    assert len(streamed) == 1  # no Content-Length: the head is not held
    assert b"transfer-encoding: chunked" in streamed[0].lower()
