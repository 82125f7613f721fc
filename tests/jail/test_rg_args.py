"""The rg argument allow-list: a table of accepted and refused argument lists, plus real
jailed runs of a few rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memfs.jail import BadArguments, Jail
from memfs.jail.rg_args import (
    NOT_WITH_JSON,
    SELECTING,
    SWITCHES,
    VALUE_FLAGS,
    context_of,
    parse,
    prints_matches,
    scan,
)
from memfs.jail.rg_json import render

STORES = ("A", "B")

# args -> (patterns, paths, options that must appear in argv)
ALLOWED: list[tuple[list[str], tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = [
    (["foo"], ("foo",), ("A", "B"), ()),
    (["-i", "foo", "A"], ("foo",), ("A",), ("--ignore-case",)),
    (["-iw", "foo"], ("foo",), ("A", "B"), ("--ignore-case", "--word-regexp")),
    (["-C2", "foo"], ("foo",), ("A", "B"), ("--context", "2")),
    (["-C", "2", "foo"], ("foo",), ("A", "B"), ("--context", "2")),
    (["--context=3", "foo"], ("foo",), ("A", "B"), ("--context", "3")),
    (["-A", "1", "-B", "1", "-m", "5", "foo"], ("foo",), ("A", "B"), ("--max-count",)),
    (["-e", "foo", "-e", "-bar", "A/x"], ("foo", "-bar"), ("A/x",), ()),
    (["-efoo"], ("foo",), ("A", "B"), ()),
    (["--regexp=a=b"], ("a=b",), ("A", "B"), ()),
    (["-g", "*.md", "foo"], ("foo",), ("A", "B"), ("--glob", "*.md")),
    (["--iglob=*.MD", "foo"], ("foo",), ("A", "B"), ("--iglob",)),
    (["-t", "md", "-T", "py", "foo"], ("foo",), ("A", "B"), ("--type", "--type-not")),
    (["-uuu", "foo"], ("foo",), ("A", "B"), ("--unrestricted",)),
    (["-sSvxFUlcnNoHq", "foo"], ("foo",), ("A", "B"), ("--quiet",)),
    (["--vimgrep", "--stats", "--no-json", "foo"], ("foo",), ("A", "B"), ("--vimgrep",)),
    (["--files"], (), ("A", "B"), ("--files",)),
    (["--files", "A"], (), ("A",), ("--files",)),
    (["--type-list"], (), ("A", "B"), ("--type-list",)),
    (["--color=never", "foo"], ("foo",), ("A", "B"), ()),
    (["-r", "X", "foo"], ("foo",), ("A", "B"), ("--replace", "X")),
    (["--sort", "path", "foo"], ("foo",), ("A", "B"), ("--sort", "path")),
    (["-j", "2", "foo"], ("foo",), ("A", "B"), ()),
    (["-M", "80", "--max-depth", "3", "--max-filesize", "10M", "x"], ("x",), ("A", "B"), ()),
    (["-E", "utf-16le", "x"], ("x",), ("A", "B"), ("--encoding",)),
    (["--dfa-size-limit", "100M", "x"], ("x",), ("A", "B"), ()),
    (["foo", "/memory/A/notes"], ("foo",), ("A/notes",), ()),
    (["foo", "/memory/"], ("foo",), ("A", "B"), ()),
    (["foo", "./A//notes/./q.md"], ("foo",), ("A/notes/q.md",), ()),
    (["--", "-foo", "B"], ("-foo",), ("B",), ()),
    (["foo", "--", "A"], ("foo",), ("A",), ()),
    (["foo", "-i"], ("foo",), ("A", "B"), ("--ignore-case",)),
    (["--no-ignore", "--hidden", "--no-follow", "--trim", "foo"], ("foo",), ("A", "B"), ()),
]


@pytest.mark.parametrize(("args", "patterns", "paths", "options"), ALLOWED)
def test_allowed(
    args: list[str], patterns: tuple[str, ...], paths: tuple[str, ...], options: tuple[str, ...]
) -> None:
    command = parse(args, STORES)
    assert command.patterns == patterns
    assert command.paths == paths
    argv = command.argv
    for option in options:
        assert option in argv
    # Fixed safety flags always come first; paths always after "--".
    assert argv[:3] == ["--no-config", "--color", "never"]
    assert argv[argv.index("--") + 1 :] == list(paths)
    for pattern in patterns:
        assert argv[argv.index(pattern) - 1] == "--regexp"


# args -> a piece of the error message (naming the flag or path)
REFUSED: list[tuple[list[str], str]] = [
    (["--pre", "cat", "foo"], "--pre"),
    (["--pre=cat", "foo"], "--pre"),
    (["--pre-glob", "*", "foo"], "--pre-glob"),
    (["-z", "foo"], "-z"),
    (["--search-zip", "foo"], "--search-zip"),
    (["--hostname-bin", "/bin/sh", "foo"], "--hostname-bin"),
    (["-L", "foo"], "-L"),
    (["-iL", "foo"], "-L"),
    (["--follow", "foo"], "--follow"),
    (["--ignore-file", "/etc/passwd", "foo"], "--ignore-file"),
    (["-f", "/etc/passwd"], "-f"),
    (["--file=/etc/passwd"], "--file"),
    (["-p", "foo"], "-p"),
    (["--color", "always", "foo"], "--color"),
    (["--colors", "match:fg:red", "foo"], "--colors"),
    (["--debug", "foo"], "--debug"),
    (["--path-separator", "\\", "foo"], "--path-separator"),
    (["--no-such-flag", "foo"], "--no-such-flag"),
    (["-Q", "foo"], "-Q"),
    (["--hidden=yes", "foo"], "--hidden"),
    (["-j", "64", "foo"], "--threads"),
    (["-m", "lots", "foo"], "--max-count"),
    (["--dfa-size-limit", "100G", "foo"], "--dfa-size-limit"),
    (["--sort", "random", "foo"], "--sort"),
    (["-g", "../**", "foo"], "'..'"),
    (["--glob=A/../B/*", "foo"], "'..'"),
    (["--type-add", "x:../*", "foo"], "'..'"),
    (["foo", "C"], "'C'"),
    (["foo", "A/../B"], "'..'"),
    (["foo", ".."], "'..'"),
    (["foo", "/etc/passwd"], "/memory/"),
    (["foo", "/memory/C/x"], "'C'"),
    (["foo", "-"], "'-'"),
    (["foo", "/memory/../etc"], "'..'"),
    ([], "no search pattern"),
    (["-i"], "no search pattern"),
    (["-e"], "needs a value"),
    (["--glob"], "needs a value"),
    (["fo\0o"], "NUL"),
    (["--json", "foo"], "--json is not allowed"),  # memfs's own: format json
    (["-i", "--json", "-e", "foo"], "format json"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_refused(args: list[str], message: str) -> None:
    with pytest.raises(BadArguments) as caught:
        parse(args, STORES)
    assert message in str(caught.value)


def test_format_json_asks_rg_for_json_after_the_users_flags() -> None:
    """rg --json is memfs's to add: after the user's flags, with line numbers that -N
    cannot take away; the text command has neither."""
    argv = parse(["-N", "-C2", "foo", "A"], STORES, json=True).argv
    assert argv.index("--json") > argv.index("--no-line-number")
    assert argv.index("--line-number") > argv.index("--no-line-number")
    assert argv.index("--json") < argv.index("--")
    assert "--json" not in parse(["-N", "foo"], STORES).argv


@pytest.mark.parametrize("args", [
    ["-l", "foo"], ["--files-with-matches", "foo"], ["-c", "foo"], ["--count-matches", "foo"],
    ["--files-without-match", "foo"], ["--files"], ["--type-list"], ["--passthru", "foo"],
    ["-ic", "foo"], ["--version"],
])
def test_flags_that_print_no_matches_are_refused_with_format_json(args: list[str]) -> None:
    parse(args, STORES)  # as text, fine
    with pytest.raises(BadArguments, match="does not go with format json"):
        parse(args, STORES, json=True)


def test_flags_that_go_with_format_json() -> None:
    for args in (["-i", "-w", "-C2", "-o", "-r", "X", "--heading", "-N", "foo"],
                 ["-v", "-U", "-m", "1", "-g", "*.md", "--sort=path", "-q", "foo", "A"]):
        assert "--json" in parse(args, STORES, json=True).argv


@pytest.mark.parametrize(("args", "context"), [
    ([], (0, 0)), (["-C", "2"], (2, 2)), (["-A1"], (0, 1)), (["-B", "3"], (3, 0)),
    (["-C3", "-A1"], (3, 1)), (["-A1", "-C3"], (3, 1)), (["-B1", "-C3", "-A0"], (1, 0)),
    (["-C1", "-C4"], (4, 4)), (["-e", "-C9", "-m", "2"], (0, 0)),
])
def test_context_is_counted_as_rg_counts_it(args: list[str], context: tuple[int, int]) -> None:
    assert context_of(scan([*args, "foo"]).options) == context


def test_the_flag_tables_name_flags_the_allow_list_takes() -> None:
    allowed = set(VALUE_FLAGS) | SWITCHES
    assert allowed >= SELECTING and allowed >= set(NOT_WITH_JSON)
    assert not SELECTING & set(NOT_WITH_JSON)
    assert "--json" not in allowed


@pytest.mark.parametrize(("args", "prints"), [
    (["-i", "-C2", "-g", "*.md", "--sort=path", "foo"], True),
    (["-e", "-o", "-e", "-c"], True),  # patterns, not flags
    (["-o", "foo"], False), (["-l", "foo"], False), (["-N", "foo"], False),
    (["-r", "X", "foo"], False), (["--column", "foo"], False), (["-I", "foo"], False),
])
def test_prints_matches(args: list[str], prints: bool) -> None:
    assert prints_matches(scan(args).options) is prints


def test_threads_are_capped_by_default() -> None:
    argv = parse(["foo"], STORES, max_threads=3).argv
    assert argv[argv.index("--threads") + 1] == "3"


# Real runs: args -> (expected exit code, lines that must appear, text that must not).
RUNS: list[tuple[list[str], int, list[str], list[str]]] = [
    (["-n", "payments", "A"], 0, ["A/notes/queue.md:1:the payments queue is slow"], []),
    (["-i", "PAYMENTS", "A/notes"], 0, ["A/notes/queue.md:the payments queue is slow"], []),
    (["-c", "a", "/memory/A/todo.txt"], 0, ["3"], []),
    (["-l", "payments"], 0, ["A/notes/queue.md", "B/secret.txt"], ["A/.hidden.md"]),
    (["-l", "--hidden", "payments", "A"], 0, ["A/.hidden.md", "A/notes/queue.md"], []),
    (["--files", "A"], 0, ["A/todo.txt", "A/notes/queue.md"], ["B/"]),
    (["-w", "bet", "A"], 1, [], []),
    (["-o", "-r", "X", "alp", "A"], 0, ["A/todo.txt:X"], []),
    (["-g", "*.md", "-l", "e", "A"], 0, ["A/notes/queue.md"], ["A/todo.txt"]),
]


@pytest.mark.parametrize(("args", "code", "present", "absent"), RUNS)
def test_real_runs(
    jail: Jail,
    stores: dict[str, Path],
    args: list[str],
    code: int,
    present: list[str],
    absent: list[str],
) -> None:
    result = jail.search(stores, args)
    text = result.output.decode()
    assert result.exit_code == code, result.stderr
    assert not result.truncated
    for line in present:
        assert line in text.splitlines()
    for piece in absent:
        assert piece not in text


@pytest.mark.parametrize("args", [
    ["payments"], ["-C1", "e"], ["-A1", "-C3", "a"], ["-B1", "-A0", "-C2", "a"],
    ["-v", "-B1", "beta", "A/todo.txt"], ["-U", "alpha\\nbeta", "A"], ["-m1", "-A1", "a"],
])
def test_real_json_runs_print_back_as_rgs_text(
        jail: Jail, stores: dict[str, Path], args: list[str]) -> None:
    """The same search as text and as structured matches: printed back (rg_json.render,
    with the context rg_args.context_of counts), the matches are rg's text."""
    text = jail.search(stores, ["--line-number", "--with-filename", "--sort=path", *args])
    found = jail.search(stores, ["--sort=path", *args], structured=True)
    assert (found.exit_code, found.truncated, found.output) == (text.exit_code, False, b"")
    assert found.matches
    context = any(context_of(scan(args).options))
    assert "".join(render(found.matches, context=context)) == text.output.decode()
    assert {m["path"].split("/")[0] for m in found.matches} <= {"A", "B"}


