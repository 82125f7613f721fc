"""Conditional requests (RFC 9110 section 13): ``If-Match`` and ``If-None-Match``,
parsed and evaluated against a file's current version. Pure: no I/O.

A file's entity tag is its strong ``ETag``: the blake3 digest in quotes. A header
holds ``*`` or a comma-separated list of entity tags (section 8.8.3: ``"opaque"`` or
``W/"opaque"``; empty list elements are ignored, section 5.6.1). ``If-Match`` compares
strongly (a weak tag never matches, section 8.8.3.2): ``*`` holds when the file exists,
a list when it names the current digest. ``If-None-Match`` compares weakly: ``*``
holds when there is no file, a list when it names no version the file is at. A
well-formed tag that names no version (``"0000"``) simply does not match; only a header
that is not of this grammar is malformed (400). The same regular expressions parse the
headers and describe them in the OpenAPI document.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from memfs.control.protocol.wire import ProtocolError

_OWS = r"[ \t]*"
_OPAQUE = r'"[\x21\x23-\x7e\x80-\xff]*"'  # etagc: no DQUOTE, no space, no control
_TAG = rf"(?:W/)?{_OPAQUE}"
# "*" or #entity-tag (empty elements allowed), as a JSON Schema pattern for the header
PATTERN = (rf"^{_OWS}(?:\*|(?:,{_OWS})*(?:{_TAG}(?:{_OWS},(?:{_OWS}{_TAG})?)*)?){_OWS}$")
_WHOLE = re.compile(PATTERN)
_ONE_TAG = re.compile(rf"(W/)?({_OPAQUE})")


@dataclass(frozen=True)
class EntityTag:
    opaque: str  # between the quotes
    weak: bool = False


ANY: Literal["*"] = "*"  # the header said "*"
Tags = tuple[EntityTag, ...] | Literal["*"]


def parse(value: str, header: str) -> Tags:
    """The tags of an If-Match / If-None-Match value (ANY for ``*``); raises
    ProtocolError (``invalid``) when the value is not of the grammar."""
    if not _WHOLE.fullmatch(value):
        raise ProtocolError("invalid", f"{header} takes * or entity tags such as "
                            f'"DIGEST" (as ETag gives them), comma-separated; got '
                            f"{value[:80]!r}")
    if value.strip(" \t") == "*":
        return ANY
    return tuple(EntityTag(opaque[1:-1], bool(weak)) for weak, opaque in _ONE_TAG.findall(value))


def if_match_holds(tags: Tags, current: str | None) -> bool:
    """If-Match (strong comparison) for a file at digest ``current`` (None: no file)."""
    if current is None:
        return False
    if isinstance(tags, str):  # "*": any version
        return True
    return any(not tag.weak and tag.opaque == current for tag in tags)


def if_none_match_holds(tags: Tags, current: str | None) -> bool:
    """If-None-Match (weak comparison) for a file at digest ``current`` (None: no file);
    false means 304 for a GET or HEAD, 412 for a change."""
    if current is None:
        return True
    if isinstance(tags, str):  # "*": no version at all
        return False
    return all(tag.opaque != current for tag in tags)


@dataclass(frozen=True)
class Precondition:
    """The request's If-Match and If-None-Match (each None when absent); called with
    the current digest (None: no file), it says whether both hold (RFC 9110 section
    13.2.2: a change is made only if every precondition holds)."""

    if_match: Tags | None = None
    if_none_match: Tags | None = None

    def __call__(self, current: str | None) -> bool:
        return (self.if_match is None or if_match_holds(self.if_match, current)) and \
            (self.if_none_match is None or if_none_match_holds(self.if_none_match, current))


def of(headers: Mapping[str, str]) -> Precondition | None:
    """The precondition of a request's headers (None: it has neither header); raises
    ProtocolError (``invalid``) for a malformed one."""
    if_match = headers.get("if-match")
    if_none = headers.get("if-none-match")
    if if_match is None and if_none is None:
        return None
    return Precondition(None if if_match is None else parse(if_match, "If-Match"),
                        None if if_none is None else parse(if_none, "If-None-Match"))
