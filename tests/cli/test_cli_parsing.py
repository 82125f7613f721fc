"""The CLI's argparse-free fast path agrees with argparse, or steps aside."""

from __future__ import annotations

import pytest

from memfs import cli

AGREE = [
    ["cat", "notes/a.md"],
    ["cat", "notes/a.md", "--offset", "3", "--limit", "10"],
    ["--socket", "/s", "cat", "notes/a.md"],
    ["--socket=/s", "--as", "bob", "--json", "cat", "notes/a.md"],
    ["--agent", "claude", "cat", "notes/a.md"],
    ["--agent=codex", "write", "notes/a.md"],
    ["ls", "--agent", "claude"],
    ["cat", "notes/a.md", "--json"],
    ["ls"],
    ["ls", "notes/**/*.md", "ops/*"],
    ["write", "notes/a.md", "--append"],
    ["write", "--force", "notes/a.md"],
    ["rm", "notes/a.md", "--force"],
    ["stat", "/memory/notes/a.md"],
    ["brief"],
    ["brief", "team"],
    ["--json", "brief", "team", "--max-bytes", "1024"],
    ["log"],
    ["log", "notes"],
    ["log", "-n", "50", "notes/a.md"],
    ["log", "notes", "-p", "--patch"],
    ["--json", "log", "-n", "5", "--patch"],
    ["grep"],  # (ripgrep's words are split off before: _split_grep)
    ["--as", "bob", "--json", "grep"],
    ["--url", "https://h:7800", "--token-file", "/t", "cat", "notes/a.md"],
    ["--url=http://127.0.0.1:7800", "--cacert", "/ca.pem", "write", "notes/a.md"],
    ["ls", "--token-file=/t", "--url", "https://h"],
]

STEP_ASIDE = [
    ["cat"],
    ["cat", "a", "b"],
    ["cat", "a", "--offset", "x"],
    ["cat", "a", "-h"],
    ["--help"],
    ["write", "a", "--bogus"],
    ["edit", "a", "-e", "p"],
    ["download", "a", "b"],
    ["--socket"],
    ["--agent"],
    ["--agent", "--json", "ls"],
    ["--url"],
    ["--url", "--token-file", "/t", "ls"],
    ["frobnicate", "x"],
    ["brief", "a", "b"],
    ["brief", "--max-bytes", "many"],
    ["log", "a", "b"],
    ["log", "-n", "x"],
    ["log", "-n20"],
    ["log", "--n", "5"],
    ["log", "--since", "2026-11-30"],
    ["log", "--author", "bob"],
]


@pytest.mark.parametrize("argv", AGREE)
def test_fast_path_matches_argparse(argv: list[str]) -> None:
    fast = cli._fast_args(argv)
    assert fast is not None
    slow = cli._parser().parse_args(argv)
    defaults = {"socket": None, "as_agent": None, "agent": None, "json": False, "url": None,
                "token_file": None, "cacert": None}
    assert {**defaults, **vars(fast)} == {**defaults, **vars(slow)}


@pytest.mark.parametrize("argv", STEP_ASIDE)
def test_fast_path_leaves_the_rest_to_argparse(argv: list[str]) -> None:
    assert cli._fast_args(argv) is None


def test_grep_arguments_pass_through_untouched() -> None:
    assert cli._split_grep(["--as", "bob", "grep", "-i", "--as", "x"]) == (
        ["--as", "bob", "grep"], ["-i", "--as", "x"])
    assert cli._split_grep(["cat", "notes/grep"]) == (["cat", "notes/grep"], None)


def test_grep_arguments_after_an_agent_name() -> None:
    assert cli._split_grep(["--agent", "claude", "grep", "-i", "x"]) == (
        ["--agent", "claude", "grep"], ["-i", "x"])


def test_the_agent_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """--as (a delegate) or --agent or MEMFS_AGENT (personal mode): one wire field."""

    def named(**given: str | None) -> str | None:
        return cli._acting_as(cli._Args(**{"as_agent": None, "agent": None, **given}))

    monkeypatch.delenv("MEMFS_AGENT", raising=False)
    assert named() is None
    assert named(agent="claude") == named(as_agent="claude") == "claude"
    monkeypatch.setenv("MEMFS_AGENT", "codex")
    assert named() == "codex"
    assert named(agent="claude") == "claude" and named(as_agent="bob") == "bob"
    assert named(as_agent="bob", agent="bob") == "bob"
    with pytest.raises(cli.Usage, match="name two agents"):
        named(as_agent="bob", agent="claude")
