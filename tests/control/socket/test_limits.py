"""Resource limits (issue 12): connections per uid and for unknown uids, bounded and
linearly scanned request lines, a shared cap on buffered bytes, a cap on concurrent
jail runs. Each limit answers ``busy`` or ``too_large`` and leaves the others served.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.control.client import BusyError, Client, InvalidError
from memfs.control.mcp.storage import Connection, StorageTools
from tests.support import (
    UID_A,
    UID_B,
    UID_UNKNOWN,
    Daemon,
    as_euid,
    connect_as,
    memfs_as,
    public_tmpdir,
    standard_config,
)

MiB = 1024 * 1024


def status(pid: int) -> dict[str, int]:
    """Memory figures of a process, in kB (VmRSS, VmHWM, ...)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Vm"):
            found[key] = int(value.split()[0])
    return found


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def raw_socket(uid: int, path: Path) -> socket.socket:
    with as_euid(uid):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
    return sock


def read_line(sock: socket.socket, timeout: float = 120) -> bytes:
    """One reply line (b"" if the daemon closed first); fails the test on timeout."""
    sock.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            pytest.fail("no reply from the daemon")
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture
def limited() -> Iterator[Daemon]:
    config = standard_config(
        public_tmpdir(),
        limits={"max_connections_per_uid": 8, "max_connections_unknown_uid": 2},
    )
    with Daemon(config) as running:
        yield running


def test_connections_over_the_per_uid_limit_get_busy_and_others_are_served(
    limited: Daemon,
) -> None:
    began = time.monotonic()  # no refusal before: the daemon is this test's own
    with contextlib.ExitStack() as stack:
        bobs = [stack.enter_context(connect_as(UID_B, limited.socket)) for _ in range(8)]
        for bob in bobs:
            assert bob.whoami()["agent"] == "bob"
        extra = stack.enter_context(connect_as(UID_B, limited.socket))
        with pytest.raises(BusyError, match="too many connections"):
            extra.whoami()  # the client reports the daemon's one line, not a broken pipe
        done = memfs_as(UID_B, limited.socket, "ls")
        assert done.returncode == 1 and b"busy" in done.stderr
        with connect_as(UID_A, limited.socket) as alice:  # another uid is unaffected
            assert alice.whoami()["agent"] == "alice"
        bobs.pop().close()
        # A slot freed is a slot again, once the daemon has seen that connection end
        # (asynchronously: retry a bounded number of times).
        for _ in range(1000):
            with connect_as(UID_B, limited.socket) as bob:
                try:
                    assert bob.whoami()["agent"] == "bob"
                    break
                except BusyError:
                    time.sleep(0.01)
        else:
            pytest.fail("the closed connection's slot was never freed")
    # Warnings are rate-limited: one, then at most one per 10 s, however many refusals
    # (bounded by the time this took, not by a guess of it: a slow machine takes longer).
    warned = limited.log().count("refused a connection")
    assert 1 <= warned <= 1 + (time.monotonic() - began) / 10


def test_an_unknown_uid_gets_few_connections(limited: Daemon) -> None:
    with contextlib.ExitStack() as stack:
        admitted = [stack.enter_context(connect_as(UID_UNKNOWN, limited.socket))
                    for _ in range(2)]
        for client in admitted:
            with pytest.raises(Exception, match="not mapped"):
                client.whoami()
        for _ in range(5):
            with (connect_as(UID_UNKNOWN, limited.socket) as refused,
                  pytest.raises(BusyError, match="not mapped to any agent")):
                refused.whoami()
        with connect_as(UID_A, limited.socket) as alice:
            assert alice.whoami()["agent"] == "alice"


