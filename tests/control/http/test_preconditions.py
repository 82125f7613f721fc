"""The pure logic of If-Match / If-None-Match (control/http/preconditions.py): the
grammar of RFC 9110 section 8.8.3 and 13.1, strong and weak comparison. The real
requests are in test_http_conformance.py."""

from __future__ import annotations

import re

import pytest

from memfs.control.http import preconditions as pc
from memfs.control.protocol.wire import ProtocolError

D = "a" * 64  # a digest
OTHER = "b" * 64


@pytest.mark.parametrize(("value", "tags"), [
    ("*", pc.ANY),
    (" *\t", pc.ANY),
    (f'"{D}"', (pc.EntityTag(D),)),
    (f'W/"{D}"', (pc.EntityTag(D, weak=True),)),
    ('"x", W/"y" ,"z"', (pc.EntityTag("x"), pc.EntityTag("y", True), pc.EntityTag("z"))),
    (', ,"x",,', (pc.EntityTag("x"),)),  # empty list elements are ignored
    ('"a,b"', (pc.EntityTag("a,b"),)),  # a comma inside the quotes is part of the tag
    ('""', (pc.EntityTag(""),)),
    ("", ()),
    ('"\x80\xff"', (pc.EntityTag("\x80\xff"),)),  # obs-text
])
def test_well_formed_values(value: str, tags: pc.Tags) -> None:
    assert pc.parse(value, "If-Match") == tags
    assert re.fullmatch(pc.PATTERN, value), "the OpenAPI pattern must say the same"


@pytest.mark.parametrize("value", [
    D, '"a" "b"', '"a', 'W/ "a"', 'w/"a"', '"a", *', "**", '"a b"', '"a"x', '"\x7f"',
    '"a"\n', "'a'"])
def test_malformed_values_are_invalid(value: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        pc.parse(value, "If-None-Match")
    assert caught.value.code == "invalid" and "If-None-Match" in caught.value.message
    assert not re.fullmatch(pc.PATTERN, value)


def tags(value: str) -> pc.Tags:
    return pc.parse(value, "If-Match")


@pytest.mark.parametrize(("value", "current", "holds"), [
    ("*", D, True), ("*", None, False),
    (f'"{D}"', D, True), (f'"{D}"', OTHER, False), (f'"{D}"', None, False),
    (f'W/"{D}"', D, False),  # strong comparison: a weak tag never matches
    (f'"0000", "{D}"', D, True), ('"0000"', D, False), ("", D, False),
])
def test_if_match_compares_strongly(value: str, current: str | None, holds: bool) -> None:
    assert pc.if_match_holds(tags(value), current) is holds


@pytest.mark.parametrize(("value", "current", "holds"), [
    ("*", None, True), ("*", D, False),
    (f'"{D}"', D, False), (f'W/"{D}"', D, False),  # weak comparison: W/ matches too
    (f'"{OTHER}", W/"{D}"', D, False), (f'"{OTHER}"', D, True), (f'"{D}"', None, True),
    ("", D, True),
])
def test_if_none_match_compares_weakly(value: str, current: str | None, holds: bool) -> None:
    assert pc.if_none_match_holds(tags(value), current) is holds


def test_a_precondition_holds_when_both_headers_hold() -> None:
    assert pc.of({}) is None
    both = pc.of({"if-match": "*", "if-none-match": f'"{D}"'})
    assert both is not None
    assert both(OTHER) is True
    assert both(D) is False  # If-None-Match fails
    assert both(None) is False  # If-Match fails
    only_none = pc.of({"if-none-match": "*"})
    assert only_none is not None and only_none(None) and not only_none(D)
