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


def group_of(nodeid: str) -> str:
    """The unit of work a parallel run (pytest-xdist) hands one worker whole: the
    test's module, whose tests may share a module-scoped daemon; the whole multi-host
    package (one GlusterFS cluster of fixed names, brought up once for its tests)."""
    module = nodeid.split("::", 1)[0]
    return "tests/cluster" if module.startswith("tests/cluster/") else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n N`` (scripts/test), whatever ``--dist`` says: each worker is given whole
    groups (``group_of``), in the order collected (the slow ones first), never split."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # (its default: the groups of most tests first)
    return ByGroup(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest's per-test timeout (pyproject) stretched by MEMFS_TEST_SLOWDOWN. The groups
    (``group_of``) that hold a ``slow`` test first, each as collected: in a parallel run
    the long ones start at once, beside the rest, not last and alone."""
    if SLOWDOWN > 1:
        timeout = float(config.getini("timeout") or 0) * SLOWDOWN
        for item in items:
            if timeout and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(timeout))
    slow = {group_of(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: group_of(item.nodeid) not in slow)  # stable


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
