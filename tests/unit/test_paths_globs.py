"""Path validation and glob matching: pure logic."""

from __future__ import annotations

import pytest

from memfs.store.errors import InvalidInput
from memfs.store.globs import compile_glob, literal_store
from memfs.store.paths import MemPath, parse_path


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("notes/a.md", MemPath("notes", ("a.md",))),
        ("/memory/notes/x/y.md", MemPath("notes", ("x", "y.md"))),
        ("notes/dir/", MemPath("notes", ("dir",))),
        ("notes/é ü.md", MemPath("notes", ("é ü.md",))),
    ],
)
def test_good_paths(raw: str, expected: MemPath) -> None:
    assert parse_path(raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["", "/", "/etc/passwd", "notes", "notes/../secret/a", "notes/./a", "notes//a",
     "notes/a\x00b", "notes/a\nb", "notes/a\x7fb", "notes/" + "x" * 256,
     "notes/" + "/".join(["d"] * 70), "a/" * 2100 + "b", "../notes/a"],
)
def test_bad_paths(raw: str) -> None:
    with pytest.raises(InvalidInput):
        parse_path(raw)


def test_store_only_when_allowed() -> None:
    assert parse_path("notes", allow_store_only=True) == MemPath("notes", ())


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("notes/**/*.md", "notes/a.md", True),
        ("notes/**/*.md", "notes/x/y/a.md", True),
        ("notes/**/*.md", "notes/a.txt", False),
        ("notes/*.md", "notes/x/a.md", False),
        ("*/a.md", "ops/a.md", True),
        ("**", "ops/x/y", True),
        ("notes", "notes/x/y", True),
        ("notes", "notesX/y", False),
        ("notes/a?.md", "notes/ab.md", True),
        ("notes/a?.md", "notes/a/.md", False),
        ("notes/[ab].md", "notes/b.md", True),
        ("notes/[!ab].md", "notes/b.md", False),
        ("notes/a.md", "notes/a.mdx", False),
    ],
)
def test_globs(pattern: str, path: str, matches: bool) -> None:
    assert bool(compile_glob(pattern).match(path)) is matches


def test_literal_store() -> None:
    assert literal_store("notes/**") == "notes"
    assert literal_store("*/x") is None
    assert literal_store("n?tes/x") is None
