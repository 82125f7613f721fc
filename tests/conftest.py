from __future__ import annotations

import importlib
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


def is_slow(nodeid: str) -> bool:
    """The test ``nodeid`` is marked ``slow`` (read from its function, class or module,
    imported: pytest-xdist's controller, which schedules, collects no items)."""
    path, *names = nodeid.split("::")
    target: Any = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    marks = list(getattr(target, "pytestmark", []))
    for name in names:
        target = getattr(target, name.split("[", 1)[0], None)
        marks += getattr(target, "pytestmark", [])
    return any(mark.name == "slow" for mark in marks)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n N`` (scripts/test), whatever ``--dist`` says: each worker is given whole
    groups (``group_of``), in the order collected (the slow ones first), but a ``slow``
    test alone (with its module's module-scoped fixtures of its own, on its worker):
    a module of several long crash tests would be one long run on one worker."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = group_of(nodeid)
            return nodeid if group != "tests/cluster" and is_slow(nodeid) else group

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
