"""The listener's HTTP/1.1 framing (control/http/h1.py), without a server: requests fed
whole and a byte at a time, pipelined, refused; answers framed. The listener's own tests
(test_listener.py, over real sockets to a real daemon) cover the same through the server."""

from __future__ import annotations

import pytest

from memfs.control.http import h1

MAX = 1024


def events(conn: h1.Connection) -> list[object]:
    """Every event until more bytes are needed (or the request ended)."""
    found: list[object] = []
    while True:
        event = conn.next_event()
        if event in (h1.NEED_DATA, h1.PAUSED, h1.CLOSED):
            return [*found, event]
        found.append(event)


def body_of(found: list[object]) -> bytes:
    return b"".join(event.data for event in found if isinstance(event, h1.Data))


def feed(raw: bytes, *, bytewise: bool = False) -> tuple[h1.Connection, list[object]]:
    conn = h1.Connection(MAX)
    found: list[object] = []
    for piece in ([raw[i:i + 1] for i in range(len(raw))] if bytewise else [raw]):
        conn.receive_data(piece)
        found += [e for e in events(conn) if e not in (h1.NEED_DATA, h1.PAUSED)]
        if h1.END in found:
            break
    return conn, found


@pytest.mark.parametrize("bytewise", [False, True])
def test_a_request_with_a_sized_body(bytewise: bool) -> None:
    conn, found = feed(b"PUT /v1/a%20b?x=1 HTTP/1.1\r\nHost: memfs\r\nX-Pad:  v  \r\n"
                       b"Content-Length: 5\r\n\r\nhello", bytewise=bytewise)
    request = found[0]
    assert isinstance(request, h1.Request)
    assert (request.method, request.target, request.http_version) == (b"PUT", b"/v1/a%20b?x=1",
                                                                      b"1.1")
    assert (b"x-pad", b"v") in request.headers and request.keep_alive
    assert body_of(found) == b"hello" and found[-1] is h1.END and conn.their_done


@pytest.mark.parametrize("bytewise", [False, True])
def test_a_chunked_body_with_extensions_and_trailers(bytewise: bool) -> None:
    _, found = feed(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"3;ext=1\r\none\r\nA\r\n two three\r\n0\r\nX-Trailer: t\r\n\r\n",
                    bytewise=bytewise)
    assert body_of(found) == b"one two three" and found[-1] is h1.END


