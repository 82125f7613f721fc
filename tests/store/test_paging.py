"""Text reads page through a file without splitting all of it into lines: a page of a
16 MB file of short lines costs the daemon little memory, and pages are exact."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from memfs.store.read.pages import Page, page_of_bytes
from tests.support import UID_A, Daemon, connect_as, plant, public_tmpdir, standard_config

MiB = 1 << 20


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def daemon() -> Daemon:
    base = public_tmpdir()
    with Daemon(standard_config(base)) as running:
        yield running


def test_a_page_of_a_big_file_of_short_lines_is_cheap(daemon: Daemon) -> None:
    lines = 16 * MiB // 8  # "%07d\n": 8 bytes a line
    data = "".join(f"{n:07d}\n" for n in range(lines))
    stores = Path(daemon.config["root"]) / "stores" / "notes"
    plant(stores / "big.log", data)  # planted: hashed once on first open
    assert daemon.proc is not None
    with connect_as(UID_A, daemon.socket) as alice:
        alice.stat("notes/big.log")  # version record made, digest cached
        before = peak_rss(daemon.proc.pid)
        page = alice.read("notes/big.log", offset=1_000_000, limit=3)
        tail = alice.read("notes/big.log", offset=lines - 1, limit=10)
    grown = peak_rss(daemon.proc.pid) - before
    assert page["text"] == "0999999\n1000000\n1000001\n"
    assert (page["lines"], page["total_lines"], page["next_offset"]) == (3, lines, 1_000_003)
    assert tail["text"] == f"{lines - 2:07d}\n{lines - 1:07d}\n"
    assert (tail["lines"], tail["next_offset"]) == (2, None)
    assert grown < 48 * MiB, f"a 3-line page grew the daemon's peak memory by {grown >> 20} MiB"


_names = itertools.count()
CASES = [  # content, offset, limit -> text, lines, total, next
    ("", 1, None, "", 0, 0, None),
    ("a", 1, None, "a", 1, 1, None),
    ("a\nb", 2, 5, "b", 1, 2, None),
    ("a\nb\n", 3, 1, "", 0, 2, None),
    ("a\nb\nc\n", 1, 2, "a\nb\n", 2, 3, 3),
    ("a\r\nb\rc\n", 1, 1, "a\r\n", 1, 2, 2),  # lines end with \n only
    ("\n\n\n", 2, 1, "\n", 1, 3, 3),
    ("x\xff\n", 1, None, "x\ufffd\n", 1, 1, None),
]


@pytest.mark.parametrize(("content", "offset", "limit", "text", "lines", "total", "nxt"),
                         CASES)
def test_page_rows(daemon: Daemon, content: str, offset: int, limit: int | None, text: str,
                   lines: int, total: int, nxt: int | None) -> None:
    path = f"notes/page-{next(_names)}.txt"
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write(path, content.encode("latin-1") if "\xff" in content else content)
        page = alice.read(path, offset=offset, limit=limit)
    assert (page["text"], page["lines"], page["total_lines"], page["next_offset"]) == (
        text, lines, total, nxt)


def test_a_page_can_be_cut_at_a_byte_count() -> None:
    """The web view's pages: PAGE_LINES lines, at most so many bytes of them."""
    data = b"aa\nbbbb\ncc\n"
    assert page_of_bytes(data, 2, 2, max_bytes=3) == Page(b"bbb", 2, 2, 3, cut=True)
    assert page_of_bytes(data, 2, 2, max_bytes=8) == Page(b"bbbb\ncc\n", 2, 2, 3)
    assert page_of_bytes(data, 2, 2) == Page(b"bbbb\ncc\n", 2, 2, 3)
    assert page_of_bytes(data, 4, 2, max_bytes=1) == Page(b"", 4, 0, 3)
    assert page_of_bytes(b"x\xff\n", 1, None).text == "x\ufffd\n"
