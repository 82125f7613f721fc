"""Output caps, time limits and concurrent calls."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jail import Jail, JailLimit, JailSettings


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    store = tmp_path_factory.mktemp("big") / "big"
    store.mkdir(mode=0o755)
    for i in range(20):
        (store / f"f{i:02}.txt").write_text("match this line please\n" * 2000)
    return {"big": store}


def test_huge_output_is_truncated(quick_jail: Jail, big_store: dict[str, Path]) -> None:
    limit = quick_jail.settings.output_limit_bytes
    started = time.monotonic()
    result = quick_jail.search(big_store, ["match"])
    assert time.monotonic() - started < 3
    assert result.truncated
    assert result.exit_code == 0
    body, _, note = result.output.rstrip(b"\n").rpartition(b"\n")
    assert note == f"[memfs: output truncated at {limit} bytes]".encode()
    assert len(body) <= limit
    assert all(line.startswith(b"big/f") for line in body.splitlines())


def test_output_under_the_limit_is_whole(jail: Jail, big_store: dict[str, Path]) -> None:
    result = jail.search(big_store, ["-c", "match"])
    assert not result.truncated
    assert len(result.output.splitlines()) == 20


def test_slow_search_hits_the_timeout(quick_jail: Jail, big_store: dict[str, Path]) -> None:
    """A pattern that takes rg seconds of CPU (and GBs) to compile is stopped early."""
    started = time.monotonic()
    huge = ["--regex-size-limit", "1G", "--dfa-size-limit", "1G", r"(\w|aa|.){500}{500}"]
    with pytest.raises(JailLimit):
        quick_jail.search(big_store, huge)
    assert time.monotonic() - started < 5


def test_concurrent_calls(jail: Jail, stores: dict[str, Path]) -> None:
    def one(i: int) -> bytes:
        if i % 2:
            return jail.sed([f"s/alpha/call{i}/"], b"alpha\n")
        return jail.search({"A": stores["A"]}, ["-c", "alpha", "A/todo.txt"]).output

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(40)))
    for i, out in enumerate(results):
        assert out == (f"call{i}\n".encode() if i % 2 else b"1\n")


def test_memory_limit(make_settings: Callable[..., JailSettings], tmp_path: Path) -> None:
    store = tmp_path / "s"
    store.mkdir()
    (store / "f.txt").write_text("aaaa\n")
    with Jail.start(make_settings(memory_bytes=64 << 20)) as small:
        with pytest.raises(JailLimit, match="memory"):
            small.sed(["H;$!d;x;s/a/bb/g"], b"aaaaaaaa\n" * 4_000_000)
        huge = ["--regex-size-limit", "1G", "--dfa-size-limit", "1G", r"(\w|aa|.){500}{500}"]
        with pytest.raises(JailLimit, match="memory"):
            small.search({"s": store}, huge)


def test_no_leak_of_fds_or_processes(jail: Jail, stores: dict[str, Path]) -> None:
    launcher = jail._process.pid

    def fds() -> int:
        # The launcher replies first and closes the call's fds right after: let it.
        time.sleep(0.2)
        return len(os.listdir(f"/proc/{launcher}/fd"))

    jail.sed(["p"], b"")
    before = fds()
    for _ in range(30):
        jail.sed(["s/a/b/"], b"a\n")
        jail.search(stores, ["-c", "alpha"])
    assert fds() == before
    # Only the spare is left: one child forked ahead of the next call, still root,
    # waiting (it has not applied any policy yet).
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    assert len(children) == 1
    status = Path(f"/proc/{children[0]}/status").read_text()
    assert "\nUid:\t0\t0\t0\t0\n" in status
    assert Path(f"/proc/{children[0]}/task/{children[0]}/children").read_text() == ""


def test_a_dead_spare_is_replaced(jail: Jail, stores: dict[str, Path]) -> None:
    launcher = jail._process.pid
    jail.sed(["p"], b"")
    time.sleep(0.2)
    (spare,) = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    os.kill(int(spare), 9)
    time.sleep(0.2)
    assert jail.sed(["s/a/b/"], b"a\n") == b"b\n"
    assert jail.search(stores, ["-c", "alpha", "A/todo.txt"]).output == b"1\n"
    assert jail.launcher_pid == launcher
