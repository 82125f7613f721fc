"""The text forms of memory records, free of I/O: front matter, quoted blocks, times,
durations and ids.

Front matter is YAML-compatible ``key: value`` lines between ``---`` lines; a value is
written plainly when that is unambiguous, else as a JSON string, and ``null`` is
None. Text that comes from agents (goals, notes, summaries) is stored as quoted
blocks (``> `` before each line), so it can never forge a heading or an entry.

What memfs writes for a model (the brief, MCP tool results) shows memory the same
way, whatever it holds: a text as a quoted block (`quoted`), a name or id as a JSON
string (`literal`), each with every character that is not printable escaped, so no
line break of any kind (U+2028, U+0085, ...) and no hidden or reordering character
passes through.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from memfs.store.errors import InvalidInput

Clock = Callable[[], float]  # epoch seconds; time.time unless a test injects one

SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,63}$"
SLUG = re.compile(SLUG_PATTERN)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION = 30 * 86400
_PLAIN = re.compile(r"[A-Za-z0-9_./@+-][A-Za-z0-9 _./@+,():'-]*")
MAX_TEXT = 64 * 1024  # one note, goal, summary, title or body
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")  # str.splitlines's
# str.isspace's characters (what str.strip removes): a text of only these is empty
_SPACES = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2028\u2029\u202f\u205f"
                    "\u3000" + "".join(map(chr, range(0x2000, 0x200b))))


def _class(chars: frozenset[str]) -> str:
    """The characters as the inside of a regex class, each as a \\uXXXX escape (read
    alike by Python's re, JSON Schema's ECMA-262 patterns and pydantic's)."""
    return "".join(f"\\u{ord(c):04x}" for c in sorted(chars))


def _upto(limit: int) -> str:
    """A regex of the decimal numbers 1..``limit``, without leading zeros."""
    digits = str(limit)
    shorter = [rf"[1-9]\d{{0,{len(digits) - 2}}}"] if len(digits) > 1 else []
    same = []
    for at, digit in enumerate(digits):
        low = "1" if at == 0 else "0"
        if int(digit) > int(low):
            rest = len(digits) - at - 1
            tail = rf"\d{{{rest}}}" if rest else ""
            same.append(f"{digits[:at]}[{low}-{int(digit) - 1}]{tail}")
    same.append(digits)
    return "(?:" + "|".join(shorter + same) + ")"


# What agents' texts may be, as patterns for the protocol's models (their JSON schemas)
# and checked by `text` alike: no NUL; a required one holds a character other than
# white space; a one-line one no line break.
_NUL = frozenset("\0")
OPTIONAL_TEXT_PATTERN = rf"^[^{_class(_NUL)}]*$"
TEXT_PATTERN = (rf"^[^{_class(_NUL)}]*[^{_class(_NUL | _SPACES)}][^{_class(_NUL)}]*$")
_NOT_LINE = _class(_NUL | _LINE_BREAKS)
LINE_PATTERN = (rf"^[^{_NOT_LINE}]*[^{_class(_NUL | _LINE_BREAKS | _SPACES)}]"
                rf"[^{_NOT_LINE}]*$")
# a duration: 1s to 30d, as 45s, 30m, 2h, 1d
DURATION_PATTERN = "^(?:" + "|".join(
    f"{_upto(MAX_DURATION // seconds)}{unit}" for unit, seconds in _UNITS.items()) + ")$"
_DURATION = re.compile(DURATION_PATTERN)


def iso(at: float) -> str:
    """UTC ISO-8601 to the second: 2026-11-30T13:22:59Z."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_ms(at: float) -> str:
    """UTC ISO-8601 to the millisecond, for entries that must sort in the order they
    were made: 2026-11-30T13:22:59.123Z."""
    moment = datetime.fromtimestamp(at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_iso(text: str) -> float:
    """Epoch seconds of `iso` or `iso_ms` text."""
    shape = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in text else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.strptime(text, shape).replace(tzinfo=UTC).timestamp()


def day(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def duration(text: str) -> int:
    """Seconds of ``45s``, ``30m``, ``2h``, ``1d`` (DURATION_PATTERN: 1s to 30d, no
    leading zero); raises InvalidInput."""
    if not _DURATION.fullmatch(text):
        raise InvalidInput(f"bad duration {text!r}: use a number and s, m, h or d (45s, 30m, "
                           "2h), from 1s to 30d")
    return int(text[:-1]) * _UNITS[text[-1]]


def check_slug(kind: str, value: str) -> str:
    if not SLUG.fullmatch(value):
        raise InvalidInput(f"bad {kind} {value!r}: use 1-64 lowercase letters, digits and '-', "
                           "starting with a letter or digit")
    return value


def slugify(title: str, limit: int = 50) -> str:
    """A file-name slug from a title: lowercase words joined by '-'."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:limit].strip("-")
    return slug or "untitled"


def token(nbytes: int = 2) -> str:
    return secrets.token_hex(nbytes)


def text(kind: str, value: str, *, one_line: bool = False, required: bool = True) -> str:
    """Agent-given text, checked: bounded, no NUL, one line where asked."""
    if required and not value.strip():
        raise InvalidInput(f"{kind} must not be empty")
    if len(value) > MAX_TEXT:
        raise InvalidInput(f"{kind} is longer than {MAX_TEXT} characters")
    if "\0" in value:
        raise InvalidInput(f"{kind} contains a NUL character")
    if one_line and not _LINE_BREAKS.isdisjoint(value):
        raise InvalidInput(f"{kind} must be one line")
    return value


def escaped(value: str, keep: str = "") -> str:
    """``value`` with each character that is not printable (str.isprintable: control,
    format, line or paragraph separator, private-use, unassigned), other than those in
    ``keep``, written as its JSON escape (``\\u2028``)."""
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() or c in keep else json.dumps(c)[1:-1]
                   for c in value)


