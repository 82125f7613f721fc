"""Cheap pre-check of GNU sed scripts, for a clear refusal message.

``check`` refuses scripts with NUL bytes or that are too large, and scans the script
for the commands that run programs or touch files (``e``, ``r``, ``R``, ``w``, ``W``,
the ``e`` and ``w`` flags of ``s``) to name them in the error. The scanner follows
GNU sed's grammar closely but stops quietly on anything it does not understand: the
guarantee is ``sed --sandbox`` inside the jail, not this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from memfs.jail.errors import BadArguments

MAX_SCRIPT_BYTES = 100 * 1024

_FORBIDDEN = {
    "e": "`e` (runs a shell command)",
    "r": "`r` (reads a file)",
    "R": "`R` (reads a file)",
    "w": "`w` (writes a file)",
    "W": "`W` (writes a file)",
}
_SIMPLE = set("=dDgGhHnNpPxzF")
_END = set(";\n}#")


def check(scripts: Sequence[str]) -> None:
    """Raise BadArguments if the scripts are empty, too large, contain NUL, or use a
    command that runs a program or reads or writes a file."""
    if not scripts:
        raise BadArguments("no sed script given")
    size = sum(len(s.encode("utf-8", "surrogateescape")) for s in scripts)
    if size > MAX_SCRIPT_BYTES:
        raise BadArguments(f"sed scripts exceed {MAX_SCRIPT_BYTES} bytes")
    if any("\0" in s for s in scripts):
        raise BadArguments("sed script contains a NUL byte")
    # sed joins -e fragments with newlines; scan them the same way.
    found = _Scanner("\n".join(scripts)).forbidden()
    if found is not None:
        raise BadArguments(f"sed script uses {found}: not allowed")


class _Unknown(Exception):
    """The scanner met syntax it does not model; sed itself will judge the script."""


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        ch = self.peek()
        if not ch:
            raise _Unknown
        self.pos += 1
        return ch

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.pos += 1

    def forbidden(self) -> str | None:
        """Return the description of the first forbidden command, or None."""
        try:
            while True:
                self.skip(" \t\n;")
                if not self.peek():
                    return None
                found = self.command()
                if found is not None:
                    return found
        except _Unknown:
            return None

    def command(self) -> str | None:
        if self.address():
            self.skip(" \t")
            if self.peek() == ",":
                self.pos += 1
                self.skip(" \t")
                if not self.address(second=True):
                    raise _Unknown
        self.skip(" \t")
        while self.peek() == "!":
            self.pos += 1
            self.skip(" \t")
        cmd = self.take()
        if cmd in _FORBIDDEN:
            return _FORBIDDEN[cmd]
        if cmd == "#":
            self.to_end_of_line()
            return None
        if cmd in "{}":
            return None
        if cmd in ":btTv":
            self.skip(" \t")
            while self.peek() not in ("", ";", "\n"):
                self.pos += 1
            return None
        if cmd in "aic":
            self.to_end_of_line()
            return None
        if cmd == "s":
            return self.substitute()
        if cmd == "y":
            delim = self.delimiter()
            self.delimited(delim, regex=False)
            self.delimited(delim, regex=False)
        elif cmd in "lLqQ":
            self.skip(" \t")
            self.skip("0123456789")
        elif cmd not in _SIMPLE:
            raise _Unknown
        self.end_of_command()
        return None

    def address(self, second: bool = False) -> bool:
        ch = self.peek()
        if ch.isdigit() or (second and ch in "+~"):
            self.pos += 1
            self.skip("0123456789")
            if self.peek() == "~":
                self.pos += 1
                self.skip("0123456789")
            return True
        if ch == "$":
            self.pos += 1
            return True
        if ch in ("/", "\\"):
            self.pos += 1
            delim = "/" if ch == "/" else self.take()
            self.delimited(delim, regex=True)
            self.skip("IM")
            return True
        return False

    def substitute(self) -> str | None:
        delim = self.delimiter()
        self.delimited(delim, regex=True)
        self.delimited(delim, regex=False)
        while True:
            ch = self.peek()
            if ch == "e":
                return "the `e` flag of `s` (runs a shell command)"
            if ch == "w":
                return "the `w` flag of `s` (writes a file)"
            if ch and (ch in "gpiImM" or ch.isdigit()):
                self.pos += 1
                continue
            self.end_of_command()
            return None

    def delimiter(self) -> str:
        delim = self.take()
        if delim in "\n\\":
            raise _Unknown
        return delim

    def delimited(self, delim: str, regex: bool) -> None:
        """Skip text up to the unescaped ``delim`` (bracket expressions too, in regexes)."""
        while True:
            ch = self.take()
            if ch == delim:
                return
            if ch == "\\":
                self.take()
            elif ch == "[" and regex:
                self.bracket()
            elif ch == "\n" and regex:
                raise _Unknown

    def bracket(self) -> None:
        if self.peek() == "^":
            self.pos += 1
        if self.peek() == "]":
            self.pos += 1
        while True:
            ch = self.take()
            if ch == "]":
                return
            if ch == "[" and self.peek() in (":", ".", "="):
                close = self.peek() + "]"
                end = self.text.find(close, self.pos + 1)
                if end < 0:
                    raise _Unknown
                self.pos = end + 2
            elif ch == "\n":
                raise _Unknown

    def to_end_of_line(self) -> None:
        """Skip one-line text (a/i/c, comments); a backslash continues the line."""
        while self.peek() and self.peek() != "\n":
            if self.take() == "\\" and self.peek():
                self.pos += 1

    def end_of_command(self) -> None:
        self.skip(" \t")
        if self.peek() and self.peek() not in _END:
            raise _Unknown
