from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.support
from tests.support import CREATED_DIRS, SLOWDOWN, Daemon, public_tmpdir, standard_config

# Daemons whose config names no recall model are lexical (see tests.support).
tests.support.DEFAULT_RECALL = {"model": "none"}


def group_of(item: pytest.Item) -> str:
    """The unit of work a parallel run (pytest-xdist, ``--dist loadgroup``) hands one
    worker whole: the test's module, whose tests may share a module-scoped daemon; the
    whole multi-host package (one GlusterFS cluster of fixed names for all its tests)."""
    module = item.nodeid.split("::", 1)[0]
    return "tests/cluster" if module.startswith("tests/cluster/") else module


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest's per-test timeout (pyproject) stretched by MEMFS_TEST_SLOWDOWN. Each test
    in its group (``group_of``), and the groups that hold a ``slow`` test first: in a
    parallel run the long ones start at once, beside the rest, not last and alone."""
    if SLOWDOWN > 1:
        timeout = float(config.getini("timeout") or 0) * SLOWDOWN
        for item in items:
            if timeout and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(timeout))
    slow: set[str] = set()
    for item in items:
        group = group_of(item)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
        if item.get_closest_marker("slow") is not None:
            slow.add(group)
    items.sort(key=lambda item: group_of(item) not in slow)  # stable: else as collected


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the scratch directories of module-scoped daemons (stopped by now)."""
    for path in CREATED_DIRS:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def base() -> Iterator[Path]:
    """A scratch directory every test uid can traverse."""
    path = public_tmpdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def config(base: Path) -> dict[str, Any]:
    return standard_config(base)


@pytest.fixture
def daemon(config: dict[str, Any]) -> Iterator[Daemon]:
    """A running daemon serving the control socket (no mount)."""
    with Daemon(config) as running:
        yield running