def test_flags_of_how_lines_print_change_no_structured_match(
        jail: Jail, stores: dict[str, Path]) -> None:
    plain = jail.search(stores, ["-C1", "alp", "A"], structured=True).matches
    printed = jail.search(stores, ["-o", "-r", "X", "--column", "-N", "--heading", "-b",
                                   "--trim", "-M", "3", "-C1", "alp", "A"], structured=True)
    assert plain and printed.matches == plain


def test_a_structured_search_with_no_match(jail: Jail, stores: dict[str, Path]) -> None:
    found = jail.search(stores, ["no-such-text"], structured=True)
    assert (found.exit_code, found.matches, found.truncated) == (1, [], False)
    assert jail.search({}, ["foo"], check=lambda _: None, structured=True).matches == []
    with pytest.raises(BadArguments, match="does not go with format json"):
        jail.search(stores, ["-l", "payments"], structured=True)


def test_real_run_refuses_before_running(jail: Jail, stores: dict[str, Path]) -> None:
    with pytest.raises(BadArguments, match="--pre"):
        jail.search(stores, ["--pre", "/bin/sh", "x"])


def test_regex_error_is_reported(jail: Jail, stores: dict[str, Path]) -> None:
    from memfs.jail import ToolFailed

    with pytest.raises(ToolFailed) as caught:
        jail.search(stores, ["foo("])
    assert caught.value.exit_code == 2
    assert "regex" in caught.value.stderr


