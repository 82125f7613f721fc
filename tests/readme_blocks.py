"""The shell blocks of README.md and every page of docs/ as commands with what the text
says they do: the parser behind tests/test_readme.py (pure, no I/O but reading them).

:data:`DOCUMENTS` lists README.md and every docs/**/*.md in the order the walk-throughs
run their blocks (README's first; a page whose blocks build on another's after it), and
tests/test_readme.py checks that no page is missing from it.

A ```` ```sh ```` block is run unless a marker comment right before its fence says
otherwise: ``<!-- readme-test: skip (WHY) -->`` (not run, with the reason), or
``<!-- readme-test: personal -->`` (run in the personal-mode walk-through, as a plain
user, instead of on the demo); ``<!-- readme-test: personal, daemon -->`` marks the
block that starts that daemon (run in the background). A command is one line, or
several joined by a trailing backslash. Its trailing comment may state what it does:

* ``# exit N`` (then anything): it exits with status N (otherwise 0 is expected);
* ``# prints TEXT`` (up to a ``:`` or the end): its output holds TEXT.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Reading order, which is also the demo's walk-through order: the CLI's `grep --json`,
# history's diff and restore of the tour's append, then HTTP's edit of the tour's edit,
# then recall.
DOCUMENTS = (
    "README.md",
    "docs/operate/install.md",
    "docs/operate/personal.md",
    "docs/operate/privilege.md",
    "docs/operate/kernels.md",
    "docs/operate/several-hosts.md",
    "docs/operate/backups.md",
    "docs/operate/vagrant.md",
    "docs/reference/config.md",
    "docs/reference/cli.md",
    "docs/reference/errors.md",
    "docs/reference/mount.md",
    "docs/reference/history.md",
    "docs/reference/memory.md",
    "docs/reference/http.md",
    "docs/reference/web-view.md",
    "docs/reference/mcp.md",
    "docs/reference/protocol.md",
    "docs/reference/limits.md",
    "docs/design/architecture.md",
    "docs/design/crash-safety.md",
    "docs/design/group-commit.md",
    "docs/design/recall.md",
    "docs/design/speed-notes.md",
    "docs/speed.md",
)

MARKER = re.compile(r"<!--\s*readme-test:\s*(?P<what>[^>]*?)\s*-->")
EXIT = re.compile(r"^exit (\d+)\b")
PRINTS = re.compile(r"^prints (?P<text>[^:]+?)\s*(?::|$)")


@dataclass(frozen=True)
class Command:
    line: int  # the line number of its first line in its document
    text: str  # as bash is given it (continuations joined by backslash-newline)
    exit: int = 0
    prints: str | None = None
    doc: str = "README.md"  # the document it is in, relative to the repository


@dataclass(frozen=True)
class Block:
    line: int  # the fence's line number
    where: str  # "demo", "personal", "personal-daemon" or "skip"
    why: str
    commands: tuple[Command, ...]
    doc: str = "README.md"


def on_disk(repo: Path = REPO) -> set[str]:
    """README.md and every docs/**/*.md there is, relative to ``repo``."""
    return {"README.md"} | {str(p.relative_to(repo)) for p in (repo / "docs").rglob("*.md")}


def all_blocks(repo: Path = REPO) -> list[Block]:
    """Every block of every document of :data:`DOCUMENTS`, in that order, each (and each
    of its commands) naming its document."""
    found = []
    for doc in DOCUMENTS:
        for block in blocks((repo / doc).read_text(), doc):
            found.append(dataclasses.replace(
                block, doc=doc,
                commands=tuple(dataclasses.replace(c, doc=doc) for c in block.commands)))
    return found


def trailing_comment(line: str) -> str | None:
    """The comment at the end of a shell line (outside quotes), without its ``#``."""
    quote = None
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[index + 1:].strip()
    return None


def command(line: int, text: str) -> Command:
    """A command and what its last line's comment says of it."""
    comment = trailing_comment(text.rsplit("\n", 1)[-1]) or ""
    exit_match = EXIT.match(comment)
    prints = PRINTS.match(comment)
    return Command(line, text, int(exit_match.group(1)) if exit_match else 0,
                   prints.group("text") if prints else None)


def blocks(readme: str, doc: str = "README.md") -> list[Block]:
    """Every ```` ```sh ```` block of ``readme`` (the text of ``doc``) in order, with its
    marker."""
    found: list[Block] = []
    lines = readme.splitlines()
    index = 0
    while index < len(lines):
        fence = lines[index].strip()
        if not fence.startswith("```"):
            index += 1
            continue
        language = fence[3:].strip()
        start = index
        index += 1
        body: list[tuple[int, str]] = []
        while index < len(lines) and lines[index].strip() != "```":
            body.append((index + 1, lines[index]))
            index += 1
        index += 1
        if language != "sh":
            continue
        where, why = "demo", ""
        marker = MARKER.fullmatch(lines[start - 1].strip()) if start > 0 else None
        if marker is not None:
            what = marker.group("what")
            if what.startswith("skip"):
                where, why = "skip", what[4:].strip(" ()")
            elif what == "personal":
                where = "personal"
            elif what == "personal, daemon":
                where = "personal-daemon"
            else:
                raise ValueError(f"{doc} line {start}: unknown marker {what!r}")
        found.append(Block(start + 1, where, why, tuple(_commands(body))))
    return found


def _commands(body: list[tuple[int, str]]) -> list[Command]:
    commands: list[Command] = []
    pending: list[str] = []
    first = 0
    for number, text in body:
        if not pending:
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            first = number
        pending.append(text)
        if text.rstrip().endswith("\\"):
            continue
        commands.append(command(first, "\n".join(pending)))
        pending = []
    if pending:
        commands.append(command(first, "\n".join(pending)))
    return commands
