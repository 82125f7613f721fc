"""The daemon's metrics for ``GET /metrics`` (Prometheus text format, prometheus-client).

One private registry per daemon (never the library's global one). What is counted:

* operations by op and outcome (``ok`` or the protocol error code) and their latency,
  whatever the transport (socket, REST, MCP): `MeasuredDispatcher` wraps
  ``Dispatcher.execute``; conflicts by op;
* the commit's landing step (one ``observe`` per commit, Engine.observe_commits);
* jail runs (rg, sed) by outcome and their latency (Jail.observer);
* FUSE requests by handler and their latency, read at scrape time from the plain
  counters the handler guards keep (memfs/fuse/stats.py): nothing per request here;
* connections (open and total) of the control socket and of the HTTP listener, HTTP
  requests by status and in flight, MCP sessions served over HTTP;
* the disk: whether a request was refused because the memory's disk is full
  (``memfs_disk_full``, until a change lands again), and the bytes available on the
  root's file system, read at scrape time;
* each store's mirrors (memfs/store/history/mirror.py), read at scrape time: state, last
  success, commits behind, and this daemon's pushes by outcome.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from memfs.control.ops.dispatcher import Dispatcher, describe
from memfs.control.protocol.base import BaseRequest
from memfs.control.socket.server import ControlServer
from memfs.fuse import stats as fuse_stats
from memfs.store.engine import Precondition
from memfs.store.history.mirror import STATES, Mirrors, shown

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The daemon's metric objects; every method is thread-safe."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.operations = Counter("memfs_operations", "Operations carried out, by op and "
                                  "outcome (ok or the error code)", ["op", "outcome"], registry=r)
        self.operation_seconds = Histogram("memfs_operation_seconds", "Time to carry out an "
                                           "operation", ["op"], buckets=_FAST, registry=r)
        self.conflicts = Counter("memfs_conflicts", "Writes refused by the version check",
                                 ["op"], registry=r)
        self.commit_seconds = Histogram("memfs_commit_seconds", "Landing step of a commit "
                                        "(under the store lock): renames, records, history",
                                        buckets=_FAST, registry=r)
        self.jail_runs = Counter("memfs_jail_runs", "Jailed tool runs, by tool and outcome",
                                 ["tool", "outcome"], registry=r)
        self.jail_seconds = Histogram("memfs_jail_run_seconds", "Duration of a jailed tool "
                                      "run", ["tool"], buckets=_FAST, registry=r)
        self.http_requests = Counter("memfs_http_requests", "HTTP requests answered, by "
                                     "status code", ["code"], registry=r)
        self.http_in_flight = Gauge("memfs_http_requests_in_flight", "HTTP requests being "
                                    "served", registry=r)
        self.mcp_sessions = Counter("memfs_mcp_http_sessions", "MCP sessions opened over "
                                    "HTTP", registry=r)
        self.disk_full = Gauge("memfs_disk_full", "1 after a request was refused because the "
                               "memory's disk is full (no_space), 0 once a change lands",
                               registry=r)
        self._lock = threading.Lock()
        self.socket_open = 0
        self.socket_total = 0
        self.http_open = 0
        self.http_total = 0
        r.register(_Connections(self))
        r.register(_Fuse())

    def operation(self, op: str, outcome: str, seconds: float) -> None:
        self.operations.labels(op, outcome).inc()
        self.operation_seconds.labels(op).observe(seconds)
        if outcome == "conflict":
            self.conflicts.labels(op).inc()
        elif outcome == "no_space":
            self.disk_full.set(1)

    def change_landed(self, _: object) -> None:
        """A commit listener (Engine.commit_listeners): the disk took a change."""
        self.disk_full.set(0)

    def watch_disk(self, root: Path) -> None:
        """Report the bytes available on ``root``'s file system at every scrape."""
        self.registry.register(_Disk(root))

    def watch_mirrors(self, mirrors: Mirrors) -> None:
        """Report each store's mirrors at every scrape."""
        self.registry.register(_Mirrors(mirrors))

    def jail_run(self, tool: str, seconds: float, completed: bool) -> None:
        self.jail_runs.labels(tool, "ok" if completed else "error").inc()
        self.jail_seconds.labels(tool).observe(seconds)

    def socket_connection(self, delta: int) -> None:
        with self._lock:
            self.socket_open += delta
            if delta > 0:
                self.socket_total += delta

    def http_connection(self, delta: int) -> None:
        with self._lock:
            self.http_open += delta
            if delta > 0:
                self.http_total += delta

    def render(self) -> bytes:
        """The current metrics in the Prometheus text format."""
        return generate_latest(self.registry)


