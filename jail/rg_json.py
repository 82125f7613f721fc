"""ripgrep's ``--json`` output as matches: a search's results for programs.

rg prints one JSON message a line: ``begin`` and ``end`` around each file with a
match, ``match`` and ``context`` for its lines, ``summary`` last (``rg --help``,
--json). `matches` turns them into one `Match` per match message, with its context
lines; `render` prints matches back the way rg's text output does. Pure: no I/O (the
jail runs rg: jail/api.py, jail/results.py).

What a `Match` promises (docs/reference/cli.md, Search results for programs, says the same):

* ``path`` is ``STORE/PATH``, as rg printed it from the jail's view of the stores;
  ``line`` is the 1-based number of the (first) line.
* ``text`` is the line without its final newline (a multiline match, -U: its lines
  joined by newlines). A byte that is not part of valid UTF-8 (rg sends such a line in
  base64) becomes one U+FFFD, so each such byte is one character.
* ``submatches``: each matched span of ``text``, ``start`` and ``end`` counted in
  characters (Unicode code points) from 0, ``end`` excluded: ``text[start:end] ==
  match`` in Python (rg counts bytes). A span that takes in the final newline ends
  before it.
* ``before`` and ``after``: the context lines (-A, -B, -C) as ``{"line", "text"}``.
  Each line shown once: a context line between two matches belongs to ``after`` of the
  first while it is within its -A lines, else to ``before`` of the second.
* At most ``limit`` bytes of matches, each counted as its compact UTF-8 JSON plus one;
  past it (or when rg's own output was cut) the rest is left out and ``truncated``.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from collections.abc import Iterable, Iterator
from typing import Any

# not typing's: pydantic reads these (the OpenAPI document, MCP's outputSchema), and
# takes a TypedDict of Python < 3.12 from typing_extensions only
from typing_extensions import TypedDict


class Span(TypedDict):
    """One matched part of a match's text, in characters."""

    start: int
    end: int
    match: str


class Line(TypedDict):
    """A context line."""

    line: int
    text: str


class Match(TypedDict):
    """One match: the line(s) that matched, where, and the context lines around it."""

    path: str
    line: int
    text: str
    submatches: list[Span]
    before: list[Line]
    after: list[Line]


class BadOutput(ValueError):
    """rg's output is not the JSON messages it should be."""


# each byte that is not UTF-8, as surrogateescape decodes it, becomes U+FFFD
_REPLACE = {0xDC80 + byte: 0xFFFD for byte in range(128)}
# a match as the limit counts it: compact JSON (made once: json.dumps makes one a call)
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def matches(output: bytes, *, after: int, limit: int,
            cut: bool = False) -> tuple[list[Match], bool]:
    """The matches in rg's JSON ``output`` (run with ``after`` lines of context after
    each match, -A), at most ``limit`` bytes of them, and whether some were left out.
    ``cut``: rg was stopped before it finished (its last line may be partial, and
    more matches may have followed). Raises BadOutput for anything but rg's messages.
    """
    found = _Grouper(after, limit)
    lines = output.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        try:
            message = json.loads(raw)
            kind, data = message["type"], message["data"]
        except (ValueError, KeyError, TypeError):
            if cut and number == len(lines):
                break  # the partial last line of a cut output
            raise BadOutput(f"rg's JSON output, line {number}, is not a message") from None
        if kind in ("match", "context") and not found.add(kind, data):
            return found.done, True
        if kind == "end" and not found.flush():
            return found.done, True
    if not found.flush():
        return found.done, True
    return found.done, cut


