"""/metrics: token-protected (public with public_metrics = true), parsed with
prometheus_client's own text parser; operations, conflicts, commits, jail runs,
connections, HTTP requests and FUSE requests are counted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memfs.control.client import ConflictError
from tests.control.http.conftest import client, http_config, problem
from tests.support import UID_A, UID_B, Daemon, connect_as, run_as

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(http: httpx.Client) -> Samples:
    response = http.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_need_a_token(daemon: Daemon) -> None:
    with client(daemon, None) as anonymous:
        problem(anonymous.get("/metrics"), 401, "unauthenticated")


def socket_connections_fall_to_zero(http: httpx.Client, seconds: float = 5.0) -> bool:
    """The daemon sees a client's close when it next reads that connection, a moment
    after the client returned: the gauge is awaited, not sampled once."""
    deadline = time.monotonic() + seconds
    while value(scrape(http), "memfs_connections_open", transport="socket") != 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_operations_conflicts_commits_and_jail_runs(alice: httpx.Client, bob: httpx.Client,
                                                    daemon: Daemon) -> None:
    before = scrape(alice)
    alice.put("/v1/stores/notes/files/m.md", content=b"one\n")
    problem(bob.put("/v1/stores/notes/files/m.md", content=b"bob\n"), 409, "conflict")
    with connect_as(UID_B, daemon.socket) as socket_bob:  # any transport counts
        with pytest.raises(ConflictError):
            socket_bob.write("notes/m.md", "bob again\n")
        socket_bob.search(["-l", "one"])
        socket_bob.read("notes/m.md")
        socket_bob.edit("notes/m.md", ["s/one/two/"])
        during = scrape(alice)
    after = scrape(alice)
    conflicts = value(after, "memfs_conflicts_total", op="write")
    assert conflicts - value(before, "memfs_conflicts_total", op="write") == 2
    refused = value(after, "memfs_operations_total", op="write", outcome="conflict")
    assert refused - value(before, "memfs_operations_total", op="write", outcome="conflict") == 2
    written = value(after, "memfs_operations_total", op="write", outcome="ok")
    assert written - value(before, "memfs_operations_total", op="write", outcome="ok") == 2
    commits = value(after, "memfs_commit_seconds_count")
    assert commits - value(before, "memfs_commit_seconds_count") == 2
    for tool in ("rg", "sed"):
        runs = value(after, "memfs_jail_runs_total", tool=tool, outcome="ok")
        assert runs - value(before, "memfs_jail_runs_total", tool=tool, outcome="ok") == 1
        assert value(after, "memfs_jail_run_seconds_count", tool=tool) >= 1
    assert value(during, "memfs_connections_open", transport="socket") >= 1
    assert socket_connections_fall_to_zero(alice)
    assert value(after, "memfs_connections_total", transport="socket") >= 1
    assert value(after, "memfs_http_requests_total", code="409") >= 1


@pytest.fixture(scope="module")
def mounted() -> Iterator[Daemon]:
    with Daemon(http_config("memfs-http-metrics-", public_metrics=True), mount=True) as running:
        yield running


def test_public_metrics_and_fuse_requests(mounted: Daemon) -> None:
    with connect_as(UID_A, mounted.socket) as alice:
        alice.write("notes/fuse.md", "through the mount\n")
    with client(mounted, None) as anonymous:  # public_metrics = true: no token needed
        before = scrape(anonymous)
        for _ in range(20):
            done = run_as(UID_A, ["cat", f"{mounted.mountpoint}/notes/fuse.md"])
            assert done.stdout == b"through the mount\n", done
        after = scrape(anonymous)
        problem(anonymous.get("/v1/stores"), 401, "unauthenticated")  # the rest still needs one
    opened = value(after, "memfs_fuse_requests_total", handler="open")
    assert opened - value(before, "memfs_fuse_requests_total", handler="open") >= 20
    assert value(after, "memfs_fuse_requests_total", handler="lookup") > 0
    # latency is sampled: 1 in 16 requests of each handler is timed
    assert value(after, "memfs_fuse_request_seconds_count", handler="open") >= 1
    assert value(after, "memfs_fuse_request_seconds_bucket", handler="open", le="+Inf") == \
        value(after, "memfs_fuse_request_seconds_count", handler="open")