def literal(value: object) -> str:
    """A name or id from memory as a model reads it: a JSON string (``"notes/a.md"``),
    with ``"``, ``\\`` and every character that is not printable escaped, so it
    reads as one name and can never end the string or start a line."""
    return escaped(json.dumps(str(value), ensure_ascii=False))


def quoted(value: object, limit: int | None = None) -> str:
    """A text from memory as a model reads it: a quoted block (``> `` before every
    line), cut to ``limit`` characters; every character that is not printable but
    the newline and the tab is escaped, so no other line break splits a line out
    of the block. (Memory may hold anything: None is empty, any other value its str.)"""
    text = "" if value is None else str(value).strip()
    if limit is not None and len(text) > limit:
        text = text[:limit].rstrip() + " ..."
    return quote(escaped(text, keep="\n\t")) if text else "> (empty)"


def quote(value: str) -> str:
    """``value`` as a markdown quoted block (every line starts with "> ")."""
    return "\n".join(f"> {line}".rstrip() for line in value.strip("\n").split("\n"))


def unquote(lines: list[str]) -> str:
    return "\n".join(line[2:] if line.startswith("> ") else line.lstrip(">")
                     for line in lines).strip("\n")


def front_matter(fields: Mapping[str, object]) -> str:
    lines = ["---"]
    for key, value in fields.items():
        if value is None:
            shown = "null"
        elif isinstance(value, str) and _PLAIN.fullmatch(value) and value.strip() == value \
                and ": " not in value and not value.endswith(":") \
                and value not in ("null", "true", "false") and not value.isdigit():
            shown = value
        else:
            shown = json.dumps(value, ensure_ascii=False)
        lines.append(f"{key}: {shown}")
    lines.append("---")
    return "\n".join(lines) + "\n"


def split_front_matter(content: str) -> tuple[dict[str, object], str]:
    """(fields, the rest) of a record; fields {} when there is no front matter."""
    if not content.startswith("---\n"):
        return {}, content
    end = content.find("\n---\n", 3)
    if end < 0:
        return {}, content
    fields: dict[str, object] = {}
    for line in content[4:end].split("\n"):
        key, sep, raw = line.partition(": ")
        if not sep:
            continue
        raw = raw.strip()
        if raw == "null":
            fields[key] = None
        elif raw.startswith(('"', "[", "{")) or raw in ("true", "false") or raw.isdigit():
            try:
                fields[key] = json.loads(raw)
            except ValueError:
                fields[key] = raw
        else:
            fields[key] = raw
    return fields, content[end + 5:]


def now(clock: Clock | None = None) -> float:
    return (clock or time.time)()
