"""Glob patterns over ``STORE/PATH`` strings: ``*``, ``?``, ``[...]`` and ``**``. Pure.

Matching never backtracks: a pattern becomes a small nondeterministic automaton whose
set of live states is one integer (one bit per state), advanced once per character
of the name with a few integer operations. A match costs O(len(name)) such steps,
each O(len(pattern) / 64) machine words: no pattern can make it take longer (a
regular expression compiled from the same glob can take exponential time, e.g.
``*a*a*a*a*b`` against a long run of ``a``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from memfs.store.errors import InvalidInput
from memfs.store.fs.paths import PRINTABLE, unprintable

MAX_GLOB_CHARS = 1024
_MAX_CACHED_CHARS = 4096  # per-character transition masks kept per pattern

# Token kinds: one character, or a run of them.
_CHAR = 0  # one character in ``chars`` (or not in it, when ``negated``), never "/"
_ANY = 1  # ``?``: one character but "/"
_STAR = 2  # ``*``: any run of characters without "/"
_DSTAR = 3  # ``**``: any run of characters
_DSTAR_SLASH = 4  # ``**/``: nothing, or any run of characters ending in "/"
_INSIDE = 5  # the second state of ``**/``: inside a run not yet ended by "/"


@dataclass(frozen=True)
class _Token:
    kind: int
    chars: frozenset[str] = frozenset()
    ranges: tuple[tuple[str, str], ...] = ()
    negated: bool = False

    def accepts(self, ch: str) -> bool:
        """For _CHAR and _ANY: does this token match the character ``ch``? Only a
        literal "/" matches "/" (a bracket expression never holds one)."""
        if ch == "/":
            return self.kind == _CHAR and self.chars == _SLASH and not self.negated
        if self.kind == _ANY:
            return True
        inside = ch in self.chars or any(low <= ch <= high for low, high in self.ranges)
        return inside != self.negated


_SLASH = frozenset("/")


def _literal(ch: str) -> _Token:
    return _Token(_CHAR, frozenset(ch))


def _parse_class(pattern: str, at: int) -> tuple[_Token, int] | None:
    """The bracket expression starting at ``pattern[at] == "["`` and the index after
    it, or None when it is not closed (then "[" is an ordinary character).
    ``!`` or ``^`` first negates; a "]" right after "[" (or after the negation) is a
    member; ``a-z`` is a range; a backslash is an ordinary member."""
    i = at + 1
    negated = i < len(pattern) and pattern[i] in "!^"
    if negated:
        i += 1
    body_start = i
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    end = pattern.find("]", i)
    if end < 0:
        return None
    body = pattern[body_start:end]
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            low, high = body[k], body[k + 2]
            if low > high:
                raise InvalidInput(f"glob {pattern!r}: bad character range {low}-{high}")
            ranges.append((low, high))
            k += 3
        else:
            chars.add(body[k])
            k += 1
    chars.discard("/")  # a bracket expression stays inside one component
    return _Token(_CHAR, frozenset(chars), tuple(ranges), negated), end + 1


def _tokens(pattern: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append(_Token(_DSTAR_SLASH))
            i += 3
        elif pattern.startswith("**", i):
            out.append(_Token(_DSTAR))
            i += 2
        elif c == "*":
            out.append(_Token(_STAR))
            i += 1
        elif c == "?":
            out.append(_Token(_ANY))
            i += 1
        elif c == "[" and (parsed := _parse_class(pattern, i)) is not None:
            token, i = parsed
            out.append(token)
        else:
            out.append(_literal(c))
            i += 1
    # A pattern that names a directory lists what is below it: trailing "/" are dropped
    # (the final state also accepts "/" followed by anything).
    while out and out[-1] == _literal("/"):
        out.pop()
    return _collapse(out)


def _collapse(tokens: list[_Token]) -> list[_Token]:
    """Merge neighbouring runs that mean one run: ``**`` absorbs ``*``, ``**`` and
    ``**/`` on either side; ``**/**/`` is ``**/``; ``**/`` then ``*`` stays."""
    out: list[_Token] = []
    for token in tokens:
        previous = out[-1].kind if out else None
        kind = token.kind
        if previous == _DSTAR and kind in (_STAR, _DSTAR, _DSTAR_SLASH):
            continue
        if kind == _DSTAR and previous in (_STAR, _DSTAR_SLASH):
            out[-1] = token
            continue
        if (previous, kind) in ((_STAR, _STAR), (_DSTAR_SLASH, _DSTAR_SLASH)):
            continue
        out.append(token)
    return out


class Glob:
    """A compiled glob; ``match(name)`` is True when the whole name matches.

    States are numbered from 0 (nothing matched); each single-character token moves
    one state on, ``*`` and ``**`` loop on their state, ``**/`` uses two states (its
    entry, and "inside, after at least one character"). Per character ``c``, bitmasks
    say which states loop on ``c``, and which move on by one or by two states;
    ``skip1``/``skip2`` are the moves taken without a character.
    """

    def __init__(self, pattern: str) -> None:
        if len(pattern) > MAX_GLOB_CHARS:
            raise InvalidInput(f"glob pattern is longer than {MAX_GLOB_CHARS} characters")
        bad = unprintable(pattern)
        if bad is not None:  # it could only match names memfs refuses
            raise InvalidInput(f"glob pattern {pattern!r} contains {bad}; {PRINTABLE}")
        self.pattern = pattern
        # what each state does: a one-character token, or a run's kind
        self._states: list[_Token | int] = []
        skip1 = skip2 = 0
        for token in _tokens(pattern):
            state = len(self._states)
            if token.kind in (_STAR, _DSTAR):
                skip1 |= 1 << state
                self._states.append(token.kind)
            elif token.kind == _DSTAR_SLASH:
                skip2 |= 1 << state
                self._states += [_DSTAR_SLASH, _INSIDE]
            else:
                self._states.append(token)
        self._final = len(self._states)
        self._below = self._final + 1  # after "/" past the final state: anything
        self._accept = (1 << self._final) | (1 << self._below)
        self._skip1 = skip1
        self._skip2 = skip2
        self._masks: dict[str, tuple[int, int, int]] = {}
        self._start = self._closure(1)

    def _closure(self, live: int) -> int:
        while True:
            grown = live | ((live & self._skip1) << 1) | ((live & self._skip2) << 2)
            if grown == live:
                return live
            live = grown

    def _masks_for(self, ch: str) -> tuple[int, int, int]:
        """(loop, move by one, move by two) state masks for the character ``ch``."""
        masks = self._masks.get(ch)
        if masks is not None:
            return masks
        loop = one = two = 0
        slash = ch == "/"
        for state, what in enumerate(self._states):
            bit = 1 << state
            if isinstance(what, _Token):
                if what.accepts(ch):
                    one |= bit
            elif what == _STAR:
                if not slash:
                    loop |= bit
            elif what == _DSTAR:
                loop |= bit
            elif what == _DSTAR_SLASH:  # entry: any character starts a run, "/" may end it
                one |= bit
                if slash:
                    two |= bit
            else:  # _INSIDE "**/": stays on anything, and "/" may end the run
                loop |= bit
                if slash:
                    one |= bit
        if slash:
            one |= 1 << self._final
        loop |= 1 << self._below
        masks = (loop, one, two)
        if len(self._masks) < _MAX_CACHED_CHARS:
            self._masks[ch] = masks
        return masks

    def match(self, name: str) -> bool:
        """True if ``name`` as a whole matches the pattern. O(len(name)) steps."""
        live = self._start
        for ch in name:
            loop, one, two = self._masks_for(ch)
            live = self._closure((live & loop) | ((live & one) << 1) | ((live & two) << 2))
            if not live:
                return False
        return bool(live & self._accept)


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> Glob:
    """Compile a glob: ``*``, ``?`` and ``[...]``/``[!...]`` stay inside one component,
    ``**`` spans any number of components (``a/**/b`` matches ``a/b`` and
    ``a/x/y/b``), a pattern naming a directory (``notes`` or ``notes/``) matches
    everything below it. Matching takes time linear in the name, whatever the pattern.
    Raises InvalidInput for a pattern over MAX_GLOB_CHARS characters, with a character
    no name may hold (see memfs/store/fs/paths.py) or with a reversed range (``[z-a]``)."""
    return Glob(pattern)


def literal_prefix(pattern: str) -> tuple[str, ...]:
    """The components of a pattern before its first one with a wildcard (all of them
    if it has none): the store it is limited to, and the folder (or file) below it."""
    literal: list[str] = []
    for name in pattern.split("/"):
        if any(ch in name for ch in "*?["):
            break
        if name:
            literal.append(name)
    return tuple(literal)
