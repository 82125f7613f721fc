"""Fixtures of the jail tests: a real sed root, real stores, a real jail (started as root:
it runs as the jail's own user, `JailSettings.uid`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Import the package from this checkout even if an editable install maps it elsewhere.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from memfs.jail import Jail, JailSettings  # noqa: E402
from memfs.jail.settings import service_ids  # noqa: E402

RG = Path(sys.executable).parent / "rg"
if not RG.exists():
    RG = Path(shutil.which("rg") or "/usr/bin/rg")

SECRET = "TOP-SECRET-IN-B"  # the same text is spelled out in test_store_isolation.py


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="jail tests need root (they start the jail as root, "
                                       "which runs it as its own user, and chown fixtures)")
        for item in items:
            if "tests/jail/" in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def rg_path() -> Path:
    return RG


@pytest.fixture(scope="session")
def sed_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sed root built by the real script."""
    root = tmp_path_factory.mktemp("sedroot") / "sed-jail"
    subprocess.run([str(REPO / "scripts" / "build-sed-jail"), str(root)], check=True)
    return root


def settings(sed_root: Path, **overrides: object) -> JailSettings:
    # Roomy limits: they only bound ordinary calls (8 at once in test_concurrent_calls),
    # which must not trip them on a slow machine; the tests of a limit set their own.
    values: dict[str, object] = {
        "rg_path": RG,
        "sed_root": sed_root,
        "timeout_seconds": 60,
        "cpu_seconds": 60,
    }
    values.update(overrides)
    return JailSettings.model_validate(values)


@pytest.fixture(scope="session")
def make_settings(sed_root: Path) -> Callable[..., JailSettings]:
    """``make_settings(sed_root=..., timeout_seconds=...)``: settings for a test jail."""

    def make(**overrides: object) -> JailSettings:
        root = overrides.pop("sed_root", sed_root)
        assert isinstance(root, Path)
        return settings(root, **overrides)

    return make


@pytest.fixture(scope="session")
def jail(sed_root: Path) -> Iterator[Jail]:
    with Jail.start(settings(sed_root)) as started:
        yield started


@pytest.fixture(scope="session")
def quick_jail(sed_root: Path) -> Iterator[Jail]:
    """A jail with tight limits, for the tests that hit them."""
    tight = settings(
        sed_root,
        timeout_seconds=1.5,
        cpu_seconds=1,
        output_limit_bytes=4096,
        sed_output_limit=64 * 1024,
    )
    with Jail.start(tight) as started:
        yield started


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    path.write_text(text)
    path.chmod(0o644)


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Stores A and B as the engine makes them (0644 files, 0755 dirs) under a 0700
    parent of the jail's uid, as ROOT is the daemon's, whose uid the tools share (so
    only the jail keeps them from the parent's other entries). A holds symlinks
    planted towards B and /etc/shadow."""
    base = tmp_path_factory.mktemp("stores")
    base.chmod(0o700)
    os.chown(base, *service_ids())
    a, b = base / "A", base / "B"
    _write(a / "notes" / "queue.md", "the payments queue is slow\nretry later\n")
    _write(a / "todo.txt", "alpha\nbeta\ngamma\n")
    _write(a / ".hidden.md", "hidden payments note\n")
    _write(b / "secret.txt", f"{SECRET}\npayments secret\n")
    (a / "link-to-b").symlink_to(b / "secret.txt")
    (a / "link-to-b-dir").symlink_to(b)
    (a / "link-to-shadow").symlink_to("/etc/shadow")
    for d in (a, b, a / "notes"):
        d.chmod(0o755)
    return {"A": a, "B": b}
