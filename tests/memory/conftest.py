"""A daemon with a structured store `team` (alice, bob, dave read_write; carol read) next
to the standard stores; `team2` is a second structured store only alice has."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, public_tmpdir, standard_config

UID_D = 2004


def memory_config(base: Path) -> dict[str, Any]:
    config = standard_config(base)
    config["stores"]["team"] = {"structured": True}
    config["stores"]["team2"] = {"structured": True}
    config["agents"]["alice"]["stores"].update(team="read_write", team2="read_write")
    config["agents"]["bob"]["stores"]["team"] = "read_write"
    config["agents"]["carol"]["stores"]["team"] = "read"
    config["agents"]["dave"] = {"uid": UID_D, "stores": {"team": "read_write"}}
    return config


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(memory_config(public_tmpdir("memfs-memory-"))) as running:
        yield running


@pytest.fixture
def root(daemon: Daemon) -> Path:
    return Path(daemon.config["root"])
