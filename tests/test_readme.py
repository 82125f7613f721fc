"""README.md and docs/ run as written: every shell block, in order, does what the text
around it says (tests/readme_blocks.py reads the blocks and what their comments promise,
document after document in the order of its ``DOCUMENTS``), and every relative link of
theirs leads to a file (and heading) that exists.

The demo's blocks run on a fresh ``memfs serve --demo`` started the way the README
starts it (as root, through sudo, by a developer who then works "in another terminal"
as themself): a real user made for the test, allowed sudo like such a developer. The
personal-mode blocks run as another real user, no sudo, who starts
``memfs serve --personal`` themself. Each walk-through has a mount and a network
namespace of its own, so the demo's fixed places (``/memory``, ``/run/memfs``,
``/var/lib/memfs-demo``, port 7800) and ``/tmp`` are the test's alone: a demo running on
this machine is not touched, and the README's commands may use them as a reader would.
The test's own files (the users' homes, the scripts, their results) are in /var/tmp.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.test_personal_user import User, real_user
from tests.readme_blocks import (
    DOCUMENTS,
    Block,
    Command,
    all_blocks,
    blocks,
    command,
    on_disk,
    trailing_comment,
)
from tests.support import REPO, public_tmpdir, scaled

README = REPO / "README.md"
DEMO_PLACES = (Path("/memory"), Path("/run/memfs"), Path("/var/lib/memfs-demo"))
WORK = "/var/tmp"  # outside /tmp, which the namespaces replace


# -- the parser ----------------------------------------------------------------------------

def test_a_trailing_comment_is_found_outside_quotes_only() -> None:
    assert trailing_comment("memfs cat a.md   # exit 5: no such file") == "exit 5: no such file"
    assert trailing_comment("sed -e 's/#x/y/' f") is None
    assert trailing_comment('echo "a # b" # prints a # b') == "prints a # b"
    assert trailing_comment("echo a#b") is None


def test_a_command_states_its_exit_status_and_output() -> None:
    assert command(3, "memfs task claim x   # exit 3: lease held by demo").exit == 3
    assert command(3, "memfs cat a").exit == 0
    printed = command(4, "curl -s -w '%{http_code}\\n' $F   # prints 412: changed since")
    assert (printed.exit, printed.prints) == (0, "412")


def test_blocks_carry_their_markers_and_join_continued_lines() -> None:
    text = "\n".join([
        "intro", "```sh", "# a comment", "a one", "b two \\", "   --more", "```",
        "<!-- readme-test: skip (needs a cluster) -->", "```sh", "gluster x", "```",
        "```toml", "x = 1", "```",
        "<!-- readme-test: personal, daemon -->", "```sh", "memfs serve --personal", "```",
    ])
    found = blocks(text)
    assert [(b.line, b.where, b.why) for b in found] == [
        (2, "demo", ""), (9, "skip", "needs a cluster"), (16, "personal-daemon", "")]
    assert found[0].commands == (Command(4, "a one"), Command(5, "b two \\\n   --more"))
    with pytest.raises(ValueError, match="unknown marker"):
        blocks("<!-- readme-test: sometimes -->\n```sh\nx\n```")


def test_the_readme_and_docs_mark_every_block_they_do_not_run() -> None:
    found = all_blocks()
    assert [(b.doc, b.line) for b in found if b.where == "skip" and not b.why] == []
    assert sum(1 for b in found if b.where == "demo") >= 4
    assert [b.where for b in found].count("personal-daemon") == 1
    in_readme = blocks(README.read_text())
    assert [b.where for b in in_readme].count("personal-daemon") == 1  # the first screen's
    assert sum(1 for b in in_readme if b.where == "demo") >= 2


def test_every_document_is_walked_through() -> None:
    """No page of docs/ escapes the walk-throughs: DOCUMENTS lists each, once."""
    assert len(set(DOCUMENTS)) == len(DOCUMENTS)
    assert set(DOCUMENTS) == on_disk()


def test_the_readme_fits_on_a_few_screens() -> None:
    assert len(README.read_text().splitlines()) <= 250


LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (outside code fences)."""
    found, fenced = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_every_relative_link_leads_to_what_exists() -> None:
    broken = []
    for doc in DOCUMENTS:
        source = REPO / doc
        for target in LINK.findall(source.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (source.parent / path).resolve() if path else source
            if not dest.exists():
                broken.append(f"{doc}: {target}")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text())):
                broken.append(f"{doc}: {target} (no such heading)")
    assert broken == []


