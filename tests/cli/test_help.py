"""The CLI's help: every command, option and argument says what it is; each command
lists only the options it takes; ``memfs grep --help`` is memfs's own (the paths, the
ripgrep flags the jail takes and refuses), and ripgrep's is one flag away."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator

import pytest

from memfs.cli import _parser
from tests.support import MEMFS, UID_A, Daemon, memfs_as, public_tmpdir, standard_config


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ("memfs",)
             ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub)command's words and parser."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name))


def test_every_option_and_argument_has_help() -> None:
    missing = [(" ".join(words), action.option_strings or action.dest)
               for words, parser in commands(_parser(grep_help=True))
               for action in parser._actions if action.help is None]
    assert missing == []
    undescribed = [" ".join(words) for words, parser in commands(_parser())
                   if len(words) > 1 and not parser.description]
    assert undescribed == []


def options(*args: str) -> str:
    done = subprocess.run([*MEMFS, *args, "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("command", "takes", "not_taken"), [
    (["serve"], ["--config", "--socket", "--demo", "--personal", "--no-mount"],
     ["--as", "--json", "--agent"]),
    (["attach"], ["--config", "--pid"], ["--as", "--json", "--agent", "--socket"]),
    (["detach"], ["--config"], ["--as", "--json", "--agent", "--socket"]),
    (["mount"], ["--token-file", "--wait", "--stale-ok", "--cacert", "--cache-mib"],
     ["--as", "--json", "--agent", "--socket"]),
    (["mcp"], ["--socket", "--as", "--agent", "--local-dir"], ["--json"]),
    (["cat"], ["--socket", "--as", "--agent", "--json", "--offset"], []),
    (["task", "claim"], ["--ttl", "--store", "--json"], []),
])
def test_each_command_lists_what_it_takes(command: list[str], takes: list[str],
                                         not_taken: list[str]) -> None:
    shown = options(*command)
    for option in takes:
        assert f"{option} " in shown or f"{option}\n" in shown, (option, shown)
    for option in not_taken:
        assert f"{option} " not in shown and f"{option}\n" not in shown, (option, shown)


def test_grep_help_is_memfs_s_own() -> None:
    for asked in (["grep", "--help"], ["grep", "-h"], ["grep", "-i", "--help"]):
        done = subprocess.run([*MEMFS, "--socket", "/nonexistent/sock", *asked],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr  # no daemon needed
        shown = done.stdout
        assert shown.startswith("usage: memfs grep [RG-FLAGS] PATTERN [PATH...]"), shown
        assert "STORE/PATH" in shown and "every store you may read" in shown
        taken = shown.split("ripgrep flags it takes")[1].split("refused on purpose")[0]
        assert " -i " in taken and "--glob" in taken and "--context" in taken
        assert "--pre" not in taken and "--follow" not in taken and " -L" not in taken
        assert "--pre: it runs a program on every file" in shown
        assert "memfs grep --rg-help" in shown


def test_grep_rg_help_is_ripgrep_s_and_a_pattern_named_help_is_searched() -> None:
    with Daemon(standard_config(public_tmpdir())) as daemon:
        done = memfs_as(UID_A, daemon.socket, "grep", "--rg-help")
        assert done.returncode == 0, done.stderr
        assert b"ripgrep" in done.stdout and b"--context" in done.stdout
        memfs_as(UID_A, daemon.socket, "write", "notes/h.md", input=b"say --help\n")
        found = memfs_as(UID_A, daemon.socket, "grep", "-e", "--help", "notes")
        assert (found.returncode, found.stdout) == (0, b"notes/h.md:say --help\n")
