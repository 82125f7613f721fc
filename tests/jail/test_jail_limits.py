"""Output caps, time limits and concurrent calls."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memfs.jail import Jail, JailError, JailLimit, JailSettings
from tests.support import scaled


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    store = tmp_path_factory.mktemp("big") / "big"
    store.mkdir(mode=0o755)
    for i in range(20):
        (store / f"f{i:02}.txt").write_text("match this line please\n" * 2000)
    return {"big": store}


@pytest.fixture(scope="module")
def capped_jail(make_settings: Callable[..., JailSettings]) -> Iterator[Jail]:
    """A tight output cap under roomy time limits: the cap is what stops rg, however
    slow the machine."""
    with Jail.start(make_settings(output_limit_bytes=4096, timeout_seconds=240,
                                  cpu_seconds=240)) as started:
        yield started


def test_huge_output_is_truncated(capped_jail: Jail, big_store: dict[str, Path]) -> None:
    limit = capped_jail.settings.output_limit_bytes
    result = capped_jail.search(big_store, ["match"])
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


def test_structured_matches_are_cut_at_the_limit_of_what_is_returned(
        capped_jail: Jail, big_store: dict[str, Path]) -> None:
    """rg's own JSON is bigger than the matches: the limit counts the matches as
    returned (compact UTF-8 JSON, one more byte each), and they fill it."""
    limit = capped_jail.settings.output_limit_bytes
    result = capped_jail.search(big_store, ["match"], structured=True)
    assert result.truncated and result.exit_code == 0 and result.matches
    sizes = [len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode()) + 1
             for m in result.matches]
    assert limit - max(sizes) < sum(sizes) <= limit
    assert all(m["path"].startswith("big/f") and m["text"] == "match this line please"
               for m in result.matches)


def test_structured_matches_under_the_limit_are_whole(
        jail: Jail, big_store: dict[str, Path]) -> None:
    result = jail.search(big_store, ["-m", "2", "match"], structured=True)
    assert not result.truncated and result.matches is not None
    assert len(result.matches) == 40 and {m["line"] for m in result.matches} == {1, 2}


def test_slow_search_hits_the_timeout(quick_jail: Jail, big_store: dict[str, Path]) -> None:
    """A pattern that takes rg seconds of CPU (and GBs) to compile is stopped early."""
    started = time.monotonic()
    huge = ["--regex-size-limit", "1G", "--dfa-size-limit", "1G", r"(\w|aa|.){500}{500}"]
    with pytest.raises(JailLimit):
        quick_jail.search(big_store, huge)
    assert time.monotonic() - started < quick_jail.settings.timeout_seconds + scaled(3.5)


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
    """The memory limit trips, not the time or CPU limit, however slow the machine:
    those are far above what reaching 64 MiB takes (a fraction of a second here), and the
    input has long lines so that sed's per-line work stays small."""
    store = tmp_path / "s"
    store.mkdir()
    (store / "f.txt").write_text("aaaa\n")
    roomy = make_settings(memory_bytes=64 << 20, timeout_seconds=240, cpu_seconds=240)
    with Jail.start(roomy) as small:
        with pytest.raises(JailLimit, match="memory"):
            small.sed(["H;$!d;x;s/a/bb/g"], (b"a" * 999 + b"\n") * 36_000)
        huge = ["--regex-size-limit", "1G", "--dfa-size-limit", "1G", r"(\w|aa|.){500}{500}"]
        with pytest.raises(JailLimit, match="memory"):
            small.search({"s": store}, huge)


def _status(pid: int | str) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines())}