def test_the_link_check_can_fail() -> None:
    assert LINK.findall("see [a](docs/x.md#y) and [b](https://e.org)") == \
        ["docs/x.md#y", "https://e.org"]
    assert anchors("# One developer, several agents\n```\n# not a heading\n```\n## Recall") \
        == {"one-developer-several-agents", "recall"}


# -- running them -----------------------------------------------------------------------------

# Before a command that asks recall, the script waits as a reader who was told "busy:
# ... retry shortly" would: until the changes before it are indexed. On a fast machine
# the first probe answers; under emulation indexing a few changes outlasts a recall's
# own wait (30 s).
RECALL_ASKED = re.compile(r"\bmemfs recall\b|/v1/search\b")
CAUGHT_UP = f"""for _ in $(seq {int(scaled(60))}); do
    memfs recall memfs 2>&1 | grep -q '^memfs: busy' || break
    sleep 1
done"""


def script(commands: list[Command], results: Path) -> str:
    """A bash script running ``commands`` in order in one shell (variables carry over),
    each one's output to ``results/N.out`` and its status to ``results/N.rc``."""
    lines = ["set -o pipefail"]
    for index, cmd in enumerate(commands):
        out = shlex.quote(str(results / f"{index}.out"))
        rc = shlex.quote(str(results / f"{index}.rc"))
        if RECALL_ASKED.search(cmd.text):
            lines.append(CAUGHT_UP)
        lines.append(f"{{\n{cmd.text}\n}} >{out} 2>&1 </dev/null; echo $? >{rc}")
    return "\n".join(lines) + "\n"


def outcomes(commands: list[Command], results: Path) -> list[str]:
    """What differs from what the documents say, one line each (their line numbers)."""
    wrong = []
    for index, cmd in enumerate(commands):
        rc_file = results / f"{index}.rc"
        if not rc_file.exists():
            wrong.append(f"{cmd.doc} line {cmd.line}: never ran: {cmd.text!r}")
            continue
        rc = int(rc_file.read_text())
        out = (results / f"{index}.out").read_text(errors="replace")
        if rc != cmd.exit:
            wrong.append(f"{cmd.doc} line {cmd.line}: exit {rc}, it says {cmd.exit}: "
                         f"{cmd.text!r}\n"
                         f"{out[-2000:]}")
        elif cmd.prints is not None and cmd.prints not in out:
            wrong.append(f"{cmd.doc} line {cmd.line}: output lacks {cmd.prints!r}: "
                         f"{cmd.text!r}\n"
                         f"{out[-2000:]}")
    return wrong


@contextlib.contextmanager
def sudoer(user: User) -> Iterator[None]:
    """``user`` may use sudo without a password, as a developer on their machine."""
    rule = Path(f"/etc/sudoers.d/{user.name}")
    rule.write_text(f"{user.name} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    rule.chmod(0o440)
    try:
        yield
    finally:
        rule.unlink()


@contextlib.contextmanager
def places() -> Iterator[list[Path]]:
    """The demo's fixed folders exist (the namespace mounts over them); those made
    here are removed afterwards."""
    made = [p for p in DEMO_PLACES if not p.exists()]
    for path in made:
        path.mkdir(parents=True)
    try:
        yield made
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                path.rmdir()


def in_namespaces(inner: str, work: Path) -> subprocess.CompletedProcess[str]:
    """Run the bash script ``inner`` as root in a new mount and network namespace, with
    loopback up and a /tmp of its own."""
    path = work / "inner.sh"
    fresh_tmp = "mount -t tmpfs -o mode=1777 tmpfs /tmp\n"
    if REPO.is_relative_to("/tmp"):  # a clone in /tmp (CI's): seen through the new /tmp
        fresh_tmp = (f"mount --bind /tmp /mnt\n{fresh_tmp}mkdir -p {REPO}\n"
                     f"mount --bind /mnt/{REPO.relative_to('/tmp')} {REPO}\n")
    path.write_text(f"set -u\nip link set lo up\n{fresh_tmp}{inner}")
    return subprocess.run(["unshare", "--mount", "--net", "--propagation", "private",
                           "bash", str(path)], capture_output=True, text=True,
                          timeout=scaled(600), cwd=work)


def user_shell(user: User, script_path: Path, work: Path) -> str:
    """The command line that runs ``script_path`` as ``user`` in ``work`` with a
    login's environment and ``memfs`` on its PATH."""
    env = {**user.env, "PATH": f"{REPO / '.venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin"}
    env.pop("PYTHONPATH")
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"cd {shlex.quote(str(work))} && runuser -u {user.name} -- env -i {assignments} "
            f"bash {shlex.quote(str(script_path))}")


