"""A search over store A never yields store B's content, whatever the arguments."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from memfs.jail import BadArguments, Jail, SearchResult, ToolFailed
from memfs.jail.settings import service_ids
from tests.support import public_tmpdir

SECRET = "TOP-SECRET-IN-B"  # written into B/secret.txt by the `stores` fixture
STATE = "STATE-OF-THE-DAEMON"


def only_a(stores: dict[str, Path]) -> dict[str, Path]:
    return {"A": stores["A"]}


def assert_no_secret(result: SearchResult) -> None:
    assert SECRET.encode() not in result.output
    assert b"root:" not in result.output  # /etc/shadow
    assert SECRET not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        [SECRET],
        ["-uuu", SECRET],
        ["--no-ignore", "--hidden", "-a", SECRET],
        ["-i", "top-secret"],
        ["root"],
        ["--files"],
        ["-l", "."],
    ],
)
def test_search_over_a_sees_nothing_of_b(
    jail: Jail, stores: dict[str, Path], args: list[str]
) -> None:
    result = jail.search(only_a(stores), args)
    assert_no_secret(result)
    for line in result.output.decode().splitlines():
        assert line.startswith("A/"), line


@pytest.mark.parametrize(
    "args",
    [
        ["--follow", SECRET],
        ["-L", SECRET],
        ["-g", "../**", SECRET],
        ["--glob=../B/*", SECRET],
        [SECRET, "A/../B"],
        [SECRET, "B"],
        [SECRET, "/memory/B/secret.txt"],
        [SECRET, "/tmp"],
        ["--pre", "/bin/cat", SECRET],
        ["--ignore-file", "/etc/shadow", SECRET],
    ],
)
def test_escapes_are_refused(jail: Jail, stores: dict[str, Path], args: list[str]) -> None:
    with pytest.raises(BadArguments):
        jail.search(only_a(stores), args)


@pytest.mark.parametrize("link", ["A/link-to-b", "A/link-to-shadow", "A/link-to-b-dir"])
def test_symlink_named_explicitly_is_blocked_by_the_kernel(
    jail: Jail, stores: dict[str, Path], link: str
) -> None:
    """rg follows a symlink given as a path argument; Landlock refuses the target."""
    try:
        result = jail.search(only_a(stores), ["-a", ".", link])
    except ToolFailed as failure:
        assert "Permission denied" in failure.stderr or "os error 13" in failure.stderr
        assert SECRET not in failure.stderr
    else:
        assert_no_secret(result)
        assert result.output == b""


def test_output_paths_name_the_store(jail: Jail, stores: dict[str, Path]) -> None:
    result = jail.search(stores, ["-n", "payments"])
    lines = set(result.output.decode().splitlines())
    assert "A/notes/queue.md:1:the payments queue is slow" in lines
    assert "B/secret.txt:2:payments secret" in lines
    assert str(stores["A"]) not in result.output.decode()


def test_stores_under_a_private_parent_are_readable(jail: Jail, stores: dict[str, Path]) -> None:
    """The stores' parent is 0700 root: the jailed uid reads them through the fds only."""
    assert stores["A"].parent.stat().st_mode & 0o777 == 0o700
    result = jail.search(only_a(stores), ["-c", "alpha", "A/todo.txt"])
    assert result.output == b"1\n"


def test_no_store_gives_an_empty_result(jail: Jail) -> None:
    result = jail.search({}, ["anything"])
    assert (result.output, result.exit_code, result.truncated) == (b"", 1, False)


def test_symlinked_store_root_is_refused(
    jail: Jail, stores: dict[str, Path], tmp_path: Path
) -> None:
    from memfs.jail import JailError

    link = tmp_path / "sneaky"
    link.symlink_to(stores["B"])
    with pytest.raises(JailError, match="cannot open store"):
        jail.search({"A": link}, [SECRET])


@pytest.fixture(scope="module")
def with_state() -> dict[str, Path]:
    """ROOT (0700) with stores/A and state/seen beside it, all of the jail's uid, as the
    daemon's are (its uid is the tools')."""
    root = public_tmpdir("memfs-state-test-") / "root"
    (root / "stores" / "A").mkdir(parents=True)
    (root / "stores" / "A" / "f.txt").write_text("alpha\n")
    (root / "state").mkdir()
    (root / "state" / "seen").write_text(f"s/x/{STATE}/\n")  # a sed script too (sed -f)
    for path in [root, *root.rglob("*")]:
        os.chown(path, *service_ids())
    root.chmod(0o700)
    return {"A": root / "stores" / "A", "state": root / "state" / "seen"}


HOSTILE_RUNS = {
    # the argument checks refuse these; run past them, straight through the launcher
    "rg a state file": ("rg", lambda s: ["rg", "--threads", "1", "-e", "STATE", s]),
    "rg beside the store": ("rg", lambda s: ["rg", "-uuu", "STATE", str(Path(s).parents[1])]),
    "sed a state file": ("sed", lambda s: ["sed", "-n", "p", s]),
    "sed r": ("sed", lambda s: ["sed", f"r {s}"]),
    "sed -f": ("sed", lambda s: ["sed", "-f", s]),
}


@pytest.mark.parametrize("name", list(HOSTILE_RUNS))
def test_the_state_beside_the_stores_is_out_of_reach(
    jail: Jail, with_state: dict[str, Path], name: str
) -> None:
    """rg and sed, run by the real launcher under the uid that owns ROOT/state, with
    arguments naming it: nothing of it comes out. The control: the same tool run
    unjailed as that uid reads it."""
    tool, argv = HOSTILE_RUNS[name]
    state = str(with_state["state"])
    stores = {"A": with_state["A"]} if tool == "rg" else {}
    run = jail._run(tool, argv(state), list(stores), stores, b"x\n", 65536)
    assert run.reply["status"] == "exited", run  # ran, and got nothing of it
    assert STATE.encode() not in run.stdout and STATE not in run.stderr
    unjailed = [str(jail.settings.rg_path) if tool == "rg" else "/usr/bin/sed", *argv(state)[1:]]
    uid, gid = service_ids()
    plain = subprocess.run(unjailed, input=b"x\n", capture_output=True, user=uid, group=gid,
                           extra_groups=[], cwd=with_state["A"].parent, check=False)
    assert STATE.encode() in plain.stdout + plain.stderr, plain
