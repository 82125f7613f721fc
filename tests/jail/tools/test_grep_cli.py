"""`memfs grep` end to end: the real CLI as real uids, through the daemon, real rg in
the jail. Output paths read STORE/PATH; rg's flags pass through or are refused."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.jail.tools.conftest import Memory
from tests.support import (
    UID_A,
    UID_B,
    UID_C,
    Daemon,
    connect_as,
    memfs_as,
    public_tmpdir,
    standard_config,
)


def lines(text: str) -> set[str]:
    return set(text.splitlines())


def test_output_paths_are_store_slash_path(memory: Memory) -> None:
    code, out, err = memory.grep(UID_A, "-n", "payments")
    assert code == 0, err
    assert "notes/queue.md:1:the payments queue is slow" in lines(out)
    assert "ops/deploy.md:1:deploy payments on friday" in lines(out)
    assert "notes/runbook.md:3:restart the payments worker" in lines(out)
    for line in out.splitlines():
        assert line.split("/", 1)[0] in ("notes", "ops"), line
    assert str(memory.stores) not in out + err
    assert "memfs-jail" not in out + err


def test_bob_reads_ops_carol_only_notes(memory: Memory) -> None:
    code, out, _ = memory.grep(UID_B, "-l", "payments")
    assert code == 0 and "ops/deploy.md" in lines(out)
    code, out, _ = memory.grep(UID_C, "-l", "payments")
    assert code == 0
    assert lines(out) == {"notes/queue.md", "notes/runbook.md"}


@pytest.mark.parametrize(
    "args, expected",
    [
        (["-i", "ONCALL", "notes"], {"notes/team/oncall.md:Oncall: Alice"}),
        (["-w", "payment", "notes"], {"notes/bob.txt:payment"}),
        (["-F", "a.b", "notes"], {"notes/bob.txt:a.b literal and axb"}),
        (["a.b", "notes/bob.txt"], {"a.b literal and axb"}),  # one file: no name
        (
            ["-e", "Oncall", "-e", "retry", "notes"],
            {"notes/team/oncall.md:Oncall: Alice", "notes/queue.md:retry later"},
        ),
        (["-c", "step", "notes"], {"notes/runbook.md:4"}),
        (["-l", "payments", "ops"], {"ops/deploy.md"}),
        (["-g", "notes/team/*", "-l", "Oncall"], {"notes/team/oncall.md"}),
        (["-g", "!*.md", "-l", "payment"], {"notes/bob.txt"}),
        (
            ["-C", "2", "-n", "restart", "notes/runbook.md"],
            {
                "1-step one",
                "2-step two",
                "3:restart the payments worker",
                "4-step four",
                "5-step five",
            },
        ),
    ],
)
def test_flags_pass_through(memory: Memory, args: list[str], expected: set[str]) -> None:
    code, out, err = memory.grep(UID_A, *args)
    assert code == 0, err
    assert lines(out) == expected


def test_hidden_files_follow_rg_rules(memory: Memory) -> None:
    assert "notes/.hidden.md" not in memory.grep(UID_A, "-l", "hidden")[1]
    code, out, _ = memory.grep(UID_A, "--hidden", "-l", "hidden payments")
    assert code == 0 and lines(out) == {"notes/.hidden.md"}


def test_json_prints_the_matches_as_json_lines(memory: Memory) -> None:
    """memfs grep --json: one match a line (what jq takes one at a time), STORE/PATH
    paths, line numbers, spans in characters, context lines; memfs --json grep too."""
    code, out, err = memory.grep(UID_A, "--json", "-C1", "restart|Oncall", "notes")
    assert code == 0, err
    found = sorted((json.loads(line) for line in out.splitlines()), key=lambda m: m["path"])
    assert found == [
        {"path": "notes/runbook.md", "line": 3, "text": "restart the payments worker",
         "submatches": [{"start": 0, "end": 7, "match": "restart"}],
         "before": [{"line": 2, "text": "step two"}],
         "after": [{"line": 4, "text": "step four"}]},
        {"path": "notes/team/oncall.md", "line": 1, "text": "Oncall: Alice",
         "submatches": [{"start": 0, "end": 6, "match": "Oncall"}],
         "before": [], "after": [{"line": 2, "text": "Payments owner: Bob"}]},
    ]
    again = memfs_as(UID_A, memory.socket, "--json", "grep", "-C1", "restart|Oncall", "notes")
    assert again.returncode == 0
    assert sorted(again.stdout.decode().splitlines()) == sorted(out.splitlines())


def test_json_past_the_output_limit_says_so() -> None:
    """The limit holds for the matches (their compact JSON, one byte more each: their
    lines here), and memfs grep --json says on stderr that some were left out."""
    base = public_tmpdir("memfs-grep-limit-")
    try:
        with Daemon(standard_config(base, jail={"search_output_limit": 4096})) as daemon:
            with connect_as(UID_A, daemon.socket) as alice:
                alice.write("notes/many.txt", "".join(f"many {n}\n" for n in range(1000)))
            done = memfs_as(UID_A, daemon.socket, "grep", "--json", "many", "notes")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert 0 < len(out.encode()) <= 4096 and len(out.splitlines()) < 1000
    assert all(json.loads(line)["text"].startswith("many ") for line in out.splitlines())
    assert "matches left out: the search's output limit was reached" in done.stderr.decode()


def test_json_exit_codes_and_refusals(memory: Memory) -> None:
    assert memory.grep(UID_A, "--json", "no-such-text-anywhere") == (1, "", "")
    code, out, err = memory.grep(UID_A, "--json", "-l", "payments")
    assert code == 2 and out == ""
    assert "-l/--files-with-matches does not go with format json" in err, err
    code, out, err = memory.grep(UID_C, "--json", "payments", "ops")
    assert code == 5 and out == "" and "not found" in err
    # a pattern "--json" (after -e, or after --) is searched, and printed as text
    memfs_as(UID_A, memory.socket, "write", "notes/flags.txt", input=b"say --json\n")
    assert memory.grep(UID_A, "-e", "--json", "notes") == (0, "notes/flags.txt:say --json\n", "")
    assert memory.grep(UID_A, "--", "--json") == (0, "notes/flags.txt:say --json\n", "")


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--pre", "cat", "x"], "--pre"),
        (["-z", "x"], "-z"),
        (["--follow", "x"], "--follow"),
        (["-L", "x"], "-L"),
        (["-f", "/etc/passwd"], "-f"),
        (["--ignore-file", "x", "y"], "--ignore-file"),
    ],
)
def test_dangerous_flags_are_refused(memory: Memory, args: list[str], flag: str) -> None:
    code, out, err = memory.grep(UID_A, *args)
    assert code == 2, (out, err)
    assert out == ""
    assert flag in err and "not allowed" in err, err


def test_an_unattached_store_is_not_found(memory: Memory) -> None:
    """A store carol is not attached to does not exist for her, as for every command."""
    code, out, err = memory.grep(UID_C, "payments", "ops")
    assert code == 5, (out, err)
    assert 'not found: no store named "ops"' in err and out == ""
    code, _, err = memory.grep(UID_C, "payments", "/memory/ops/deploy.md")
    assert code == 5, err


def test_no_match_exits_1(memory: Memory) -> None:
    assert memory.grep(UID_A, "no-such-text-anywhere") == (1, "", "")
    assert memory.grep(UID_C, "deploy payments") == (1, "", "")  # only in ops


def test_unknown_flag_and_missing_pattern(memory: Memory) -> None:
    code, _, err = memory.grep(UID_A, "--frobnicate", "x")
    assert code == 2 and "--frobnicate" in err
    code, _, err = memory.grep(UID_A)
    assert code == 2 and "PATTERN" in err


def test_paths_under_the_configured_mount_point_are_accepted(memory: Memory) -> None:
    """The daemon's mount is not /memory here: grep takes its paths like other commands
    take theirs (`memfs grep PATTERN MOUNT/notes` used to be refused)."""
    mount = memory.daemon.config["mount"]
    assert mount != "/memory"
    code, out, err = memory.grep(UID_A, "-l", "payments", f"{mount}/notes")
    assert code == 0, err
    assert lines(out) == {"notes/queue.md", "notes/runbook.md"}
    code, out, err = memory.grep(UID_A, "-l", "deploy", mount)
    assert code == 0, err
    assert lines(out) == {"ops/deploy.md"}
    done = memory.grep(UID_A, "payments", "/elsewhere/notes")
    assert done[0] == 2 and "must start with" in done[2]