def test_unfinished_huge_lines_keep_memory_bounded() -> None:
    """Eight connections from unknown uids each send 20 MiB without a newline: each
    gets too_large once past the (64 KiB) cap, and the daemon's peak memory barely
    moves (it used to buffer all 160 MiB)."""
    with Daemon(standard_config(public_tmpdir())) as daemon:
        assert daemon.proc is not None
        pid = daemon.proc.pid
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak (VmHWM)
        before = status(pid)["VmRSS"]
        chunk = b"A" * MiB
        socks = [raw_socket(UID_UNKNOWN + 10 + n, daemon.socket) for n in range(8)]
        replies: list[bytes] = [b""] * 8

        def flood(n: int) -> None:
            with contextlib.suppress(OSError):
                socks[n].sendall(b'{"op": "whoami", "x": "')
                for _ in range(20):
                    socks[n].sendall(chunk)
            replies[n] = read_line(socks[n])

        threads = [threading.Thread(target=flood, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        peak = status(pid)["VmHWM"]
        for sock in socks:
            sock.close()
        assert all(b'"too_large"' in reply for reply in replies), replies
        assert peak - before < 48 * 1024, (before, peak)  # kB
        with connect_as(UID_A, daemon.socket) as alice:
            assert alice.whoami()["agent"] == "alice"


def test_the_newline_search_is_linear() -> None:
    """A 64 MiB line arriving in small pieces: each byte is searched for a newline
    once. This measures complexity, not speed: rescanning the whole buffer for every
    piece grows with the square of the line (about 11 CPU seconds for 48 MiB, 20 for
    64 MiB, on the machine this was written on); scanning each byte once costs about
    half a second here."""
    config = standard_config(public_tmpdir(), max_file_size=48 * MiB)
    with Daemon(config) as daemon:
        assert daemon.proc is not None
        sock = raw_socket(UID_A, daemon.socket)
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # small pieces
            started = cpu_seconds(daemon.proc.pid)
            sock.sendall(b'{"op": "whoami", "x": "')
            piece = b"B" * 4096
            for _ in range(64 * MiB // len(piece)):
                sock.sendall(piece)
            sock.sendall(b'"}\n')
            reply = read_line(sock, timeout=600)
            used = cpu_seconds(daemon.proc.pid) - started
        assert b'"invalid"' in reply and b'unknown field \\"x\\"' in reply
        assert used < 5, f"{used:.1f} CPU seconds for one 64 MiB line"


def test_the_shared_buffer_cap_answers_busy() -> None:
    """With 1 MiB for all unfinished lines, three connections that each hold 900 KiB
    cannot all be buffered: exactly two are answered busy, the third is served."""
    config = standard_config(public_tmpdir(), limits={"max_buffered_bytes": MiB})
    with Daemon(config) as daemon:
        socks = [raw_socket(UID_A, daemon.socket) for _ in range(3)]
        try:
            body = b'{"op": "whoami", "x": "' + b"C" * (900 * 1024)
            senders = [threading.Thread(target=sock.sendall, args=(body,)) for sock in socks]
            for sender in senders:
                sender.start()
            answered: dict[socket.socket, bytes] = {}
            while len(answered) < 2:  # stop on counts; each wait is generous
                ready, _, _ = select.select([s for s in socks if s not in answered], [], [], 120)
                assert ready, "no busy reply"
                for sock in ready:
                    answered[sock] = read_line(sock)
            for sender in senders:
                sender.join(120)
            assert all(b'"busy"' in reply for reply in answered.values()), answered
            (kept,) = [sock for sock in socks if sock not in answered]
            kept.sendall(b'"}\n')
            assert b'unknown field \\"x\\"' in read_line(kept)  # the held line was whole
        finally:
            for sock in socks:
                sock.close()
        with connect_as(UID_B, daemon.socket) as bob:
            assert bob.whoami()["agent"] == "bob"


def test_jail_runs_over_the_cap_get_busy_while_other_requests_work() -> None:
    """Two sed edits that loop until the jail's time limit hold both jail slots; a
    burst of searches meanwhile gets busy once its wait runs out, or at once past the
    agent's queue (CLI: exit 1; MCP: a retry message), while reads and writes are
    served. Afterwards searches work again."""
    config = standard_config(public_tmpdir(),
                             limits={"max_jail_runs": 2, "jail_queue_seconds": 1},
                             jail={"timeout_seconds": 20})
    with Daemon(config) as daemon:
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/loop.md", "x\n")
            alice.write("notes/find-me.md", "needle\n")
        outcomes: list[str] = []
        # Connections are made here: the effective uid is per process, not per thread.
        loopers = [connect_as(UID_A, daemon.socket) for _ in range(2)]
        searchers = [connect_as(UID_A, daemon.socket) for _ in range(8)]
        probe = connect_as(UID_B, daemon.socket)

        def hold_a_slot(client: Client) -> None:
            for _ in range(10_000):  # retry while the probe's searches hold a slot
                try:
                    client.edit("notes/loop.md", [":a;ba"], force=True)
                except BusyError:
                    continue
                except InvalidError as error:  # stopped at the jail's time limit
                    outcomes.append(error.message)
                    return
            outcomes.append("never ran")

        holders = [threading.Thread(target=hold_a_slot, args=(c,)) for c in loopers]
        for holder in holders:
            holder.start()
        with probe:
            for _ in range(10_000):  # until both slots are held by the loops
                try:
                    probe.search(["needle"])
                except BusyError:
                    break
            else:
                pytest.fail("the jail runs were never busy")
            # A burst of searches, each on its own connection: all refused.
            errors: list[BaseException | None] = [None] * len(searchers)

            def search(n: int) -> None:
                try:
                    searchers[n].search(["-l", "needle"])
                except BaseException as error:
                    errors[n] = error

            burst = [threading.Thread(target=search, args=(n,)) for n in range(len(searchers))]
            for thread in burst:
                thread.start()
            for thread in burst:
                thread.join(60)
            assert all(isinstance(error, BusyError) for error in errors), errors
            done = memfs_as(UID_A, daemon.socket, "grep", "needle")
            assert done.returncode == 1, done
            assert b"busy" in done.stderr
            tools = StorageTools(Connection(str(daemon.socket), as_agent="alice"))
            outcome = tools.search(pattern="needle")
            assert outcome.is_error and "busy" in outcome.text and "retry" in outcome.text
            # Everything that needs no jail is served meanwhile.
            with connect_as(UID_A, daemon.socket) as alice:
                alice.write("notes/during.md", "written while the jail was full\n")
                assert alice.read("notes/during.md")["text"].startswith("written")
                assert "notes/during.md" in alice.list("notes/**")
        for holder in holders:
            holder.join(120)
        # Each loop ends at the jail's wall-clock or CPU-time limit, whichever comes first.
        assert len(outcomes) == 2 and all("was stopped" in text for text in outcomes), outcomes
        with connect_as(UID_A, daemon.socket) as alice:
            assert alice.search(["-l", "needle"])["output"] == "notes/find-me.md\n"
        for client in (*loopers, *searchers):
            client.close()
        assert daemon.alive()


def test_client_reports_busy_from_a_connection_closed_before_it_sent(
    limited: Daemon,
) -> None:
    """The daemon's one busy line is reported even when the daemon had closed the
    connection before the request went out (the send fails with a broken pipe)."""
    with contextlib.ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(connect_as(UID_UNKNOWN, limited.socket))
        refused = stack.enter_context(connect_as(UID_UNKNOWN, limited.socket))
        ready, _, _ = select.select([refused.transport._sock], [], [], 120)  # answered and closed
        assert ready
        with pytest.raises(BusyError, match="too many connections"):
            refused.whoami()