class _Grouper:
    """Match and context messages into Matches, each counted against the limit once
    its file has nothing more to add to it (at the next match or the file's end)."""

    def __init__(self, after: int, limit: int) -> None:
        self.after = after
        self.left = limit
        self.done: list[Match] = []
        self.path: str | None = None
        self.last: Match | None = None  # the file's latest match, its after still open
        self.last_line = 0  # the last line of that match
        self.pending: list[Line] = []  # context lines waiting for the next match

    def add(self, kind: str, data: dict[str, Any]) -> bool:
        """Take one match or context message; False when the limit is reached."""
        try:
            path = _text(data["path"])
            number = int(data["line_number"] or 0)
            raw = _data(data["lines"])
            text, decoded = _line(raw)
            spans = [(int(span["start"]), int(span["end"]))
                     for span in data["submatches"] or ()] if kind == "match" else []
        except (KeyError, TypeError, ValueError, binascii.Error):
            raise BadOutput(f"rg's JSON {kind} message is malformed") from None
        if path != self.path and not self.flush():
            return False
        self.path = path
        if kind == "context":
            line = Line(line=number, text=text)
            if self.last is not None and number <= self.last_line + self.after:
                self.last["after"].append(line)
            else:
                self.pending.append(line)
            return True
        if not self._close_last():
            return False
        self.last = Match(path=path, line=number, text=text,
                          submatches=_spans(text, decoded, len(raw), spans),
                          before=self.pending, after=[])
        self.last_line = number + text.count("\n")
        self.pending = []
        return True

    def flush(self) -> bool:
        """The file is done; False when the limit is reached."""
        if self.last is not None:
            self.last["after"] += self.pending  # context past -A (rg gives none): kept
        self.pending = []
        self.path = None
        return self._close_last()

    def _close_last(self) -> bool:
        match, self.last = self.last, None
        if match is None:
            return True
        size = len(_COMPACT(match).encode()) + 1
        if size > self.left:
            self.left = 0
            return False
        self.left -= size
        self.done.append(match)
        return True


def _data(field: dict[str, str]) -> bytes:
    """The bytes of one of rg's data fields: ``{"text": ...}`` or ``{"bytes": base64}``."""
    if "text" in field:
        return field["text"].encode("utf-8", "surrogatepass")
    return base64.b64decode(field["bytes"], validate=True)


def _text(field: dict[str, str]) -> str:
    """A data field as text: a byte that is not UTF-8 is U+FFFD."""
    if "text" in field:
        return field["text"]
    return _line(_data(field))[0]


def _line(data: bytes) -> tuple[str, str]:
    """The text of a line without its final newline, and the line decoded with each
    byte that is not UTF-8 as a surrogate (one character each, as in the text)."""
    decoded = data.decode("utf-8", "surrogateescape")
    kept = decoded[:-1] if decoded.endswith("\n") else decoded
    return kept.translate(_REPLACE), decoded


def _spans(text: str, decoded: str, size: int, spans: list[tuple[int, int]]) -> list[Span]:
    """rg's spans (byte offsets into the ``size`` bytes that ``decoded`` decodes) as
    character offsets into ``text``: a span that starts or ends inside a character
    takes the whole character in."""
    if len(decoded) == size:  # ASCII (or no span at all): a character is a byte
        starts = None
    else:
        starts, at = [], 0  # the byte offset at which each character starts
        for char in decoded:
            starts.append(at)
            at += 1 if "\udc80" <= char <= "\udcff" else len(char.encode())
        starts.append(at)  # where the line ends: a span may end, or be empty, there
    found: list[Span] = []
    for start, end in spans:
        if starts is not None:
            start = bisect.bisect_right(starts, start) - 1
            end = bisect.bisect_left(starts, end)
        start = min(max(start, 0), len(text))
        end = min(max(end, start), len(text))
        found.append(Span(start=start, end=end, match=text[start:end]))
    return found


# -- back to text -----------------------------------------------------------------------


def render(found: Iterable[Match], *, context: bool) -> Iterator[str]:
    """Each match as rg's text output prints it with ``--line-number --with-filename``
    (``context``: lines of context were asked for, so rg puts ``--`` between groups of
    lines that do not follow on): ``PATH:LINE:text`` for the matched lines,
    ``PATH-LINE-text`` for context, each line ending with a newline. One string a
    match, so that a caller may stop at any match."""
    path: str | None = None
    last = 0  # the last line printed of ``path``
    for match in found:
        lines = [f"{match['path']}-{line['line']}-{line['text']}\n" for line in match["before"]]
        first = match["before"][0]["line"] if match["before"] else match["line"]
        for number, text in enumerate(match["text"].split("\n"), start=match["line"]):
            lines.append(f"{match['path']}:{number}:{text}\n")
        lines += [f"{match['path']}-{line['line']}-{line['text']}\n" for line in match["after"]]
        if context and path is not None and (match["path"] != path or first > last + 1):
            lines.insert(0, "--\n")
        path = match["path"]
        last = (match["after"][-1]["line"] if match["after"]
                else match["line"] + match["text"].count("\n"))
        yield "".join(lines)
