"""Path validation and glob matching: pure logic."""

from __future__ import annotations

import random
import re
import time

import pytest

from memfs.store.errors import InvalidInput
from memfs.store.fs.globs import MAX_GLOB_CHARS, compile_glob, literal_prefix
from memfs.store.fs.paths import MemPath, parse_path


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


@pytest.mark.parametrize(("char", "named"), [
    ("\u2028", "U+2028 LINE SEPARATOR"), ("\u2029", "U+2029 PARAGRAPH SEPARATOR"),
    ("\x85", "U+0085"), ("\u202e", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("\u2066", "U+2066 LEFT-TO-RIGHT ISOLATE"), ("\u200b", "U+200B ZERO WIDTH SPACE"),
    ("\ufeff", "U+FEFF"), ("\U000e0041", "U+E0041 TAG LATIN CAPITAL LETTER A"),
    ("\ue000", "U+E000"), ("\u0378", "U+0378"), ("\xa0", "U+00A0 NO-BREAK SPACE"),
    ("\t", "U+0009"), ("\udcff", "U+DCFF (not valid UTF-8)"),
])
def test_names_hold_printable_characters_only(char: str, named: str) -> None:
    for raw in (f"notes/a{char}b.md", f"notes/d{char}/a.md", f"notes/{char}"):
        with pytest.raises(InvalidInput, match=re.escape(named)):
            parse_path(raw)
    with pytest.raises(InvalidInput, match=re.escape(named)):
        compile_glob(f"notes/*{char}*")
    assert parse_path("notes/ok é 😀 ü.md").rel == "ok é 😀 ü.md"


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
        # more of the same semantics, unchanged by the linear matcher
        ("notes/", "notes/a.md", True),
        ("notes/**", "notes/x/y.md", True),
        ("**/*.md", "notes/x/a.md", True),
        ("*", "notes/a.md", True),  # names the store: everything below it
        ("notes/a*", "notes/a/b.md", True),  # names a directory
        ("notes/**/b.md", "notes/b.md", True),
        ("notes/**/b.md", "notes/x/yb.md", False),
        ("n*s/a?.md", "notes/ab.md", True),
        ("notes/[a-c]x", "notes/bx", True),
        ("notes/[a-c]x", "notes/dx", False),
        ("notes/[]a].md", "notes/].md", True),
        ("notes/[!]a].md", "notes/b.md", True),  # was a regex error (internal)
        ("notes/[!]a].md", "notes/].md", False),
        ("notes/[^a]x", "notes/bx", True),
        ("notes/[\\]x", "notes/\\x", True),
        ("notes/[ab", "notes/[ab", True),  # unclosed: a literal "["
        ("notes/a**b", "notes/a/x/b", True),
        ("notes/**/", "notes/a/b", False),
        # pathological for a backtracking matcher: answered in linear time
        ("notes/" + "*a" * 8 + "*b", "notes/" + "a" * 200, False),
        ("notes/" + "*a" * 8 + "*b", "notes/" + "a" * 200 + "b", True),
        ("*a" * 60 + "*b", "notes/" + "a" * 250, False),
        ("**" + "a**" * 60 + "b", "notes/" + "a/" * 60 + "c", False),
        ("**/" * 40 + "x", "notes/" + "d/" * 60 + "y", False),
        ("**/" * 40 + "y", "notes/" + "d/" * 60 + "y", True),
        ("notes/" + "?*" * 200, "notes/" + "z" * 199, False),
        ("notes/" + "?*" * 200, "notes/" + "z" * 200, True),
        ("notes/" + "[a-z]*" * 100 + "!", "notes/" + "q" * 250, False),
    ],
)
def test_globs(pattern: str, path: str, matches: bool) -> None:
    started = time.process_time()
    assert bool(compile_glob(pattern).match(path)) is matches
    # Complexity, not speed: the old regexes took hours on the pathological rows.
    assert time.process_time() - started < 1


def test_glob_limits_are_invalid_input() -> None:
    compile_glob("x" * MAX_GLOB_CHARS)
    with pytest.raises(InvalidInput, match="longer than"):
        compile_glob("x" * (MAX_GLOB_CHARS + 1))
    with pytest.raises(InvalidInput, match="bad character range"):
        compile_glob("notes/[z-a]")


def _old_regex(pattern: str) -> re.Pattern[str]:
    """The regex translation globs used before issue 12 (backtracking), kept as the
    reference for the semantics."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out).rstrip("/") + "(?:/.*)?\\Z", re.DOTALL)


def test_globs_match_as_the_old_regexes_did() -> None:
    """Random small patterns and names: same answer as the old translation, except
    where the old one let a bracket expression match "/" (now it stays in a name)."""
    rng = random.Random(7)
    pieces = ["a", "b", "/", "*", "**", "**/", "?", "[ab]", "[!a]", "ab", "[a-b]", "]"]
    compared = 0
    for _ in range(20_000):
        pattern = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        name = "".join(rng.choice("ab/") for _ in range(rng.randint(0, 8)))
        old = bool(_old_regex(pattern).match(name))
        if old != bool(compile_glob(pattern).match(name)):
            assert "[!" in pattern and "/" in name, (pattern, name)
            continue
        compared += 1
    assert compared > 19_000


def test_literal_prefix() -> None:
    """The store and folder a glob is limited to: what `memfs ls` requires to exist."""
    assert literal_prefix("notes/**") == ("notes",)
    assert literal_prefix("*/x") == ()
    assert literal_prefix("n?tes/x") == ()
    assert literal_prefix("notes/a/b/*.md") == ("notes", "a", "b")
    assert literal_prefix("notes/a//b.md") == ("notes", "a", "b.md")  # all literal
    assert literal_prefix("notes/") == ("notes",)
    assert literal_prefix("notes/[ab]/c") == ("notes",)
