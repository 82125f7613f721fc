"""End to end: no search output ever shows content of a store the agent is not
attached to (`secret`), nor /etc/shadow, whatever the arguments, including symlinks
planted in the backing directory of `notes` (see conftest.plant)."""

from __future__ import annotations

import pytest

from memfs.control.client import MemfsClientError
from tests.jail.tools.conftest import SECRET, SHADOW_MARK, Memory
from tests.support import UID_A, UID_B, UID_C, connect_as

AGENTS = {"alice": UID_A, "bob": UID_B, "carol": UID_C}


def assert_clean(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text
        assert "payments secret" not in text
        assert SHADOW_MARK not in text


@pytest.mark.parametrize("uid", AGENTS.values(), ids=AGENTS.keys())
@pytest.mark.parametrize(
    "args",
    [
        [SECRET],
        ["-uuu", SECRET],
        ["--hidden", "-uuu", "-a", SECRET],
        ["--no-ignore", "--hidden", "-i", "secret"],
        ["root"],
        ["-uuu", "root", "/memory"],
        ["-l", "-uuu", "."],
        ["--files", "-uuu"],
        ["-c", "-uuu", "."],
        ["-uuu", ".", "notes/leak.md"],
        ["-uuu", ".", "notes/leak-dir"],
        ["-uuu", ".", "notes/shadow"],
        ["-uuu", ".", "notes/relative-leak.md"],
        ["-uuu", "-g", "*leak*", "."],
        ["--max-depth", "5", "-uuu", "payments"],
    ],
)
def test_search_never_shows_secret(memory: Memory, uid: int, args: list[str]) -> None:
    with connect_as(uid, memory.socket) as client:
        try:
            result = client.search(args)
        except MemfsClientError as error:  # e.g. rg's own error on a refused symlink
            assert error.code in ("invalid", "permission_denied"), error
            assert_clean(error.message)
            return
    assert_clean(result["output"], result["stderr"])
    for line in result["output"].splitlines():
        if line.startswith("[memfs: output truncated"):  # the cap
            continue
        assert line.split("/", 1)[0] in ("notes", "ops"), line


@pytest.mark.parametrize("uid", AGENTS.values(), ids=AGENTS.keys())
@pytest.mark.parametrize(
    "args",
    [[SECRET], ["-uuu", "-a", "-C1", "."], ["-uuu", "root", "/memory"],
     ["-uuu", ".", "notes/leak-dir"], ["-uuu", "-g", "*leak*", "."]],
)
def test_structured_matches_never_show_secret(memory: Memory, uid: int,
                                              args: list[str]) -> None:
    """The same for structured matches (rg --json): texts, paths and context lines."""
    with connect_as(uid, memory.socket) as client:
        try:
            result = client.search(args, structured=True)
        except MemfsClientError as error:
            assert error.code in ("invalid", "permission_denied"), error
            assert_clean(error.message)
            return
    assert_clean(result["stderr"], *(str(match) for match in result["matches"]))
    for match in result["matches"]:
        assert match["path"].split("/", 1)[0] in ("notes", "ops"), match


@pytest.mark.parametrize(
    "args, code",
    [
        (["-g", "../**", SECRET], "invalid"),
        (["--glob=../secret/*", SECRET], "invalid"),
        (["--iglob", "**/../../secret/**", SECRET], "invalid"),
        ([SECRET, "notes/../secret"], "invalid"),
        ([SECRET, "notes/../../secret/s.txt"], "invalid"),
        ([SECRET, "/memory/notes/../secret"], "invalid"),
        ([SECRET, "secret"], "not_found"),  # not alice's: it does not exist for her
        ([SECRET, "/memory/secret/s.txt"], "not_found"),
        ([SECRET, "/etc/shadow"], "invalid"),
        ([SECRET, "../stores/secret"], "invalid"),
        (["-L", SECRET], "invalid"),
        (["--follow", SECRET], "invalid"),
        (["--pre", "/bin/cat", SECRET], "invalid"),
        (["--ignore-file", "/etc/shadow", SECRET], "invalid"),
    ],
)
def test_path_tricks_are_refused(memory: Memory, args: list[str], code: str) -> None:
    with connect_as(UID_A, memory.socket) as client, pytest.raises(MemfsClientError) as caught:
        client.search(args)
    assert caught.value.code == code, caught.value
    assert_clean(caught.value.message)


def test_symlink_named_explicitly_is_refused(memory: Memory) -> None:
    """rg would follow a symlink given as a path (and Landlock would refuse the target,
    see tests/jail): a symlink planted in a store is refused before rg runs."""
    for planted in ("notes/leak.md", "notes/shadow"):
        code, out, err = memory.grep(UID_A, "-a", ".", planted)
        assert code == 2, (out, err)
        assert out == ""
        assert "not a file memfs shows" in err, err
        assert_clean(out, err)
    # through a symlinked directory: refused before rg runs, as the path is checked
    # (were rg given it, the kernel would refuse the target, see tests/jail)
    code, out, err = memory.grep(UID_A, "-a", ".", "notes/leak-dir/s.txt")
    assert code == 2, (out, err)
    assert out == ""
    assert "'leak-dir' is not a directory" in err, err
    assert_clean(out, err)


def test_cli_with_everything_on(memory: Memory) -> None:
    code, out, err = memory.grep(UID_C, "--hidden", "-uuu", "-a", "-n", ".")
    assert code in (0, 2), err
    assert "notes/queue.md:1:the payments queue is slow" in out
    assert_clean(out, err)
    assert "ops/" not in out  # carol is not attached to ops either


def test_the_secret_is_really_there(memory: Memory) -> None:
    """The tests above would pass vacuously if the planted content were missing."""
    assert SECRET in (memory.stores / "secret" / "s.txt").read_text()
    assert (memory.stores / "notes" / "leak.md").read_text().startswith(SECRET)
