"""The patterns the protocol's models state in their JSON schemas (so in the OpenAPI
document) say exactly what the layers below take: a value the pattern takes is taken
by the memory model, the history and the path parser, and one they refuse the pattern
refuses too. Pure, no daemon."""

from __future__ import annotations

import random
import re
from datetime import date, timedelta

import pytest

from memfs.memory import records
from memfs.store.errors import InvalidInput
from memfs.store.fs.paths import REL_PATH_CHARS, parse_path, rel_path_pattern
from memfs.store.history import revs
from memfs.store.history.repo import parse_time

SPACES = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
SAMPLES = ["", " ", "a", " a ", "\0", "a\0", "\t\n", "\u2028", "a\u2028b", "x\ny", "\x1c",
           "\x1f", "\u3000", "\ufeff", "é", "a\rb", "\x85", "\u200b", *SPACES]


def accepted(check, *args, **kwargs) -> bool:  # type: ignore[no-untyped-def]
    try:
        check(*args, **kwargs)
    except InvalidInput:
        return False
    return True


@pytest.mark.parametrize("value", SAMPLES)
def test_text_patterns_agree_with_the_memory_model(value: str) -> None:
    assert bool(re.fullmatch(records.TEXT_PATTERN, value)) == accepted(
        records.text, "note", value)
    assert bool(re.fullmatch(records.OPTIONAL_TEXT_PATTERN, value)) == accepted(
        records.text, "body", value, required=False)
    assert bool(re.fullmatch(records.LINE_PATTERN, value)) == accepted(
        records.text, "title", value, one_line=True)


def test_the_duration_pattern_is_one_second_to_thirty_days() -> None:
    pattern = re.compile(records.DURATION_PATTERN)
    for unit, seconds in (("s", 1), ("m", 60), ("h", 3600), ("d", 86400)):
        top = 30 * 86400 // seconds
        for n in (1, 2, 9, 10, top - 1, top):
            assert pattern.fullmatch(f"{n}{unit}") and records.duration(f"{n}{unit}") == \
                n * seconds
        for bad in (f"0{unit}", f"{top + 1}{unit}", f"01{unit}", f" 1{unit}", f"1{unit} "):
            assert not pattern.fullmatch(bad) and not accepted(records.duration, bad), bad


def test_every_time_the_pattern_takes_exists() -> None:
    pattern = re.compile(revs.TIME_PATTERN)
    day = date(1, 1, 1)
    while day < date(2101, 1, 1):  # every day of 2100 years, leap rules included
        assert pattern.fullmatch(day.isoformat()), day
        day += timedelta(days=1)
    rng = random.Random(22)
    for _ in range(20000):
        text = (f"{rng.randint(0, 9999):04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}"
                f"{rng.choice(['', 'T', ' '])}{rng.randint(0, 25):02d}:{rng.randint(0, 61):02d}"
                f"{rng.choice(['', 'Z', '+23:59', '-24:00', '+05:60'])}")
        text = text if text[10] in "T " else text[:10]
        assert bool(pattern.fullmatch(text)) == accepted(parse_time, text), text
    assert re.fullmatch(revs.REV_PATTERN, "HEAD~3") and re.fullmatch(revs.REV_PATTERN, "abcd")
    assert not re.fullmatch(revs.REV_PATTERN, "yesterday")
    assert re.fullmatch(revs.RANGE_PATTERN, "HEAD~2..abcdef")


@pytest.mark.parametrize(("rel", "taken"), [
    *[(rel, True) for rel in ("a", "a/b", "日本語.md", "a b%c.md", "...", ".a", "😀", "a\\b",
                              "]", "^", "-", "x" * 63, "/".join("a" * 62), "/".join("a" * 63))],
    *[(rel, False) for rel in (".", "..", "a/..", "../a", "a/./b", "a//b", "/a", "a\u2028",
                               "\x7f", "a\ud800", "x\U000e0001", "\ue000", "\U000de8ab",
                               "/".join("a" * 64))]])
def test_the_path_pattern_and_parse_path_agree(rel: str, taken: bool) -> None:
    assert bool(re.fullmatch(rel_path_pattern(), rel)) is taken
    assert accepted(parse_path, f"{'s' * 64}/{rel}") is taken  # the longest store name too
    assert len(rel) <= REL_PATH_CHARS


def test_the_path_pattern_is_printable_by_construction() -> None:
    pattern = re.compile(rel_path_pattern())
    for code in [*range(0x3000), 0xfeff, 0xfffe, 0x10ffff, 0x1f600, 0xe0001]:
        char = chr(code)
        if char in "/.":
            continue
        assert bool(pattern.fullmatch(char)) == char.isprintable() == \
            accepted(parse_path, f"notes/{char}"), hex(code)