def _children(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def spares(jail: Jail, *, relays: list[int] | None = None) -> dict[str, int]:
    """The launcher's idle children, by tool: the sed one waits chrooted in the sed root,
    the rg one as the launcher does. Below Landlock ABI 6 each spare is already PID 1
    of its PID namespace, the child of the launcher's child (which waits for it,
    holding nothing: appended to ``relays``): that grandchild is given."""
    launcher = jail._process.pid
    time.sleep(0.2)  # the launcher forks them once it has replied: let it
    children = _children(launcher)
    found = {}
    for child in children:
        root = os.readlink(f"/proc/{child}/root")
        tool = "sed" if root == str(jail.settings.sed_root.resolve()) else "rg"
        found[tool] = int(child)
        if jail.level.namespaces:
            waiting = _children(child)
            assert len(waiting) == 1 and os.listdir(f"/proc/{child}/fd") == []
            found[tool] = int(waiting[0])
            if relays is not None:
                relays.append(int(child))
    assert len(found) == len(children)
    return found


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
    # Only the spares are left: one child per tool forked ahead of its next call.
    found = spares(jail)
    assert set(found) == {"rg", "sed"}
    # rg's waits as the launcher does, the jail's uid with no capability (it joins the
    # jail's user namespace to mount the stores of its call; below Landlock ABI 6 it
    # has joined it already: capabilities of that namespace only)...
    assert _status(found["rg"])["Uid"].split() == [str(jail.settings.uid)] * 4
    if jail.level.namespaces:
        assert _in_the_jails_user_namespace(found["rg"])
    else:
        assert _status(found["rg"])["CapEff"] == "0000000000000000"
    for pid in found.values():
        assert Path(f"/proc/{pid}/task/{pid}/children").read_text() == ""
        # ... and each holds only its own fds: none of the launcher's sockets or pipes.
        assert _own_fds(pid) == (1, 1)


def _in_the_jails_user_namespace(pid: int) -> bool:
    return os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")


def _own_fds(pid: int) -> tuple[int, int]:
    """(sockets, pipes) among the fds >= 3 of a spare: its own socket and status pipe
    (the rest are O_PATH files, and a Landlock ruleset)."""
    kinds = [
        os.readlink(f"/proc/{pid}/fd/{fd}").split(":")[0]
        for fd in os.listdir(f"/proc/{pid}/fd")
        if int(fd) >= 3
    ]
    return kinds.count("socket"), kinds.count("pipe")


def test_the_sed_spare_is_confined_before_its_call(jail: Jail) -> None:
    """The sed spare applied its whole policy but seccomp before any call: chrooted,
    the jail uid with no capability and no_new_privs, the resource limits set, only
    its own fds open (stdio of the launcher, its socket, status pipe, the sed binary and
    Landlock rule paths). What it can still do is checked in test_kernel (confine)."""
    jail.sed(["p"], b"")
    pid = spares(jail)["sed"]
    status = _status(pid)
    uid, gid = str(jail.settings.uid), str(jail.settings.gid)
    assert status["Uid"].split() == [uid] * 4
    assert status["Gid"].split() == [gid] * 4
    assert status["Groups"] == ""
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, cap
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "0"  # loaded once the call's fds are received
    assert os.readlink(f"/proc/{pid}/root") == str(jail.settings.sed_root.resolve())
    limits = Path(f"/proc/{pid}/limits").read_text()
    assert re_limit("Max file size", limits) == ("0", "0")
    assert re_limit("Max cpu time", limits) == (str(jail.settings.cpu_seconds),) * 2
    assert _own_fds(pid) == (1, 1)
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if int(fd) >= 3 and not target.startswith(("socket:", "pipe:")):
            assert target.startswith(str(jail.settings.sed_root.resolve())), target


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # reaped before or while reading
        return "gone"


def re_limit(name: str, limits: str) -> tuple[str, str]:
    for line in limits.splitlines():
        if line.startswith(name):
            soft, hard = line[len(name) :].split()[:2]
            return soft, hard
    raise AssertionError(f"no {name} in /proc/PID/limits")


@pytest.mark.parametrize("tool", ["sed", "rg"])
def test_a_dead_spare_is_replaced(jail: Jail, stores: dict[str, Path], tool: str) -> None:
    launcher = jail._process.pid
    jail.sed(["p"], b"")
    jail.search(stores, ["-c", "alpha", "A/todo.txt"])
    killed = spares(jail)[tool]
    os.kill(killed, 9)
    time.sleep(0.2)
    replaced = spares(jail)
    assert set(replaced) == {"rg", "sed"}
    assert killed not in replaced.values()
    assert jail.sed(["s/a/b/"], b"a\n") == b"b\n"
    assert jail.search(stores, ["-c", "alpha", "A/todo.txt"]).output == b"1\n"
    assert jail.launcher_pid == launcher


def test_concurrent_calls_after_both_spares_died(jail: Jail, stores: dict[str, Path]) -> None:
    """Spares of both tools killed while idle, at once: the next calls fork on demand."""
    found = spares(jail)
    for pid in found.values():
        os.kill(pid, 9)
    for pid in found.values():  # dead (a zombie, or reaped already), not just dying
        while _state(pid) not in ("Z", "gone"):
            time.sleep(0.001)
    with ThreadPoolExecutor(max_workers=4) as pool:
        seds = [pool.submit(jail.sed, ["s/a/b/"], b"a\n") for _ in range(4)]
        searches = [
            pool.submit(jail.search, stores, ["-c", "alpha", "A/todo.txt"]) for _ in range(4)
        ]
        assert [f.result() for f in seds] == [b"b\n"] * 4
        assert [f.result().output for f in searches] == [b"1\n"] * 4


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """600 files with one match each: parallel rg writes each file's line on its own."""
    store = tmp_path_factory.mktemp("many") / "many"
    for i in range(600):
        folder = store / f"d{i % 6}"
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        (folder / f"n{i:04}.md").write_text(f"# note {i}\nthe marker {i}\nend\n")
    store.chmod(0o755)
    return {"many": store}


def test_many_small_writes_arrive_whole(jail: Jail, many_files: dict[str, Path]) -> None:
    """The pump lets small writes gather (jail.pump): none is lost or torn, and the
    last ones, written just before rg exits, are there too."""
    for args in (["-c", "marker"], ["marker"], ["-l", "marker"]):
        result = jail.search(many_files, args)
        lines = result.output.decode().splitlines()
        assert len(lines) == 600, args
        assert len(set(lines)) == 600
        assert all(line.startswith("many/d") for line in lines)


def test_pump_works_with_fds_past_1024(jail: Jail, many_files: dict[str, Path]) -> None:
    """The pump waits on its fds with poll/epoll, never select(2), whose fd_set stops
    at 1024 (the daemon raises its open-file limit and may hold thousands)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2048:
        pytest.skip("the open-file limit is below 2048")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        assert jail.sed(["s/a/b/"], b"a\n" * 1000) == b"b\n" * 1000
        assert len(jail.search(many_files, ["-c", "marker"]).output.splitlines()) == 600
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_no_process_of_the_jail_is_privileged(jail: Jail) -> None:
    """The launcher and its spares: the jail's uid (the test runs as root, so the
    launcher was started under ``settings.uid``), no capability, no_new_privs, and not
    dumpable (their /proc files are root's, not their uid's: no process of that uid may
    ptrace them or read their memory)."""
    jail.sed(["p"], b"")
    relays: list[int] = []
    found = spares(jail, relays=relays)
    for pid in [jail.launcher_pid, *found.values(), *relays]:
        status = _status(pid)
        assert status["Uid"].split() == [str(jail.settings.uid)] * 4, pid
        assert status["Uid"].split()[0] != "0"
        if pid == found["rg"] and jail.level.namespaces:  # of the jail's namespace only
            assert _in_the_jails_user_namespace(pid)
        else:
            assert status["CapEff"] == "0000000000000000", pid
            assert status["CapPrm"] == "0000000000000000", pid
        assert status["NoNewPrivs"] == "1", pid
        assert os.stat(f"/proc/{pid}/environ").st_uid == 0, pid


def test_a_running_tool_holds_nothing(
    make_settings: Callable[..., JailSettings], big_store: dict[str, Path]
) -> None:
    """rg while it runs (a pattern that takes it seconds): the jail's uid, no capability
    (rg's children keep the bounding set the jail's namespace gives them: it cannot give
    anything back, see jail.launcher), no_new_privs, the seccomp filter loaded."""
    huge = ["--regex-size-limit", "1G", "--dfa-size-limit", "1G", r"(\w|aa|.){500}{500}"]
    with Jail.start(make_settings(timeout_seconds=scaled(3))) as jail, \
            ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(jail.search, big_store, huge)
        launcher = jail.launcher_pid
        status: dict[str, str] = {}
        deadline = time.monotonic() + scaled(3)
        while not status and time.monotonic() < deadline:
            found = _children(launcher)
            if jail.level.namespaces:  # the tool is PID 1 of its own, a grandchild
                for child in list(found):
                    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                        found += _children(child)
            for child in found:
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    if os.readlink(f"/proc/{child}/exe") == str(jail.settings.rg_path.resolve()):
                        status = _status(child)
            time.sleep(0.01)
        assert status, "rg was never seen running"
        with pytest.raises(JailError):  # stopped at the time limit, or its regex too big
            running.result()
    assert status["Uid"].split() == [str(jail.settings.uid)] * 4
    for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status[cap], 16) == 0, cap
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"
