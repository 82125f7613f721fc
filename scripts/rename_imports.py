#!/usr/bin/env python3
"""The mechanical half of installing `control` and `jail` as `memfs.control` and
`memfs.jail` (issue 33): the folders stay at the top of the repository, `memfs/control`
and `memfs/jail` are symlinks to them, and every name that imports them says `memfs.`.

Usage: scripts/rename_imports.py [--check] [FILE...]

Without FILEs it reads every Python file (``*.py``, and scripts whose first line names
python) git tracks or would track (new files not ignored), but for itself and any file
holding the line ``# rename_imports: skip``. In each it rewrites code only:

* import statements: ``from control.x import y``, ``import jail.errors``,
  ``import control.a as b`` -> ``memfs.control...``/``memfs.jail...`` (relative imports
  and ``memfs.``-prefixed ones are left alone);
* in a file that binds the bare name by ``import jail.errors`` (no ``as``), that name's
  dotted uses in its code (``jail.errors.X`` -> ``memfs.jail.errors.X``);
* in string literals: a dotted module path whose first two parts name a module that
  exists under control/ or jail/ (``"control.ops.storage"``, ``"-m", "jail.launcher"``,
  ``"control.http.app.time"`` for monkeypatch, ``"from jail.launcher import main"``),
  and ``from control import x`` in a string of Python source.

Never: ``"control.sock"`` or ``"jail.uid"`` (no such module), the expressions of an
f-string, other code (a variable named ``jail`` keeps its ``jail.settings``), a name
already preceded by a dot, a slash or a word character (``memfs.control.x``,
``tests.control.x``, ``control/http/app.py``), comments and docstrings (prose names the
folder's modules as the folders are named: ``jail.kernel`` is jail/kernel.py).

Then it sorts the imports of the files it changed with ruff (``--select I --fix``), as
`memfs.jail` now sorts among `memfs.*`. It is idempotent: a second run changes nothing.
``--check`` changes nothing and exits 1, naming the files it would change.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOPS = ("control", "jail")
SKIP_MARK = "# rename_imports: skip"
_STATEMENT_START = {None, "NEWLINE", ";", ":"}
_NOISE = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)


def known_children(repo: Path = REPO) -> dict[str, set[str]]:
    """For each of control/ and jail/, the names of its modules and subpackages."""
    known: dict[str, set[str]] = {}
    for top in TOPS:
        folder = repo / top
        names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        names |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        known[top] = names
    return known


def _dotted_pattern(known: dict[str, set[str]]) -> re.Pattern[str]:
    alternatives = "|".join(f"{top}\\.(?:{'|'.join(sorted(known[top]))})" for top in TOPS
                            if known[top])
    # a dotted path to a module of theirs, or Python source's `from control import x`
    return re.compile(f"(?<![\\w./\\-])(?:{alternatives})(?![\\w])"
                      f"|(?<=\\bfrom )(?:{'|'.join(TOPS)})(?= import )")


def _fstring_mask(text: str) -> list[bool]:
    """For the source text of an f-string token: True where a character is literal text
    (outside the ``{...}`` expressions)."""
    prefix_end = 0
    while prefix_end < len(text) and text[prefix_end] not in "'\"":
        prefix_end += 1
    if "f" not in text[:prefix_end].lower():
        return [True] * len(text)
    mask = [True] * len(text)
    depth, i = 0, prefix_end
    while i < len(text):
        c = text[i]
        if depth == 0 and c in "{}" and text[i + 1:i + 2] == c:
            i += 2
            continue
        if c == "{":
            depth += 1
        if depth:
            mask[i] = False
        if c == "}" and depth:
            depth -= 1
        i += 1
    return mask


def _text_edits(text: str, base: int, pattern: re.Pattern[str],
                mask: list[bool] | None = None) -> list[tuple[int, int, str]]:
    return [(base + m.start(), base + m.start(), "memfs.") for m in pattern.finditer(text)
            if mask is None or mask[m.start()]]


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(set(edits), reverse=True):
        text = text[:start] + new + text[end:]
    return text


def rewrite_python(text: str, known: dict[str, set[str]]) -> str:
    """Python source: import statements, the bare names they bind, and dotted module
    paths in string literals (see the module's docstring)."""
    pattern = _dotted_pattern(known)
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(pos: tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    edits: list[tuple[int, int, str]] = []
    bare: set[str] = set()  # top names bound by `import control.x` without `as`
    in_import: set[int] = set()  # indexes of the tokens of import statements
    previous: str | None = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.type in _NOISE:
            i += 1
            continue
        if tok.type == tokenize.NAME and tok.string in ("from", "import") and \
                previous in _STATEMENT_START:
            j = i
            while j < len(tokens) and tokens[j].type not in (tokenize.NEWLINE,
                                                             tokenize.ENDMARKER) \
                    and tokens[j].string != ";":
                in_import.add(j)
                j += 1
            statement = [t for t in tokens[i:j] if t.type not in (tokenize.NL,
                                                                   tokenize.COMMENT)]
            if tok.string == "from":
                module = statement[1] if len(statement) > 1 else None
                if module is not None and module.type == tokenize.NAME and \
                        module.string in TOPS:
                    edits.append((offset(module.start), offset(module.start), "memfs."))
            else:
                item_start = True
                for k, part in enumerate(statement[1:], 1):
                    if item_start and part.type == tokenize.NAME and part.string in TOPS:
                        edits.append((offset(part.start), offset(part.start), "memfs."))
                        rest = statement[k + 1:]
                        item = []
                        for r in rest:
                            if r.string == ",":
                                break
                            item.append(r.string)
                        if "as" not in item:
                            bare.add(part.string)
                    item_start = part.string in (",", "(") or (
                        part.type == tokenize.NAME and part.string == "import")
            previous = "NEWLINE"
            i = j
            continue
        previous = tokenize.tok_name[tok.type] if tok.type == tokenize.NEWLINE else tok.string
        i += 1

    significant = [t for t in tokens if t.type not in _NOISE]
    docstrings = {t.start for k, t in enumerate(significant) if t.type == tokenize.STRING
                  and (k == 0 or significant[k - 1].type == tokenize.NEWLINE)
                  and k + 1 < len(significant)
                  and significant[k + 1].type in (tokenize.NEWLINE, tokenize.ENDMARKER)}
    for index, tok in enumerate(tokens):
        if (tok.type == tokenize.STRING and tok.start not in docstrings) or \
                tokenize.tok_name[tok.type] == "FSTRING_MIDDLE":
            source = text[offset(tok.start):offset(tok.end)]
            mask = _fstring_mask(source) if tok.type == tokenize.STRING else None
            edits += _text_edits(source, offset(tok.start), pattern, mask)
        elif bare and tok.type == tokenize.NAME and tok.string in bare and \
                index not in in_import and index + 1 < len(tokens) and \
                tokens[index + 1].string == "." and \
                not (index > 0 and tokens[index - 1].string == "."):
            edits.append((offset(tok.start), offset(tok.start), "memfs."))
    return _apply(text, edits)


def candidates(repo: Path = REPO) -> list[Path]:
    """The Python files git tracks or would track (outside a git checkout, as in the
    Vagrant guest: every file but under hidden folders), but for symlinks and this
    script."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=repo, capture_output=True)
    if listed.returncode == 0:
        names = set(filter(None, listed.stdout.decode().split("\0")))
    else:
        names = set()
        for folder, dirs, files in os.walk(repo):  # symlinks to folders not followed
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            names |= {os.path.relpath(os.path.join(folder, f), repo) for f in files}
    found = []
    for name in sorted(names):
        path = repo / name
        if path.is_symlink() or not path.is_file() or path.resolve() == Path(__file__).resolve():
            continue
        first_line = path.read_bytes()[:80].split(b"\n")[0]
        if path.suffix == ".py" or (path.suffix == "" and first_line.startswith(b"#!")
                                    and b"python" in first_line):
            found.append(path)
    return found


def rewrite(path: Path, known: dict[str, set[str]]) -> str | None:
    """The new text of ``path``, or None when it stays as it is."""
    text = path.read_text()
    if SKIP_MARK in text.splitlines():
        return None
    new = rewrite_python(text, known)
    return None if new == text else new


def main(argv: list[str]) -> int:
    check = "--check" in argv
    missing = [f"memfs/{top}" for top in TOPS if not (REPO / "memfs" / top).is_dir()]
    if missing and not check:
        # ruff sorts `memfs.control` as first-party only when memfs/control resolves
        print(f"rename_imports: {' and '.join(missing)} missing: make the symlinks "
              "(memfs/control -> ../control, memfs/jail -> ../jail) first", file=sys.stderr)
        return 2
    files = [Path(a).resolve() for a in argv if a != "--check"] or candidates()
    known = known_children()
    changed = []
    for path in files:
        new = rewrite(path, known)
        if new is not None:
            changed.append(path)
            if not check:
                path.write_text(new)
    for path in changed:
        print(("would rewrite " if check else "rewrote ") + str(path.relative_to(REPO)))
    if check:
        return 1 if changed else 0
    python_files = [str(p) for p in changed]
    if python_files:
        ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or \
            shutil.which("ruff")
        if ruff is None:
            print("rename_imports: ruff not found: imports left unsorted", file=sys.stderr)
            return 1
        subprocess.run([ruff, "check", "--quiet", "--select", "I", "--fix", "--exit-zero",
                        *python_files], cwd=REPO, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