class _Connections(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        opened = GaugeMetricFamily("memfs_connections_open", "Open connections",
                                   labels=["transport"])
        opened.add_metric(["socket"], self.metrics.socket_open)
        opened.add_metric(["http"], self.metrics.http_open)
        yield opened
        total = CounterMetricFamily("memfs_connections", "Connections accepted",
                                    labels=["transport"])
        total.add_metric(["socket"], self.metrics.socket_total)
        total.add_metric(["http"], self.metrics.http_total)
        yield total


class _Disk(Collector):
    def __init__(self, root: Path) -> None:
        self.root = root

    def collect(self) -> Iterator[Any]:
        available = GaugeMetricFamily(
            "memfs_disk_available_bytes", "Bytes available on the root's file system (as "
            "df shows them; a daemon running as root may use the reserved blocks too)")
        try:
            found = os.statvfs(self.root)
        except OSError:
            return
        available.add_metric([], found.f_bavail * found.f_frsize)
        yield available


class _Mirrors(Collector):
    """Each mirror of each store, labelled ``store`` and ``mirror`` (its URL, without
    secrets)."""

    def __init__(self, mirrors: Mirrors) -> None:
        self.mirrors = mirrors

    def collect(self) -> Iterator[Any]:
        labels = ["store", "mirror"]
        success = GaugeMetricFamily(
            "memfs_mirror_last_success_timestamp_seconds", "When a push last brought the "
            "mirror up to date (epoch seconds; 0: never)", labels=labels)
        behind = GaugeMetricFamily(
            "memfs_mirror_commits_behind", "Commits on the store's main that the mirror's "
            "main lacks, as last known", labels=labels)
        state = GaugeMetricFamily(
            "memfs_mirror_state", "1 for the mirror's state (ok, pending, down, diverged, "
            "refused), 0 for the others", labels=[*labels, "state"])
        pushes = CounterMetricFamily("memfs_mirror_pushes", "Pushes by this daemon, by "
                                     "outcome", labels=[*labels, "outcome"])
        stores = self.mirrors.stores
        for status in self.mirrors.status(sorted(stores)):
            where = [status.store, status.url]
            success.add_metric(where, status.last_success or 0.0)
            behind.add_metric(where, status.commits_behind)
            for name in STATES:
                state.add_metric([*where, name], 1.0 if status.state == name else 0.0)
        for store, mirror in sorted(stores.items()):
            for (url, outcome), count in sorted(mirror.outcomes().items()):
                pushes.add_metric([store, shown(url), outcome], count)
        yield from (success, behind, state, pushes)


class _Fuse(Collector):
    """FUSE requests from the mount's own counters, read at scrape time."""

    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily("memfs_fuse_requests", "FUSE requests served, by "
                                       "handler", labels=["handler"])
        latency = HistogramMetricFamily(
            "memfs_fuse_request_seconds", f"FUSE request latency, from one request in "
            f"{fuse_stats.SAMPLE_EVERY} (sampled)", labels=["handler"])
        bounds = fuse_stats.bucket_bounds()
        for handler, stats in sorted(fuse_stats.REQUESTS.items()):
            snapshot = list(stats)
            requests.add_metric([handler], snapshot[fuse_stats.COUNT])
            buckets = snapshot[fuse_stats.FIRST_BUCKET:]
            cumulative = []
            running = 0
            for bound, count in zip([*map(str, bounds), "+Inf"], buckets, strict=True):
                running += count
                cumulative.append((bound, running))
            latency.add_metric([handler], cumulative, snapshot[fuse_stats.SAMPLED_NS] / 1e9)
        yield requests
        yield latency


class MeasuredDispatcher(Dispatcher):
    """A Dispatcher that counts every operation it carries out (any transport)."""

    def __init__(self, *args: Any, metrics: Metrics, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics = metrics
        metrics.watch_disk(self.engine.root)
        self.engine.commit_listeners.append(metrics.change_landed)

    def execute(self, agent: str, request: BaseRequest, *, delegate: bool = False,
                uid: int | None = None, precondition: Precondition | None = None
                ) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            result = super().execute(agent, request, delegate=delegate, uid=uid,
                                     precondition=precondition)
        except Exception as error:
            described = describe(error)
            outcome = "internal" if described is None else described[0]
            self.metrics.operation(request.op, outcome, time.perf_counter() - start)
            raise
        self.metrics.operation(request.op, "ok", time.perf_counter() - start)
        return result


class MeasuredControlServer(ControlServer):
    """The control-socket server, counting its connections."""

    def __init__(self, *args: Any, metrics: Metrics, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics = metrics

    async def _client(self, sock: trio.socket.SocketType, uid: int) -> None:
        self.metrics.socket_connection(+1)
        try:
            await super()._client(sock, uid)
        finally:
            self.metrics.socket_connection(-1)
