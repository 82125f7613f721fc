"""A store's generation counter (memfs/store/write/generation.py) on a real file with real
xattrs: each daemon tells other daemons' changes from its own, whatever the order."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.store.write.generation import Generation, read


@pytest.fixture
def lock_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "notes.lock"
    path.touch()
    yield path


def opened(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CLOEXEC)


def test_own_changes_are_not_foreign_and_others_are(lock_file: Path) -> None:
    fds = [opened(lock_file), opened(lock_file)]
    try:
        mine, theirs = Generation(fds[0]), Generation(fds[1])
        assert not mine.changed_elsewhere() and not theirs.changed_elsewhere()
        mine.bump()
        mine.bump()
        assert read(fds[1]) == 2
        assert not mine.changed_elsewhere()
        assert theirs.changed_elsewhere()
        assert not theirs.changed_elsewhere()  # noticed once
        # Theirs lands between two of mine, all before my next poll: still noticed.
        mine.bump()
        theirs.bump()
        mine.bump()
        assert mine.changed_elsewhere()
        assert theirs.changed_elsewhere()
        assert not mine.changed_elsewhere() and not theirs.changed_elsewhere()
    finally:
        for fd in fds:
            os.close(fd)


def test_a_counter_that_goes_back_counts_as_a_change(lock_file: Path) -> None:
    fd = opened(lock_file)
    try:
        generation = Generation(fd)
        generation.bump()
        assert not generation.changed_elsewhere()
        os.removexattr(fd, "user.memfs.generation")  # e.g. the lock file was recreated
        assert generation.changed_elsewhere()
    finally:
        os.close(fd)
