"""Pages of text lines read from an open file, without splitting the whole file.

A line ends with ``\\n`` (a last line without one counts too). One pass over the file
in CHUNK-sized preads counts the lines (``bytes.count``) and notes where the page
starts and ends; then only the page's bytes are read and decoded. Memory stays
bounded by the page and one chunk, whatever the file holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

CHUNK = 1 << 20


@dataclass(frozen=True)
class Page:
    """Lines ``[offset, offset + lines)`` of a file (1-based) and how many it has."""

    data: bytes  # the page's bytes (its first ``max_bytes`` when ``cut``)
    offset: int
    lines: int
    total_lines: int
    cut: bool = False  # the page's lines went on past ``max_bytes``

    @property
    def text(self) -> str:
        """The page decoded as UTF-8, invalid bytes replaced."""
        return self.data.decode("utf-8", "replace")

    @property
    def next_offset(self) -> int | None:
        """The first line after this page, None at the end of the file."""
        end = self.offset - 1 + self.lines
        return end + 1 if end < self.total_lines else None


def _after_nth_newline(chunk: bytes, n: int) -> int:
    """Index just after the ``n``-th (1-based) newline of ``chunk``, which has one."""
    index = 0
    for _ in range(n):
        index = chunk.index(b"\n", index) + 1
    return index


def read_page(fd: int, offset: int, limit: int | None, size: int,
              max_bytes: int | None = None) -> Page:
    """The page of ``limit`` lines (None: to the end) from line ``offset`` (>= 1) of
    the first ``size`` bytes behind ``fd`` (a version's bytes); at most ``max_bytes``
    of them are read (None: all)."""
    return page_of(lambda want, at: os.pread(fd, max(0, min(want, size - at)), at),
                   offset, limit, max_bytes)


def page_of_bytes(data: bytes, offset: int, limit: int | None,
                  max_bytes: int | None = None) -> Page:
    """The same page of ``data``."""
    return page_of(lambda size, at: data[at : at + size], offset, limit, max_bytes)


def page_of(pread: Callable[[int, int], bytes], offset: int, limit: int | None,
            max_bytes: int | None = None) -> Page:
    """The page, reading through ``pread(size, offset)``."""
    before = offset - 1  # lines before the page
    through = None if limit is None else before + limit  # lines up to its end
    start = 0 if before == 0 else None  # byte offsets of the page
    end = None
    lines = 0  # newlines seen so far
    position = 0
    last = b"\n"
    while chunk := pread(CHUNK, position):
        count = chunk.count(b"\n")
        if start is None and lines < before <= lines + count:
            start = position + _after_nth_newline(chunk, before - lines)
        if end is None and through is not None and lines < through <= lines + count:
            end = position + _after_nth_newline(chunk, through - lines)
        lines += count
        position += len(chunk)
        last = chunk[-1:]
    total = lines if last == b"\n" else lines + 1
    start = position if start is None else start
    end = position if end is None else end
    cut = max_bytes is not None and end - start > max_bytes
    if max_bytes is not None:
        end = min(end, start + max_bytes)
    parts: list[bytes] = []
    while start < end:
        piece = pread(min(end - start, CHUNK), start)
        if not piece:
            break
        parts.append(piece)
        start += len(piece)
    shown = max(0, min(total, total if through is None else through) - before)
    return Page(b"".join(parts), offset, shown, total, cut)
