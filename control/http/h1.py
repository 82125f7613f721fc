"""HTTP/1.1 framing for the listener (control/http/server.py), sans I/O: the server feeds
the bytes it reads in, takes events out, and gets the bytes of each answer to write.

Why not h11, which this replaces: h11 is pure Python and validates every event of both
directions through its state machine; per request it cost more CPU than the rest of
the server (34 us of a keep-alive GET's ~100 us on this machine, bench_http.py). Here a
request head is parsed by llhttp (Node.js's parser, in C, through httptools): its
request line, header names and values, Content-Length and Transfer-Encoding are
checked there, strictly (bare LF, obsolete line folding, a bad token or value
character, a duplicate Content-Length, Content-Length with Transfer-Encoding, a
Transfer-Encoding that does not end in chunked: all refused). The rest is small and
done here: where a head ends (at most ``max_head_bytes``, else 431), the body's
framing (Content-Length, or chunked with bounded size lines and trailers), keep-alive
(HTTP/1.1 without ``Connection: close``), ``Expect: 100-continue``, and the answer's
framing (the application's Content-Length, else chunked; no body for HEAD, 1xx, 204,
304; ``connection: close`` when the connection ends after it). A header the
application gives with CR, LF or NUL in it is refused (no response splitting).

Events, as h11 named them: a `Request`, then `Data` of its body and `EndOfMessage`;
`NEED_DATA` when more bytes are needed, `PAUSED` after the request's end until
`start_next_cycle`, `CLOSED` when the client closed the connection between requests.
`ProtocolError` (with its status, 400 or 431) for anything else; the connection is
then to be answered and closed.
"""

from __future__ import annotations

import http
from dataclasses import dataclass

import httptools

MAX_CHUNK_LINE = 1024  # a chunk's size line (hex size and extensions)
MAX_TRAILERS = 16 * 1024  # the trailer section of a chunked body


class ProtocolError(Exception):
    """The client broke HTTP/1.1; ``status``: the answer to give before closing."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")
PAUSED = _Sentinel("PAUSED")
CLOSED = _Sentinel("CLOSED")


@dataclass(slots=True)
class Request:
    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]  # names lower-cased, values without outer spaces
    http_version: bytes  # b"1.1" or b"1.0"
    keep_alive: bool  # the client lets the connection serve another request after it


@dataclass(slots=True)
class Data:
    data: bytes


class _EndOfMessage:
    def __repr__(self) -> str:
        return "EndOfMessage"


END = _EndOfMessage()

_NO_BODY = frozenset({204, 304})
_REASONS = {status.value: status.phrase.encode() for status in http.HTTPStatus}


class _Head:
    """llhttp's callbacks for one request head."""

    __slots__ = ("headers", "target")

    def __init__(self) -> None:
        self.target = b""
        self.headers: list[tuple[bytes, bytes]] = []

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.strip(b" \t")))


