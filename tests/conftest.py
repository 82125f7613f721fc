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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest's per-test timeout (pyproject) stretched by MEMFS_TEST_SLOWDOWN."""
    if SLOWDOWN > 1:
        timeout = float(config.getini("timeout") or 0) * SLOWDOWN
        for item in items:
            if timeout and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(timeout))


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
