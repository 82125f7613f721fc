"""The real `memfs` CLI against a real daemon, run as real uids."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.support import (
    MEMFS,
    UID_A,
    UID_B,
    UID_C,
    Daemon,
    memfs_as,
    public_tmpdir,
    run_as,
    standard_config,
)


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(standard_config(public_tmpdir())) as running:
        yield running


def test_write_cat_ls_rm_round_trip(daemon: Daemon) -> None:
    ok = memfs_as(UID_A, daemon.socket, "write", "notes/cli/a.md", input=b"one\ntwo\nthree\n")
    assert ok.returncode == 0, ok.stderr
    assert b"wrote notes/cli/a.md (14 bytes" in ok.stdout
    cat = memfs_as(UID_B, daemon.socket, "cat", "/memory/notes/cli/a.md")
    assert (cat.returncode, cat.stdout) == (0, b"one\ntwo\nthree\n")
    page = memfs_as(UID_B, daemon.socket, "cat", "notes/cli/a.md", "--offset", "2", "--limit", "1")
    assert page.stdout == b"two\n"
    assert b"continue with --offset 3" in page.stderr
    listed = memfs_as(UID_C, daemon.socket, "ls", "notes/**/*.md")
    assert b"notes/cli/a.md\n" in listed.stdout
    assert memfs_as(UID_A, daemon.socket, "rm", "notes/cli/a.md").returncode == 0
    assert memfs_as(UID_A, daemon.socket, "cat", "notes/cli/a.md").returncode == 5


def test_writing_what_is_there_says_unchanged(daemon: Daemon) -> None:
    memfs_as(UID_A, daemon.socket, "write", "notes/cli/same.md", input=b"same\n")
    again = memfs_as(UID_A, daemon.socket, "write", "notes/cli/same.md", input=b"same\n")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(b"unchanged notes/cli/same.md (5 bytes")
    edited = memfs_as(UID_A, daemon.socket, "edit", "notes/cli/same.md", "-e", "s/x/y/")
    assert edited.stdout.startswith(b"unchanged notes/cli/same.md")


def test_conflict_exit_code_and_message(daemon: Daemon) -> None:
    memfs_as(UID_A, daemon.socket, "write", "notes/cli/c.md", input=b"v1\n")
    memfs_as(UID_B, daemon.socket, "cat", "notes/cli/c.md")
    memfs_as(UID_A, daemon.socket, "write", "notes/cli/c.md", input=b"v2\n")
    stale = memfs_as(UID_B, daemon.socket, "write", "notes/cli/c.md", input=b"bob\n")
    assert stale.returncode == 3
    assert b"conflict" in stale.stderr and b"alice" in stale.stderr
    reread = memfs_as(UID_B, daemon.socket, "cat", "notes/cli/c.md")
    assert b"changed since you last read it" in reread.stderr
    assert memfs_as(UID_B, daemon.socket, "write", "notes/cli/c.md",
                    input=b"bob\n").returncode == 0
    forced = memfs_as(UID_A, daemon.socket, "write", "--force", "notes/cli/c.md", input=b"f\n")
    assert forced.returncode == 0
    appended = memfs_as(UID_B, daemon.socket, "write", "--append", "notes/cli/c.md",
                        input=b"g\n")
    assert appended.returncode == 0
    assert memfs_as(UID_C, daemon.socket, "cat", "notes/cli/c.md").stdout == b"f\ng\n"


def test_binary_content_round_trips(daemon: Daemon) -> None:
    data = bytes(range(256)) * 64
    assert memfs_as(UID_A, daemon.socket, "write", "notes/cli/bin", input=data).returncode == 0
    assert memfs_as(UID_B, daemon.socket, "cat", "notes/cli/bin").stdout == data


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["frobnicate"], 2),
        (["cat"], 2),
        (["cat", "notes/x", "--offset", "zero"], 2),
        (["cat", "/etc/passwd"], 2),
        (["--socket", "/nonexistent/sock", "ls"], 1),
        (["--json", "ls", "nosuchstore/**"], 5),
    ],
)
def test_usage_and_error_exit_codes(daemon: Daemon, args: list[str], code: int) -> None:
    result = memfs_as(UID_A, daemon.socket, *args)
    assert result.returncode == code, result.stderr
    assert result.stderr, "every failure explains itself on stderr"


def test_json_output(daemon: Daemon) -> None:
    import json

    memfs_as(UID_A, daemon.socket, "write", "notes/cli/j.md", input=b"j\n")
    result = memfs_as(UID_A, daemon.socket, "--json", "stat", "notes/cli/j.md")
    info = json.loads(result.stdout)
    assert info["size"] == 2 and info["last_writer"] == "alice" and len(info["digest"]) == 64


def test_client_commands_do_not_import_the_server_stack() -> None:
    code = ("import sys, memfs.cli; bad = {'trio', 'pydantic', 'pyfuse3', 'mcp', 'blake3'}"
            " & set(sys.modules); print(sorted(bad)); sys.exit(bool(bad))")
    result = run_as(UID_A, [MEMFS[0], "-c", code])
    assert result.returncode == 0, result.stdout


def test_grep_starts_without_argparse(daemon: Daemon) -> None:
    """`memfs grep` parses its few words without argparse (and `re`, `gettext`...),
    as cat does: a search's whole process is mostly start-up and rg."""
    memfs_as(UID_A, daemon.socket, "write", "notes/cli/g.md", input=b"needle\n")
    code = ("import sys; from memfs.cli import main; "
            f"code = main(['--socket', {str(daemon.socket)!r}, 'grep', '-c', 'needle', "
            "'notes/cli']); print(sorted({'argparse', 're'} & set(sys.modules))); "
            "sys.exit(code)")
    result = run_as(UID_A, [MEMFS[0], "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["notes/cli/g.md:1", "[]"]


def test_help_lists_exit_codes() -> None:
    result = subprocess.run([*MEMFS, "--help"], capture_output=True, text=True, check=True)
    assert "3 conflict" in result.stdout


def test_serve_reports_config_errors_naming_the_key(base: object) -> None:
    from pathlib import Path

    bad = Path(str(base)) / "bad.toml"
    bad.write_text('root = "/tmp/x"\n[agents.a]\nuid = 7\nstores = { nope = "read" }\n')
    result = subprocess.run([*MEMFS, "serve", "--config", str(bad)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "agents.a.stores.nope: no such store" in result.stderr


def test_second_daemon_on_a_live_socket_is_refused(daemon: Daemon) -> None:
    from tests.support import dump_toml

    clone = daemon.socket.with_name("clone.toml")
    clone.write_text(dump_toml({**daemon.config, "mount": daemon.config["mount"] + "-2"}))
    result = subprocess.run([*MEMFS, "serve", "--no-mount", "--config", str(clone)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "in use by another running daemon" in result.stderr
    assert memfs_as(UID_A, daemon.socket, "ls").returncode == 0