class Connection:
    """One connection's HTTP/1.1 state, server side (see the module doc)."""

    def __init__(self, max_head_bytes: int) -> None:
        self.max_head_bytes = max_head_bytes
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no end of head or line
        self._eof = False
        self.request: Request | None = None
        # the request body: bytes still to come (Content-Length), or None when chunked
        self._left: int | None = 0
        self._chunk_left = 0  # chunked: bytes left of the current chunk (+2: its CRLF)
        self._in_trailers = False
        self.their_done = True  # the whole request (its body included) was read
        self._body_seen = False  # a byte of the body arrived (no 100-continue needed)
        # the answer: not started, its head sent, or complete
        self._answered = False
        self._continued = False  # 100 Continue was sent
        self.our_done = False
        self._chunked_out = False
        self._no_body_out = False
        self._out_left: int | None = None  # bytes of a sized answer still to send
        self.must_close = False  # the connection ends after this answer

    # -- what came in ---------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the client; b"" when it closed its side."""
        if data:
            self._buffer += data
        else:
            self._eof = True

    @property
    def unparsed(self) -> int:
        """Bytes received and not yet handed out as events."""
        return len(self._buffer)

    @property
    def waiting_for_continue(self) -> bool:
        """The client sent ``Expect: 100-continue`` and waits for it before its body."""
        request = self.request
        return (request is not None and not self._answered and not self._continued
                and not self.their_done and not self._body_seen and self._left != 0
                and request.http_version == b"1.1"
                and any(name == b"expect" and value.lower() == b"100-continue"
                        for name, value in request.headers))

    def next_event(self) -> Request | Data | _EndOfMessage | _Sentinel:
        """The next event; raises ProtocolError."""
        if self.request is None:
            return self._head()
        if self.their_done:
            return PAUSED
        if self._left is not None:
            return self._sized()
        return self._chunked()

    def _find(self, *markers: bytes) -> tuple[int, int]:
        """Where the first of ``markers`` first is in the buffer, and its length; (-1,
        0) if none is. The search resumes where the last one stopped (a head that
        comes a byte at a time is not scanned again and again)."""
        start = max(0, self._scanned - max(len(marker) for marker in markers) + 1)
        found = [(at, len(marker)) for marker in markers
                 if (at := self._buffer.find(marker, start)) >= 0]
        if not found:
            self._scanned = len(self._buffer)
            return -1, 0
        self._scanned = 0
        return min(found)

    def _head(self) -> Request | _Sentinel:
        buffer = self._buffer
        while buffer[:2] == b"\r\n":  # empty lines before a request line are ignored
            del buffer[:2]
            self._scanned = 0
        # (a head that ends in bare LFs is found too, for llhttp to refuse it: 400)
        end, blank = self._find(b"\r\n\r\n", b"\n\n")
        if end < 0 or end + blank > self.max_head_bytes:
            if len(buffer) > self.max_head_bytes or end >= 0:
                raise ProtocolError(f"the request head is longer than {self.max_head_bytes} "
                                    "bytes", 431)
            if self._eof:
                if buffer:
                    raise ProtocolError("the connection was closed inside a request head")
                return CLOSED
            return NEED_DATA
        head = bytes(buffer[:end + blank])
        del buffer[:end + blank]
        found = _Head()
        parser = httptools.HttpRequestParser(found)
        try:
            parser.feed_data(head)
        except httptools.HttpParserUpgrade:
            pass  # (Upgrade is not taken: the request is answered as a plain one)
        except httptools.HttpParserError as error:
            raise ProtocolError(f"bad request head: {error}") from None
        version = parser.get_http_version().encode()
        if version not in (b"1.1", b"1.0"):
            raise ProtocolError(f"HTTP/{version.decode()} is not served here (HTTP/1.1 is)")
        length: int | None = 0
        connection: list[bytes] = []
        for name, value in found.headers:
            if name == b"content-length":
                length = int(value)  # (llhttp checked it: digits, at most one)
            elif name == b"transfer-encoding":
                length = None  # (llhttp checked it ends in chunked)
            elif name == b"connection":
                connection += [token.strip().lower() for token in value.split(b",")]
        keep_alive = version == b"1.1" and b"close" not in connection
        self.request = Request(parser.get_method(), found.target, found.headers, version,
                               keep_alive)
        self.must_close = not keep_alive
        self._left, self._chunk_left, self._in_trailers = length, 0, False
        self.their_done = False  # (until END is handed out, also for an empty body)
        self._body_seen = False
        return self.request

    def _sized(self) -> Data | _EndOfMessage | _Sentinel:
        left = self._left
        assert left is not None
        if left == 0:
            self.their_done = True
            return END
        if not self._buffer:
            if self._eof:
                raise ProtocolError("the connection was closed inside a request body")
            return NEED_DATA
        data = bytes(self._buffer[:left])
        del self._buffer[:left]
        self._left = left - len(data)
        self._body_seen = True
        return Data(data)

    def _chunked(self) -> Data | _EndOfMessage | _Sentinel:
        buffer = self._buffer
        while True:
            if self._in_trailers:  # after the last chunk: trailer lines, then an empty one
                end, _ = self._find(b"\r\n")
                if end < 0:
                    return self._more(len(buffer) > MAX_TRAILERS, "trailer section")
                line = bytes(buffer[:end])
                del buffer[:end + 2]
                if not line:
                    self.their_done = True
                    return END
                continue  # (a trailer field: dropped)
            if self._chunk_left > 2:  # data of the current chunk
                if not buffer:
                    return self._more(False, "chunk")
                data = bytes(buffer[:self._chunk_left - 2])
                del buffer[:len(data)]
                self._chunk_left -= len(data)
                self._body_seen = True
                return Data(data)
            if self._chunk_left:  # the CRLF after a chunk's data
                if len(buffer) < self._chunk_left:
                    return self._more(False, "chunk")
                if buffer[:self._chunk_left] != b"\r\n"[2 - self._chunk_left:]:
                    raise ProtocolError("a chunk of the request body does not end in CRLF")
                del buffer[:self._chunk_left]
                self._chunk_left = 0
            end, _ = self._find(b"\r\n")  # the next chunk's size line
            if end < 0:
                return self._more(len(buffer) > MAX_CHUNK_LINE, "chunk size line")
            size_text = bytes(buffer[:end]).split(b";", 1)[0].strip(b" \t")
            if not size_text or len(size_text) > 16 or any(
                    char not in b"0123456789abcdefABCDEF" for char in size_text):
                raise ProtocolError("bad chunk size in the request body")
            del buffer[:end + 2]
            size = int(size_text, 16)
            self._body_seen = True
            if size == 0:
                self._in_trailers = True
            else:
                self._chunk_left = size + 2

    def _more(self, too_long: bool, what: str) -> _Sentinel:
        if too_long:
            raise ProtocolError(f"the request body's {what} is too long")
        if self._eof:
            raise ProtocolError("the connection was closed inside a request body")
        return NEED_DATA

    # -- what goes out --------------------------------------------------------------

    def informational(self, status: int) -> bytes:
        """A 1xx answer (100 Continue), before the answer itself."""
        self._continued = True
        return b"HTTP/1.1 %d %s\r\n\r\n" % (status, _REASONS.get(status, b""))

    def response(self, status: int, headers: list[tuple[bytes, bytes]], *,
                 head_only: bool) -> bytes:
        """The head of the answer (``head_only``: to a HEAD request, so no body
        follows). ``headers`` are the application's, then ours (date...)."""
        if self._answered:
            raise RuntimeError("a second answer to one request")
        self._answered = True
        lines = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b""))]
        length: int | None = None
        close, said = self.must_close, False
        for name, value in headers:
            if (not name or any(char in name for char in b"\r\n: \t\0") or b"\r" in value
                    or b"\n" in value or b"\0" in value):
                raise ValueError(f"a header the answer cannot carry: {name!r}")
            lowered = name.lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"connection" and b"close" in value.lower():
                close = said = True
            elif lowered == b"transfer-encoding":
                continue  # framing is ours
            lines.append(name + b": " + value)
        self._no_body_out = head_only or status < 200 or status in _NO_BODY
        if not self._no_body_out and length is None:
            if self.request is not None and self.request.http_version == b"1.1":
                self._chunked_out = True
                lines.append(b"transfer-encoding: chunked")
            else:
                close = True  # an HTTP/1.0 client reads until the connection closes
        self._out_left = None if self._no_body_out else length
        if close:
            self.must_close = True
            if not said:
                lines.append(b"connection: close")
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def data(self, data: bytes) -> bytes:
        """A piece of the answer's body, framed."""
        if self._no_body_out or not data:
            return b""
        if self._out_left is not None:
            if len(data) > self._out_left:
                raise ValueError("the answer's body is longer than its Content-Length")
            self._out_left -= len(data)
            return data
        if self._chunked_out:
            return b"%x\r\n%s\r\n" % (len(data), data)
        return data

    def end(self) -> bytes:
        """The end of the answer."""
        self.our_done = True
        if self._out_left:
            self.must_close = True  # shorter than it said: the client cannot tell
            raise ValueError("the answer's body is shorter than its Content-Length")
        return b"0\r\n\r\n" if self._chunked_out else b""

    def start_next_cycle(self) -> bool:
        """Get ready for the next request; False when the connection must end (the
        answer or the request said so, or either was not complete)."""
        if not (self.our_done and self.their_done) or self.must_close:
            return False
        self.request = None
        self._answered = self._continued = self.our_done = False
        self._chunked_out = self._no_body_out = False
        self._out_left = None
        return True