class Refused(Exception):
    """What the test's ``check`` raises for a path it refuses."""


def refusing(*refused: str) -> tuple[list[str], Callable[[str], None]]:
    """A ``check`` that notes each path it is given and raises Refused for ``refused``."""
    seen: list[str] = []

    def check(path: str) -> None:
        seen.append(path)
        if path in refused:
            raise Refused(path)

    return seen, check


@pytest.mark.parametrize(
    "args, refused",
    [
        (["foo", "B"], "B"),
        (["foo", "A", "/memory/B/x"], "B/x"),
        (["foo", "A/./x//y", "C/x", "B"], "C/x"),  # the first refused, in order
        (["-e", "x", "--", "A/nowhere"], "A/nowhere"),  # a readable store's missing path
    ],
)
def test_check_refuses_a_path_before_anything_runs(args: list[str], refused: str) -> None:
    """``check`` is given each path as STORE[/PATH] once its syntax is checked, and
    whatever it raises refuses the search (the daemon: not_found). Without it, a store
    that is not readable is plain BadArguments."""
    _, check = refusing(refused)
    with pytest.raises(Refused, match=refused):
        parse(args, ("A",), check=check)
    if refused.split("/")[0] != "A":
        with pytest.raises(BadArguments, match="no readable store"):
            parse(args, ("A",))


