"""The layer rules (docs/design/architecture.md), written as import-linter contracts in
pyproject.toml ([tool.importlinter]): the contracts are kept by the code as it is, and
an upward import or a cycle planted in a copy of the code breaks them, typing-only
imports (under ``if TYPE_CHECKING:``) as well as run-time ones. And no code imports the
folders control/ and jail/ by their old top-level names (scripts/rename_imports.py
--check): they install as memfs.control and memfs.jail only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import REPO

LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")
TYPING_ONLY = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    {}\n"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports run on the code under ``root`` (its memfs/, control/, jail/ and
    pyproject.toml), that code first on the path."""
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})


def verdicts(output: str) -> dict[str, str]:
    """Each contract's verdict, KEPT or BROKEN, by its id in pyproject.toml."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    ids = {contract["name"]: contract["id"] for contract in contracts["contracts"]}
    found = {}
    for line in output.splitlines():
        name, _, verdict = line.rpartition(" ")
        if verdict in ("KEPT", "BROKEN"):
            found[ids[name]] = verdict
    return found


def copy_of_the_code(dest: Path) -> Path:
    """memfs/ (with its own symlinks control and jail: the checkout's may be copies, as
    rsync makes them), control/, jail/, pyproject.toml."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "memfs", dest / "memfs", symlinks=True,
                    ignore=lambda folder, names: [*skip(folder, names), *(
                        ("control", "jail") if Path(folder) == REPO / "memfs" else ())])
    for name in ("control", "jail"):
        shutil.copytree(REPO / name, dest / name, ignore=skip)
        (dest / "memfs" / name).symlink_to(Path("..") / name)
    shutil.copy2(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_contracts_are_kept() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert verdicts(done.stdout) == {"layers": "KEPT", "acyclic": "KEPT"}, done.stdout


@pytest.mark.parametrize(("planted_in", "line"), [
    # the core library imports the ways in: at run time, and for typing only
    ("memfs/store/planted_up.py", "from memfs.control.ops import registry"),
    ("memfs/store/planted_up.py", TYPING_ONLY.format("from memfs.cli import main")),
    # the ways in import the program's composition root (typing only)
    ("control/ops/planted_up.py", TYPING_ONLY.format("from memfs.daemon import serve")),
    # the jail, at the bottom, imports the core
    ("jail/planted_up.py", "import memfs.store.engine"),
    # a new top-level module nobody placed in a layer
    ("memfs/planted_up.py", ""),
])
def test_an_upward_import_breaks_the_layers(tmp_path: Path, planted_in: str,
                                            line: str) -> None:
    root = copy_of_the_code(tmp_path)
    (root / planted_in).write_text(f'"""Planted by tests/test_layers.py."""\n{line}\n')
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdicts(done.stdout)["layers"] == "BROKEN", done.stdout  # (a cycle too, maybe)
    assert "planted_up" in done.stdout, done.stdout


@pytest.mark.parametrize("typing_only", [False, True])
def test_a_cycle_breaks_the_acyclic_contract(tmp_path: Path, typing_only: bool) -> None:
    """Two sibling modules of control.http importing each other (as files.py and
    recall.py once did, for typing only)."""
    root = copy_of_the_code(tmp_path)
    for me, other in (("planted_a", "planted_b"), ("planted_b", "planted_a")):
        line = f"from memfs.control.http import {other}"
        (root / "control" / "http" / f"{me}.py").write_text(
            TYPING_ONLY.format(line) if typing_only else line + "\n")
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdicts(done.stdout) == {"layers": "KEPT", "acyclic": "BROKEN"}, done.stdout
    assert "in memfs.control.http." in done.stdout and ".planted_b -> .planted_a" in \
        done.stdout, done.stdout


CYCLES = """
import grimp
graph = grimp.build_graph("memfs", cache_dir=None)
for importer in sorted(graph.modules):
    for imported in sorted(graph.find_modules_directly_imported_by(importer)):
        if graph.find_shortest_chain(importer=imported, imported=importer):
            print(importer, "->", imported)
"""


def import_cycles(root: Path) -> list[str]:
    """Every import of the code under ``root`` that lies on a cycle, between any two
    modules (a package's __init__ and its own modules too, which acyclic_siblings does
    not compare), typing-only imports included: grimp's graph, as lint-imports builds it."""
    done = subprocess.run([sys.executable, "-c", CYCLES], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_no_import_lies_on_a_cycle(tmp_path: Path) -> None:
    assert import_cycles(REPO) == []
    # a package's __init__ and one of its modules, importing each other (typing only)
    root = copy_of_the_code(tmp_path)
    (root / "memfs" / "fuse" / "planted.py").write_text(
        TYPING_ONLY.format("from memfs.fuse import Planted"))
    with (root / "memfs" / "fuse" / "__init__.py").open("a") as init:
        init.write("\nfrom memfs.fuse.planted import TYPE_CHECKING as Planted  # noqa\n")
    assert import_cycles(root) == ["memfs.fuse -> memfs.fuse.planted",
                                   "memfs.fuse.planted -> memfs.fuse"]


def test_the_architecture_page_draws_the_contracts_layers() -> None:
    """docs/design/architecture.md's picture has one line per layer, top to bottom, as
    the contract lists them."""
    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contract["contracts"] if c["id"] == "layers"]
    page = (REPO / "docs" / "design" / "architecture.md").read_text()
    picture = page.split("## Layers", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    drawn = [line.split("   ")[0].strip() for line in picture.splitlines()]
    assert drawn == [" | ".join(f"memfs.{name.strip()}" for name in layer.split("|"))
                     for layer in layers]


def test_no_code_imports_control_or_jail_by_their_old_names() -> None:
    done = subprocess.run([sys.executable, "scripts/rename_imports.py", "--check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, "run scripts/rename_imports.py:\n" + done.stdout