def walk_through(where: str, user: User, work: Path) -> tuple[list[Command], Path]:
    commands = [c for b in all_blocks() if b.where == where for c in b.commands]
    results = work / f"{where}-results"
    results.mkdir()
    shutil.chown(results, user.uid, user.gid)
    path = work / f"{where}.sh"
    path.write_text(script(commands, results))
    return commands, path


def _text(log: Path) -> str:
    return log.read_text() if log.exists() else f"({log} was not written)"


@pytest.mark.slow
def test_the_demo_walk_through_runs_as_written() -> None:
    with real_user(WORK) as user, sudoer(user), places():
        work = public_tmpdir("memfs-readme-", WORK)
        shutil.chown(work, user.uid, user.gid)
        root = public_tmpdir("memfs-readme-root-", WORK)
        commands, path = walk_through("demo", user, work)
        log = work / "demo.log"
        inner = f"""mount -t tmpfs -o mode=0755 tmpfs /run/memfs
mount --bind {root} /var/lib/memfs-demo
SUDO_UID={user.uid} SUDO_GID={user.gid} SUDO_USER={user.name} \\
    {REPO}/.venv/bin/memfs serve --demo >{log} 2>&1 &
daemon=$!
for _ in $(seq {int(scaled(600))}); do
    grep -q 'Stop with Ctrl-C' {log} && break
    kill -0 $daemon 2>/dev/null || {{ echo "the demo did not start"; exit 1; }}
    sleep 0.1
done
{user_shell(user, path, work)}
kill -INT $daemon; wait $daemon
"""
        ran = in_namespaces(inner, work)
        assert ran.returncode == 0, ran.stdout + ran.stderr + _text(log)
        wrong = outcomes(commands, work / "demo-results")
        assert wrong == [], "\n".join(wrong) + "\n--- the demo's log:\n" + log.read_text()


@pytest.mark.slow
def test_the_personal_walk_through_runs_as_written() -> None:
    with real_user(WORK) as user:
        work = public_tmpdir("memfs-readme-", WORK)
        shutil.chown(work, user.uid, user.gid)
        daemon_block: Block = next(b for b in all_blocks() if b.where == "personal-daemon")
        (serve,) = daemon_block.commands
        serve_script = work / "serve.sh"
        log = work / "personal.log"
        # the redirection first: the README line ends with a comment
        serve_script.write_text(f"exec >{log} 2>&1\nexec {serve.text}\n")
        commands, path = walk_through("personal", user, work)
        inner = f"""{user_shell(user, serve_script, work)} &
daemon=$!
for _ in $(seq {int(scaled(600))}); do
    grep -q 'Stop with Ctrl-C' {log} 2>/dev/null && break
    kill -0 $daemon 2>/dev/null || {{ echo "the personal daemon did not start"; exit 1; }}
    sleep 0.1
done
{user_shell(user, path, work)}
pkill -INT -u {user.uid} -f 'memfs serve' ; wait $daemon
"""
        ran = in_namespaces(inner, work)
        assert ran.returncode == 0, ran.stdout + ran.stderr + _text(log)
        wrong = outcomes(commands, work / "personal-results")
        assert wrong == [], "\n".join(wrong) + "\n--- the daemon's log:\n" + log.read_text()
        assert os.path.exists(user.home / ".local" / "share" / "memfs")
