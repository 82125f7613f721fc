"""A daemon (no mount) with history on `notes` and `ops`, and a store without history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, public_tmpdir, standard_config


def history_config(base: Path) -> dict[str, Any]:
    config = standard_config(base)
    config["stores"]["scratch"] = {"history": False}
    config["agents"]["alice"]["stores"]["scratch"] = "read_write"
    config["agents"]["alice"]["email"] = "alice@example.org"
    return config


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(history_config(public_tmpdir("memfs-history-"))) as running:
        yield running


@pytest.fixture
def root(daemon: Daemon) -> Path:
    return Path(daemon.config["root"])