def test_an_empty_body_still_ends_and_pipelined_requests_wait_their_turn() -> None:
    conn = h1.Connection(MAX)
    conn.receive_data(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nConnection: close\r\n\r\n")
    first = conn.next_event()
    assert isinstance(first, h1.Request) and first.target == b"/a"
    assert conn.next_event() is h1.END and conn.next_event() is h1.PAUSED
    conn.response(200, [(b"content-length", b"0")], head_only=False)
    conn.end()
    assert conn.start_next_cycle()
    second = conn.next_event()
    assert isinstance(second, h1.Request) and second.target == b"/b"
    assert not second.keep_alive and conn.must_close


def test_a_closed_connection_between_requests_and_inside_one() -> None:
    conn = h1.Connection(MAX)
    conn.receive_data(b"")
    assert conn.next_event() is h1.CLOSED
    conn = h1.Connection(MAX)
    conn.receive_data(b"GET / HTT")
    conn.receive_data(b"")
    with pytest.raises(h1.ProtocolError):
        conn.next_event()
    conn = h1.Connection(MAX)
    conn.receive_data(b"PUT / HTTP/1.1\r\nContent-Length: 9\r\n\r\nhalf")
    conn.receive_data(b"")
    with pytest.raises(h1.ProtocolError, match="inside a request body"):
        events(conn)


def test_a_head_over_the_limit_is_431_and_one_at_it_passes() -> None:
    line = b"GET / HTTP/1.1\r\nX: "
    fits = line + b"x" * (MAX - len(line) - 4) + b"\r\n\r\n"
    assert len(fits) == MAX
    conn = h1.Connection(MAX)
    conn.receive_data(fits)
    assert isinstance(conn.next_event(), h1.Request)
    for head in (line + b"x" * MAX + b"\r\n\r\n", line + b"x" * MAX):  # whole, or not yet
        conn = h1.Connection(MAX)
        conn.receive_data(head)
        with pytest.raises(h1.ProtocolError) as raised:
            conn.next_event()
        assert raised.value.status == 431


@pytest.mark.parametrize("raw", [
    b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    b"PUT / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
    b"PUT / HTTP/1.1\r\nContent-Length: 3x\r\n\r\n",
    b"PUT / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"GET / HTTP/1.1\r\n folded: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
    b"GET / HTTP/1.1\nHost: x\n\n",  # bare LFs: refused at once, not waited on
    b"GET / HTTP/1.1\r\nHost: x\r\n\n",
    b"GET / HTTP/2.0\r\n\r\n",
    b"BREW / HTTP/1.1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS to a plain listener
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
])
def test_bad_requests_are_refused(raw: bytes) -> None:
    conn = h1.Connection(MAX)
    conn.receive_data(raw)
    with pytest.raises(h1.ProtocolError) as raised:
        events(conn)
    assert raised.value.status == 400


def test_keep_alive_and_continue() -> None:
    conn, found = feed(b"GET / HTTP/1.0\r\n\r\n")
    assert not found[0].keep_alive and conn.must_close  # type: ignore[attr-defined]
    conn = h1.Connection(MAX)
    conn.receive_data(b"PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert isinstance(conn.next_event(), h1.Request) and conn.waiting_for_continue
    assert conn.informational(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert not conn.waiting_for_continue
    conn = h1.Connection(MAX)  # no body to wait for: no 100 either
    conn.receive_data(b"PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n")
    assert isinstance(conn.next_event(), h1.Request) and not conn.waiting_for_continue


def answer(conn: h1.Connection, status: int, headers: list[tuple[bytes, bytes]],
           chunks: list[bytes], *, head_only: bool = False) -> bytes:
    out = conn.response(status, headers, head_only=head_only)
    for chunk in chunks:
        out += conn.data(chunk)
    return out + conn.end()


def started(raw: bytes = b"GET / HTTP/1.1\r\n\r\n") -> h1.Connection:
    conn = h1.Connection(MAX)
    conn.receive_data(raw)
    assert isinstance(conn.next_event(), h1.Request) and conn.next_event() is h1.END
    return conn


def test_answers_are_framed() -> None:
    sized = answer(started(), 200, [(b"content-length", b"5")], [b"hel", b"lo"])
    assert sized == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
    streamed = answer(started(), 200, [(b"content-type", b"text/event-stream")], [b"ab", b"c"])
    assert streamed == (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                        b"transfer-encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n")
    head = answer(started(b"HEAD / HTTP/1.1\r\n\r\n"), 200, [(b"content-length", b"5")], [],
                  head_only=True)
    assert head == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
    assert answer(started(), 304, [(b"etag", b'"x"')], []) == (
        b'HTTP/1.1 304 Not Modified\r\netag: "x"\r\n\r\n')
    old = started(b"GET / HTTP/1.0\r\n\r\n")
    assert answer(old, 200, [], [b"x"]) == b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nx"
    assert not old.start_next_cycle()


def test_an_answer_that_asks_to_close_ends_the_connection() -> None:
    conn = started()
    assert answer(conn, 503, [(b"connection", b"close"), (b"content-length", b"0")], []) == (
        b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
    assert not conn.start_next_cycle()


@pytest.mark.parametrize("header", [(b"location", b"/a\r\nSet-Cookie: x=1"),
                                    (b"x-a\r\nx-b", b"1"), (b"x", b"a\nb"), (b"x", b"a\0"),
                                    (b"x y", b"1"), (b"", b"1")])
def test_a_header_that_would_split_the_answer_is_refused(header: tuple[bytes, bytes]) -> None:
    with pytest.raises(ValueError):
        started().response(200, [header], head_only=False)


def test_a_body_other_than_its_length_is_refused() -> None:
    conn = started()
    conn.response(200, [(b"content-length", b"2")], head_only=False)
    with pytest.raises(ValueError):
        conn.data(b"abc")
    conn = started()
    conn.response(200, [(b"content-length", b"2")], head_only=False)
    conn.data(b"a")
    with pytest.raises(ValueError):
        conn.end()
    assert conn.must_close
