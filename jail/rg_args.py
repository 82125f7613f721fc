"""Allow-list parser for the ripgrep arguments an agent types.

``parse`` turns ``memfs grep`` arguments (flags, a pattern, optional ``STORE[/PATH]``
paths) into a :class:`RgCommand` whose ``argv`` is safe to run inside the jail, or
raises :class:`BadArguments` naming the refused flag or path. Flags not listed here
are refused: an unknown flag could be a new way to run a program or read a file.
The parser is a convenience and a clear error message; isolation itself is the
kernel's job (Landlock, seccomp).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from memfs.jail.errors import BadArguments

MOUNT_PREFIX = "/memory/"
MAX_ARGS_BYTES = 64 * 1024
_SIZE = re.compile(r"[0-9]+[KMG]?")
_MAX_REGEX_SIZE = 1 << 30
_GLOB_SPECIAL = re.compile(r"[\\*?\[\]{}]")
_UNDECODED = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as os.listdir gives it
_HIGH_BYTE = "[!\x01-\x7f]"  # rg's glob for one byte that is not ASCII

Check = Callable[[str, str], str]  # (flag, value) -> value to pass on, or raise


def _exactly(path: str) -> str:
    """A glob matching ``path`` alone. rg takes globs as UTF-8 only, so a byte of the
    name that is not UTF-8 becomes "one byte that is not ASCII" (a valid name can match
    there only with a multi-byte character whose bytes stand in for several such
    bytes: skipped too, which is rare and never shows anything it should not)."""
    return _UNDECODED.sub(_HIGH_BYTE, _GLOB_SPECIAL.sub(r"\\\g<0>", path))


def _text(flag: str, value: str) -> str:
    if "\0" in value:
        raise BadArguments(f"{flag}: value contains a NUL byte")
    return value


def _count(flag: str, value: str) -> str:
    if not value.isascii() or not value.isdigit():
        raise BadArguments(f"{flag} takes a non-negative integer, got {value!r}")
    return value


def _size(flag: str, value: str) -> str:
    if not _SIZE.fullmatch(value):
        raise BadArguments(f"{flag} takes a size such as 10M, got {value!r}")
    return value


def _regex_size(flag: str, value: str) -> str:
    _size(flag, value)
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(value[-1], 1)
    if int(value.rstrip("KMG")) * scale > _MAX_REGEX_SIZE:
        raise BadArguments(f"{flag} is capped at 1G, got {value!r}")
    return value


def _glob(flag: str, value: str) -> str:
    _text(flag, value)
    if ".." in value:
        raise BadArguments(f"{flag} {value!r}: globs must not contain '..'")
    return value


def _word(pattern: str) -> Check:
    regex = re.compile(pattern)

    def check(flag: str, value: str) -> str:
        if not regex.fullmatch(value):
            raise BadArguments(f"{flag}: bad value {value!r}")
        return value

    return check


def _one_of(*allowed: str) -> Check:
    def check(flag: str, value: str) -> str:
        if value not in allowed:
            raise BadArguments(f"{flag} accepts only {', '.join(allowed)}; got {value!r}")
        return value

    return check


_SORT = _one_of("path", "modified", "accessed", "created", "none")

# Flags that take a value, with the check of that value. (-j/--threads is special.)
VALUE_FLAGS: dict[str, Check] = {
    "--regexp": _text,
    "--glob": _glob,
    "--iglob": _glob,
    "--type": _word(r"[A-Za-z0-9_+-]+"),
    "--type-not": _word(r"[A-Za-z0-9_+-]+"),
    "--type-clear": _word(r"[A-Za-z0-9_+-]+"),
    "--type-add": _glob,  # defines a file type by globs; reads nothing
    "--max-count": _count,
    "--after-context": _count,
    "--before-context": _count,
    "--context": _count,
    "--max-columns": _count,
    "--max-depth": _count,
    "--maxdepth": _count,
    "--max-filesize": _size,
    "--dfa-size-limit": _regex_size,
    "--regex-size-limit": _regex_size,
    "--encoding": _word(r"[A-Za-z0-9_.:-]+"),
    "--engine": _one_of("default", "pcre2", "auto"),
    "--sort": _SORT,
    "--sortr": _SORT,
    "--context-separator": _text,
    "--field-context-separator": _text,
    "--field-match-separator": _text,
    "--replace": _text,  # only changes what is printed
    "--color": _one_of("never"),
    "--threads": _count,
}

# Switches (no value) that only change matching or output.
# fmt: off
SWITCHES = frozenset((
    "--case-sensitive", "--ignore-case", "--smart-case", "--word-regexp", "--line-regexp",
    "--invert-match", "--fixed-strings", "--multiline", "--multiline-dotall", "--crlf",
    "--null-data", "--text", "--binary", "--mmap", "--no-mmap", "--pcre2", "--no-pcre2",
    "--auto-hybrid-regex", "--no-unicode", "--no-pcre2-unicode", "--stop-on-nonmatch",
    "--one-file-system", "--hidden", "--no-hidden", "--no-ignore", "--ignore",
    "--no-ignore-dot", "--no-ignore-exclude", "--no-ignore-files", "--no-ignore-global",
    "--no-ignore-parent", "--no-ignore-vcs", "--no-require-git", "--require-git",
    "--glob-case-insensitive", "--no-glob-case-insensitive", "--ignore-file-case-insensitive",
    "--unrestricted", "--no-follow", "--no-search-zip", "--no-pre", "--files-with-matches",
    "--files-without-match", "--count", "--count-matches", "--files", "--line-number",
    "--no-line-number", "--only-matching", "--with-filename", "--no-filename", "--heading",
    "--no-heading", "--quiet", "--no-json", "--vimgrep", "--stats", "--no-stats",
    "--trim", "--no-trim", "--column", "--no-column", "--byte-offset", "--no-byte-offset",
    "--null", "--passthru", "--passthrough", "--include-zero", "--max-columns-preview",
    "--sort-files", "--no-context-separator", "--line-buffered", "--block-buffered",
    "--no-messages", "--no-ignore-messages", "--no-config", "--type-list", "--help",
    "--version", "--pcre2-version", "--no-text", "--no-binary", "--no-crlf", "--no-null-data",
    "--no-multiline", "--no-multiline-dotall", "--no-fixed-strings", "--no-invert-match",
    "--no-word-regexp", "--no-line-regexp", "--no-include-zero", "--no-max-columns-preview",
    "--no-sort-files", "--no-one-file-system", "--no-auto-hybrid-regex", "--no-unrestricted",
))
# fmt: on

# Refused on purpose, with the reason shown to the caller.
REFUSED = {
    "--pre": "runs a program on every file",
    "--pre-glob": "goes with --pre, which runs a program",
    "--search-zip": "runs decompression programs",
    "--hostname-bin": "runs a program",
    "--follow": "follows symbolic links, which could lead outside the stores",
    "--ignore-file": "reads a file outside the stores",
    "--file": "reads patterns from a file outside the stores; use -e PATTERN",
    "--pretty": "forces colored output",
    "--colors": "styles colored output, which is always off here",
    "--hyperlink-format": "prints links to local paths",
    "--path-separator": "would change the STORE/PATH form of output paths",
    "--debug": "prints internal paths",
    "--trace": "prints internal paths",
    "--generate": "does not search",
    "--json": "is memfs's to ask for: ask for structured matches instead (memfs grep "
              "--json, the search op's format json, /v1/search?format=json)",
}

# With format json (rg --json, asked for by memfs): flags rg cannot combine with it,
# and --passthru, whose every-line output is no list of matches.
NOT_WITH_JSON = {
    "--files": "lists files, not matches",
    "--files-with-matches": "lists files, not matches",
    "--files-without-match": "lists files, not matches",
    "--count": "prints counts, not matches",
    "--count-matches": "prints counts, not matches",
    "--type-list": "does not search",
    "--help": "does not search",
    "--version": "does not search",
    "--pcre2-version": "does not search",
    "--passthru": "prints every line, not matches: use -C NUM for context lines",
    "--passthrough": "prints every line, not matches: use -C NUM for context lines",
}

# The flags that choose what is searched, what matches and how much context, and never
# how a line is printed: with only these, rg's text output is exactly its --json
# output's matches printed one per line (jail/rg_json.py's `render`).
# fmt: off
SELECTING = frozenset((
    "--regexp", "--glob", "--iglob", "--type", "--type-not", "--type-clear", "--type-add",
    "--max-count", "--after-context", "--before-context", "--context", "--max-depth",
    "--maxdepth", "--max-filesize", "--dfa-size-limit", "--regex-size-limit", "--encoding",
    "--engine", "--sort", "--sortr", "--color", "--threads",
    "--case-sensitive", "--ignore-case", "--smart-case", "--word-regexp", "--line-regexp",
    "--invert-match", "--fixed-strings", "--multiline", "--multiline-dotall", "--crlf",
    "--text", "--mmap", "--no-mmap", "--pcre2", "--no-pcre2", "--auto-hybrid-regex",
    "--no-unicode", "--no-pcre2-unicode", "--stop-on-nonmatch", "--one-file-system",
    "--hidden", "--no-hidden", "--no-ignore", "--ignore", "--no-ignore-dot",
    "--no-ignore-exclude", "--no-ignore-files", "--no-ignore-global", "--no-ignore-parent",
    "--no-ignore-vcs", "--no-require-git", "--require-git", "--glob-case-insensitive",
    "--no-glob-case-insensitive", "--ignore-file-case-insensitive", "--unrestricted",
    "--no-follow", "--no-search-zip", "--no-pre", "--line-number", "--with-filename",
    "--no-heading", "--no-stats", "--no-trim", "--no-column", "--no-byte-offset",
    "--sort-files", "--line-buffered", "--block-buffered", "--no-messages",
    "--no-ignore-messages", "--no-config", "--no-text", "--no-crlf", "--no-null-data",
    "--no-multiline", "--no-multiline-dotall", "--no-fixed-strings", "--no-invert-match",
    "--no-word-regexp", "--no-line-regexp", "--no-include-zero", "--no-max-columns-preview",
    "--no-sort-files", "--no-one-file-system", "--no-auto-hybrid-regex", "--no-unrestricted",
    "--no-json",
))
# fmt: on

SHORT = {
    "e": "--regexp", "f": "--file", "g": "--glob", "t": "--type", "T": "--type-not",
    "m": "--max-count", "A": "--after-context", "B": "--before-context", "C": "--context",
    "M": "--max-columns", "d": "--max-depth", "E": "--encoding", "r": "--replace",
    "j": "--threads", "z": "--search-zip", "L": "--follow", "p": "--pretty",
    "s": "--case-sensitive", "i": "--ignore-case", "S": "--smart-case",
    "w": "--word-regexp", "x": "--line-regexp", "v": "--invert-match",
    "F": "--fixed-strings", "U": "--multiline", "P": "--pcre2", "a": "--text",
    ".": "--hidden", "u": "--unrestricted", "b": "--byte-offset", "n": "--line-number",
    "N": "--no-line-number", "0": "--null", "o": "--only-matching", "q": "--quiet",
    "H": "--with-filename", "I": "--no-filename", "c": "--count",
    "l": "--files-with-matches", "h": "--help", "V": "--version",
}  # fmt: skip

# With one of these, the first positional argument is a path, not a pattern.
_NO_PATTERN = frozenset({"--files", "--type-list", "--help", "--version", "--pcre2-version"})


@dataclass(frozen=True)
class RgCommand:
    """A validated ripgrep invocation. ``stores`` are the store names it reads (sorted);
    ``named`` those named by a path argument (``STORE[/PATH]``; not by ``/memory`` or
    no path, which mean every given store); ``argv`` (without the program name) runs it
    from a folder holding those stores."""

    options: tuple[str, ...]
    patterns: tuple[str, ...]
    paths: tuple[str, ...]
    stores: tuple[str, ...]
    threads: int
    named: tuple[str, ...] = ()
    # STORE/PATH of entries never to search (planted specials, hard links, names memfs
    # refuses): each becomes an exclusion glob placed after the user's globs, so none
    # can undo it (the later of two matching globs wins)
    excluded: tuple[str, ...] = ()
    json: bool = False  # rg prints JSON messages (rg --json), always with line numbers

    @property
    def argv(self) -> list[str]:
        # Our fixed flags come first so that a validated user flag may override them.
        # --no-ignore-parent: the stores' real parents are outside the jail.
        args = ["--no-config", "--color", "never", "--no-ignore-parent", "--no-ignore-global"]
        args += ["--threads", str(self.threads), *self.options]
        if self.json:  # after the user's flags: -N cannot take the line numbers away
            args += ["--json", "--line-number"]
        for path in self.excluded:
            args += ["--glob", "!/" + _exactly(path)]
        for pattern in self.patterns:
            args += ["--regexp", pattern]
        return [*args, "--", *self.paths]


def parse(
    args: Sequence[str],
    stores: Collection[str],
    max_threads: int = 4,
    *,
    default_threads: int | None = None,
    check: Callable[[str], None] | None = None,
    mount: str | None = None,
    json: bool = False,
) -> RgCommand:
    """Validate ``args`` against the allow-list and the readable ``stores``.

    ``check`` is called with each path as ``STORE[/PATH]`` once its syntax is checked,
    before its store is looked up among the readable ones (without ``check``, a store
    that is not readable is BadArguments); whatever it raises refuses the path (the
    daemon's raises not_found for a store the agent cannot see or a path that does
    not exist, before rg runs).

    ``-j``/``--threads`` may ask for 1 to ``max_threads`` threads; without it rg gets
    ``default_threads`` (``max_threads`` if None).

    ``json``: the command prints rg's JSON messages (``--json``, which the caller may
    not give itself); a flag in NOT_WITH_JSON is refused.

    Accepts rg's syntax: options (``-iw``, ``-C2``, ``-A 3``, ``--glob=X``, ``--glob X``)
    anywhere before ``--``, then a pattern unless ``-e``/``--files`` etc. is given, then
    paths ``STORE``, ``STORE/PATH`` or ``/memory/STORE/PATH`` (or ``MOUNT/STORE/PATH``
    when ``mount`` names the configured mount point; ``/memory`` or ``MOUNT`` alone
    means every store). No path means every store.
    Raises BadArguments with a message naming the flag or path at fault.
    """
    scanned = scan(args)
    threads = max_threads if default_threads is None else min(default_threads, max_threads)
    if scanned.threads is not None:
        threads = scanned.threads
        if not 1 <= threads <= max_threads:
            raise BadArguments(f"-j/--threads must be between 1 and {max_threads}")
    if json:
        for flag in flags_of(scanned.options):
            if flag in NOT_WITH_JSON:
                raise BadArguments(f"ripgrep flag {_as_typed(flag)} does not go with format "
                                   f"json: it {NOT_WITH_JSON[flag]}")
    paths, used, named = _paths(list(scanned.positionals), stores, check, mount)
    return RgCommand(scanned.options, scanned.patterns, paths, used, threads, named,
                     json=json)


@dataclass(frozen=True)
class Scanned:
    """An rg command line read by `scan`: the options (long names, each followed by
    its value if it takes one), the patterns (the first positional one included when
    no ``-e`` or ``--files`` etc. is given), the path arguments as typed, and the
    threads asked for with ``-j`` (None: not asked)."""

    options: tuple[str, ...]
    patterns: tuple[str, ...]
    positionals: tuple[str, ...]
    threads: int | None


def scan(args: Sequence[str]) -> Scanned:
    """Read ``args`` against the allow-list of flags (each value checked), without
    looking at the paths. Raises BadArguments naming the flag at fault."""
    if sum(len(a.encode("utf-8", "surrogateescape")) + 1 for a in args) > MAX_ARGS_BYTES:
        raise BadArguments(f"rg arguments exceed {MAX_ARGS_BYTES} bytes")
    options: list[str] = []
    patterns: list[str] = []
    positionals: list[str] = []
    threads: int | None = None
    no_pattern = False
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        i += 1
        if "\0" in arg:
            raise BadArguments("rg arguments must not contain NUL bytes")
        if arg == "--":
            positionals += items[i:]
            break
        if not arg.startswith("-") or arg == "-":
            positionals.append(arg)
            continue
        for flag, value, used_next in _split(arg, items[i] if i < len(items) else None):
            i += used_next
            if value is None:
                if flag in _NO_PATTERN:
                    no_pattern = True
                options.append(flag)
            elif flag == "--regexp":
                patterns.append(value)
            elif flag == "--threads":
                threads = int(value)
            else:
                options += [flag, value]
    if not patterns and not no_pattern:
        if not positionals:
            raise BadArguments("no search pattern given")
        patterns.append(positionals.pop(0))
    return Scanned(tuple(options), tuple(patterns), tuple(positionals), threads)


def flags_of(options: Sequence[str]) -> list[str]:
    """The flags of ``options`` (as `Scanned` holds them), without their values."""
    flags: list[str] = []
    values = iter(options)
    for flag in values:
        flags.append(flag)
        if flag in VALUE_FLAGS:
            next(values, None)
    return flags


def context_of(options: Sequence[str]) -> tuple[int, int]:
    """The lines of context (before, after) that ``options`` ask for, as rg counts
    them: -A and -B win over -C whatever their order, the last of each counts."""
    given: dict[str, int] = {}
    values = iter(options)
    for flag in values:
        if flag in VALUE_FLAGS:
            value = next(values, "0")
            if flag in ("--before-context", "--after-context", "--context"):
                given[flag] = int(value)
    both = given.get("--context", 0)
    return given.get("--before-context", both), given.get("--after-context", both)


def prints_matches(options: Sequence[str]) -> bool:
    """Whether rg's text output with ``options`` is its matches printed one per line,
    ``STORE/PATH:LINE:text`` (context ``STORE/PATH-LINE-text``, groups apart by
    ``--``), given ``--line-number --with-filename`` before them: every flag is one of
    SELECTING (none prints files, counts, columns, only the matching parts...)."""
    return all(flag in SELECTING for flag in flags_of(options))


def _as_typed(flag: str) -> str:
    """``flag`` with its one-letter form, if it has one: ``-l/--files-with-matches``."""
    short = [f"-{char}" for char, name in SHORT.items() if name == flag]
    return "/".join([*short, flag])


def _split(arg: str, following: str | None) -> list[tuple[str, str | None, int]]:
    """Expand one argument into (long flag, value or None, extra args consumed)."""
    if arg.startswith("--"):
        name, eq, inline = arg.partition("=")
        _refuse(name, arg)
        if name in VALUE_FLAGS:
            if eq:
                return [(name, VALUE_FLAGS[name](name, inline), 0)]
            if following is None:
                raise BadArguments(f"{name} needs a value")
            return [(name, VALUE_FLAGS[name](name, following), 1)]
        if name in SWITCHES and not eq:
            return [(name, None, 0)]
        raise BadArguments(f"unknown or unsupported ripgrep flag {arg!r}")
    # A cluster of short flags: "-iw", "-C2", "-e" PATTERN, "-uuu".
    result: list[tuple[str, str | None, int]] = []
    cluster = arg[1:]
    for k, char in enumerate(cluster):
        if char not in SHORT:
            raise BadArguments(f"unknown or unsupported ripgrep flag '-{char}' (in {arg!r})")
        name = SHORT[char]
        _refuse(name, f"-{char}")
        if name not in VALUE_FLAGS:
            result.append((name, None, 0))
            continue
        rest = cluster[k + 1 :]
        if rest:
            result.append((name, VALUE_FLAGS[name](name, rest), 0))
        elif following is None:
            raise BadArguments(f"-{char} ({name}) needs a value")
        else:
            result.append((name, VALUE_FLAGS[name](name, following), 1))
        break
    return result


def _refuse(name: str, as_typed: str) -> None:
    reason = REFUSED.get(name)
    if reason is not None:
        raise BadArguments(f"ripgrep flag {as_typed} is not allowed: it {reason}")


def _paths(
    raw: list[str],
    stores: Collection[str],
    check: Callable[[str], None] | None = None,
    mount: str | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Map path arguments to ``STORE[/PATH]`` strings; none means every store. Returns
    (paths, stores read, stores named by a path)."""
    prefixes = [MOUNT_PREFIX]
    if mount and mount.rstrip("/") and mount.rstrip("/") + "/" != MOUNT_PREFIX:
        prefixes.append(mount.rstrip("/") + "/")
    if not raw:
        every = tuple(sorted(stores))
        return every, every, ()
    paths: list[str] = []
    used: set[str] = set()
    named: set[str] = set()
    for path in raw:
        text = path
        if any(text in (prefix, prefix[:-1]) for prefix in prefixes):
            every = tuple(sorted(stores))
            paths += every
            used.update(every)
            continue
        for prefix in prefixes:
            if text.startswith(prefix):
                text = text[len(prefix) :]
                break
        else:
            if text.startswith("/"):
                where = " or ".join(prefixes)
                raise BadArguments(f"path {path!r}: absolute paths must start with {where}")
        parts = [p for p in text.split("/") if p not in ("", ".")]
        if not parts:
            raise BadArguments(f"path {path!r} names no store")
        if not text.isprintable():  # as memfs/store/fs/paths.py: no such name is searched
            raise BadArguments(f"path {path!r} holds a character no name may hold (control, "
                               "format, line or paragraph separator, private-use, "
                               "unassigned)")
        if ".." in parts:
            raise BadArguments(f"path {path!r}: '..' is not allowed")
        if parts == ["-"]:
            raise BadArguments("path '-' (standard input) is not allowed: name a STORE[/PATH]")
        if check is not None:
            check("/".join(parts))
        if parts[0] not in stores:
            raise BadArguments(f"path {path!r}: no readable store named {parts[0]!r}")
        used.add(parts[0])
        named.add(parts[0])
        paths.append("/".join(parts))
    return tuple(paths), tuple(sorted(used)), tuple(sorted(named))