@pytest.mark.parametrize(
    "args, given",
    [(["foo"], []), (["foo", "A/x"], ["A/x"]), (["foo", "/memory"], []),
     (["foo", "A/./x//y", "/memory/A"], ["A/x/y", "A"])],
)
def test_check_is_given_each_path_and_changes_nothing_it_accepts(
        args: list[str], given: list[str]) -> None:
    seen, check = refusing()
    assert parse(args, ("A",), check=check) == parse(args, ("A",))
    assert seen == given


def test_a_path_of_bad_syntax_never_reaches_check() -> None:
    seen, check = refusing()
    with pytest.raises(BadArguments, match=r"'\.\.' is not allowed"):
        parse(["foo", "A/../B"], ("A", "B"), check=check)
    assert seen == []  # a path with bad syntax never reaches it


def test_search_with_no_readable_store(jail: Jail, stores: dict[str, Path]) -> None:
    """``check`` given: the arguments are still checked, and an empty search is empty."""
    seen, check = refusing("B")
    assert jail.search({}, ["foo"], check=check).exit_code == 1
    with pytest.raises(Refused):
        jail.search({}, ["foo", "B"], check=check)
    with pytest.raises(BadArguments, match="--pre"):
        jail.search({}, ["--pre", "/bin/sh", "x"], check=check)
    assert seen == ["B"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/mnt/where/configured/A/notes", ("A/notes",)),
        ("/mnt/where/configured/B", ("B",)),
        ("/mnt/where/configured", ("A", "B")),
        ("/mnt/where/configured/", ("A", "B")),
        ("/memory/A", ("A",)),  # the default mount point is still accepted
    ],
)
def test_the_configured_mount_prefix_is_accepted(path: str, expected: tuple[str, ...]) -> None:
    command = parse(["foo", path], STORES, mount="/mnt/where/configured")
    assert command.paths == expected


@pytest.mark.parametrize("path", ["/mnt/where/configuredX/A", "/mnt/where/A", "/mnt/where"])
def test_only_the_configured_mount_prefix_is_accepted(path: str) -> None:
    with pytest.raises(BadArguments, match="/mnt/where/configured/"):
        parse(["foo", path], STORES, mount="/mnt/where/configured")
