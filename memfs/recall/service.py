"""`Recall`: the stores' indexes kept up to date, and the ranked queries on them.

**Where.** ``ROOT/state/recall/SLOT/STORE/``: each daemon on a root takes a slot of its
own (the first whose flock ``SLOT.lock`` is free), so no two daemons ever write one
index, and a daemon that restarts finds the index it left and only catches up.

**Up to date.** The engine calls `changed` after every change it lands (its commit
listener): one enqueue, numbered. A thread of its own (``memfs-recall``) takes every
queued path at once, reads each file as it is now (or finds it gone), updates the
indexes and commits them, then notes the highest number done. A query first waits
until every change numbered before it started is done: a change acknowledged before
a recall starts is found by it. Catching up, at start (a crash, an operator's edit in
the backing directory), after another daemon's change (`store_changed`, from the
stores' generation counters) or to rebuild (`reindex`, or an index missing or
corrupt), walks the store's files and compares their size and mtime with what the
index holds; it runs in chunks between the queued changes, and queries answered
meanwhile say which stores are still being caught up. Because every step reads the
file as it is when the step runs, steps in any order leave the index equal to the
files.

**Never stops the daemon.** A failure of an index (it cannot be opened, or fails in
use) is logged and the index rebuilt from the files; queries on that store then wait
for nothing and find what is indexed so far.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfs.recall import text
from memfs.recall.errors import BadQuery, RecallError
from memfs.recall.index import IndexFailed, StoreIndex, failed
from memfs.store import backing
from memfs.store.engine import Engine
from memfs.store.errors import InvalidInput, NotFound, PermissionDenied
from memfs.store.paths import MemPath, nameable
from memfs.store.versions import version_of

log = logging.getLogger("memfs.recall")

SUPERSEDED_WEIGHT = 0.5  # a superseded decision's score is multiplied by this
INDEXED_BYTES = 4 << 20  # of each file, this much is indexed
PEEK_BYTES = 1 << 20  # of each file found, this much is searched for its best lines
CHUNK = 512  # files a catch-up handles between two looks at the queued changes
FRESH_WAIT = 30.0  # seconds a query waits for the changes before it (else busy)
MAX_WINDOW = 2000  # matches taken from each store's index for one page


class Busy(RecallError):
    """The changes made before the query are not indexed yet, after FRESH_WAIT."""

    code = "busy"


@dataclass(frozen=True)
class Hit:
    """A file recall found: ``STORE/PATH``, its score, its best lines (line number,
    text), who wrote its current version and when, and whether it is a superseded
    decision."""

    path: str
    score: float
    lines: list[tuple[int, str]]
    last_writer: str | None
    last_written_at: float | None
    superseded: bool


@dataclass(frozen=True)
class Found:
    hits: list[Hit]
    terms: list[str]
    next_page: int | None
    indexing: list[str]  # stores still being caught up: their results may be missing


@dataclass
class _CatchUp:
    """A store being caught up; ``fresh``: into a new index, swapped in when done (a
    reindex), so that queries meanwhile use the old one."""

    store: str
    fresh: bool
    done: threading.Event = field(default_factory=threading.Event)
    files: int = 0
    redo: set[str] = field(default_factory=set)  # changed during a fresh build
    started: bool = False
    again: bool = False  # changed by another daemon since the walk began: walk again


class Recall:
    """The indexes of ``engine``'s stores under ``directory`` (default
    ``ROOT/state/recall``). `start` hooks it to the engine and starts the indexer;
    `close` stops it."""

    def __init__(self, engine: Engine, directory: Path | None = None) -> None:
        self.engine = engine
        self._base = directory or engine.root / "state" / "recall"
        self._slot, self._slot_lock = _take_slot(self._base)
        self._indexes: dict[str, StoreIndex | None] = {}
        self._cond = threading.Condition()
        self._queued: dict[MemPath, int] = {}  # changed paths -> their number
        self._enqueued = 0  # numbers handed out
        self._indexed = 0  # every change numbered up to this is indexed
        self._catch_ups: dict[str, _CatchUp] = {}  # waiting or under way, by store
        self._suspect: dict[str, Exception] = {}  # failed in a query: rebuild
        self._closed = False
        self._thread: threading.Thread | None = None
        self.observe: Callable[[str, float], None] | None = None  # (what, seconds)

    # -- life --------------------------------------------------------------------------

    def start(self) -> None:
        """Open every store's index (a missing or broken one is made anew), queue a
        catch-up of each, listen to the engine's commits and start the indexer."""
        for store in sorted(self.engine.config.stores):
            try:
                self._open(store)
            except IndexFailed as error:  # the catch-up tries again
                log.error("recall: cannot make an index for store %s: %s", store, error)
            self._catch_ups[store] = _CatchUp(store, fresh=False)
        self.engine.commit_listeners.append(self.changed)
        self._thread = threading.Thread(target=self._run, name="memfs-recall", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.engine.commit_listeners.remove(self.changed)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        for index in self._indexes.values():
            if index is not None:
                index.close()
        os.close(self._slot_lock)

    @property
    def directory(self) -> Path:
        """This daemon's slot: one index directory per store in it."""
        return self._slot

    def _open(self, store: str) -> StoreIndex:
        """The store's index, opened; one that cannot be opened is removed and made
        anew (empty: the store's catch-up fills it). Raises IndexFailed when even that
        fails."""
        directory = self._slot / store
        try:
            index = StoreIndex(directory)
        except IndexFailed as error:
            log.warning("recall: the index of store %s is unusable (%s): rebuilding it "
                        "from the files", store, error)
            shutil.rmtree(directory, ignore_errors=True)
            index = StoreIndex(directory)
        self._indexes[store] = index
        return index

    # -- what changed --------------------------------------------------------------------

    def changed(self, path: MemPath) -> None:
        """The engine's commit listener: ``path`` changed (called before the change is
        acknowledged). One enqueue; the indexer does the rest."""
        with self._cond:
            self._enqueued += 1
            self._queued.pop(path, None)  # keep the queue in order of the last change
            self._queued[path] = self._enqueued
            self._cond.notify_all()

    def store_changed(self, store: str) -> None:
        """Another daemon on the root changed ``store``: catch up with its files."""
        with self._cond:
            if store not in self.engine.config.stores:
                return
            job = self._catch_ups.get(store)
            if job is None:
                self._catch_ups[store] = _CatchUp(store, fresh=False)
                self._cond.notify_all()
            elif job.started:
                job.again = True

    def reindex(self, stores: list[str]) -> dict[str, int]:
        """Rebuild the indexes of ``stores`` from their files into new indexes (queries
        meanwhile use the old ones), and wait until done; returns the files indexed,
        by store. A rebuild already under way is joined rather than started again."""
        jobs = []
        with self._cond:
            for store in stores:
                job = self._catch_ups.get(store)
                if job is None or not job.fresh:
                    job = self._catch_ups[store] = _CatchUp(store, fresh=True)
                jobs.append(job)
            self._cond.notify_all()
        for job in jobs:
            while not job.done.wait(1.0):
                if self._closed:
                    raise RecallError("recall stopped before the reindex was done")
        return {job.store: job.files for job in jobs}

    # -- the indexer thread ----------------------------------------------------------------

    def _run(self) -> None:
        job: Generator[None, None, None] | None = None
        while True:
            with self._cond:
                while not (self._queued or self._catch_ups or job or self._suspect
                           or self._closed):
                    self._cond.wait()
                if self._closed:
                    return
                batch, self._queued = self._queued, {}
                suspect, self._suspect = self._suspect, {}
            try:
                for store, error in suspect.items():
                    if job is not None:  # it may be walking the index made anew
                        job.close()
                        job = None
                    self._broken(store, error)
                with self._cond:
                    if job is None and self._catch_ups:
                        job = self._catch_up(next(iter(self._catch_ups.values())))
                if batch:
                    try:
                        self._apply(batch)
                    finally:  # done, or failed and logged: no query waits for it longer
                        self._done(batch)
                if job is not None and next(job, StopIteration) is StopIteration:
                    job = None
            except Exception:  # never let the indexer die: the next step retries
                log.exception("recall: indexing failed")
                job = None
                time.sleep(1.0)

    def _done(self, batch: dict[MemPath, int]) -> None:
        """Every change numbered up to the batch's highest is indexed: wake the
        queries waiting for them."""
        with self._cond:
            self._indexed = max(self._indexed, max(batch.values()))
            self._cond.notify_all()

    def _apply(self, batch: dict[MemPath, int]) -> None:
        """Index the files of ``batch`` as they are now; commit what changed."""
        started = time.perf_counter()
        touched: dict[str, StoreIndex] = {}
        broken: dict[str, IndexFailed] = {}
        for path in batch:
            if not nameable(path.rel):
                continue
            job = self._catch_ups.get(path.store)
            if job is not None and job.fresh:
                job.redo.add(path.rel)
            index = self._indexes.get(path.store)
            if index is None or path.store in broken:
                continue
            try:
                if self._index_file(index, path):
                    touched[path.store] = index
            except IndexFailed as error:
                broken[path.store] = error
        for store, index in touched.items():
            if store not in broken:
                try:
                    self._commit(index)
                except IndexFailed as error:
                    broken[store] = error
        for store, failure in broken.items():
            self._broken(store, failure)
        if self.observe is not None:
            self.observe("changes", time.perf_counter() - started)

    def _index_file(self, index: StoreIndex, path: MemPath,
                    known: tuple[int, int] | None = None,
                    listed: tuple[int, int] | None = None) -> bool:
        """Put the file's current version in ``index`` (or remove it when it is gone or
        not a file memfs shows); with ``known`` (its size and mtime when indexed),
        only if it changed since: a walk's ``listed`` size and mtime equal to them
        spare reading it. Returns whether the index changed. Raises IndexFailed."""
        if known is not None and known == listed:
            return False
        current = _read(self.engine, path)
        try:
            if current is None:
                index.remove(path.rel)
                return True
            size, mtime_ns, data = current
            if known == (size, mtime_ns):
                return False
            index.put(path.rel, size, mtime_ns, text.fields_of(path.rel, data))
            return True
        except BaseException as error:
            if not failed(error):
                raise
            raise IndexFailed(f"{index.directory}: {error!r}") from None

    def _commit(self, index: StoreIndex) -> None:
        """Raises IndexFailed."""
        try:
            index.commit()
        except BaseException as error:
            if not failed(error):
                raise
            raise IndexFailed(f"{index.directory}: {error!r}") from None

    def _broken(self, store: str, error: Exception, done: threading.Event | None = None,
                ) -> None:
        """An index failed in use: make it anew and catch up (on the indexer thread).
        ``done``: set once that catch-up is done (a reindex waits for it)."""
        log.warning("recall: the index of store %s failed (%s): rebuilding it from the "
                    "files", store, error)
        old = self._indexes.pop(store, None)
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        for leftover in (store, f"{store}.building"):
            shutil.rmtree(self._slot / leftover, ignore_errors=True)
        with self._cond:
            self._catch_ups[store] = _CatchUp(store, fresh=False, done=done or threading.Event())
            self._open(store)

    def _catch_up(self, job: _CatchUp) -> Generator[None, None, None]:
        """Make ``job.store``'s index equal to its files, a chunk per step; an index
        that fails meanwhile is made anew and caught up again."""
        try:
            yield from self._walk(job)
        except IndexFailed as error:
            with self._cond:
                if self._catch_ups.get(job.store) is job:
                    del self._catch_ups[job.store]
            self._broken(job.store, error, job.done)

    def _walk(self, job: _CatchUp) -> Generator[None, None, None]:
        store, started = job.store, time.perf_counter()
        job.started = True
        building = self._slot / f"{store}.building"
        if job.fresh:
            shutil.rmtree(building, ignore_errors=True)
            target = StoreIndex(building)
        else:
            target = self._indexes.get(store) or self._open(store)
        try:
            known = target.known()
        except BaseException as error:
            if not failed(error):
                raise
            raise IndexFailed(f"{target.directory}: {error!r}") from None
        fd = self.engine.store_fd(store)
        job.files = 0
        for entry in backing.walk_files(fd):
            if not nameable(entry.rel):
                continue
            job.files += 1
            path = MemPath(store, tuple(entry.rel.split("/")))
            self._index_file(target, path, known.pop(entry.rel, None),
                             (entry.size, entry.mtime_ns))
            if job.files % CHUNK == 0:
                self._commit(target)
                yield
        for rel in known:  # indexed, but gone from the files
            target.remove(rel)
        for rel in job.redo:  # changed while a fresh index was built
            self._index_file(target, MemPath(store, tuple(rel.split("/"))))
        self._commit(target)
        if job.fresh:
            self._swap(store, target, building)
        with self._cond:
            if self._catch_ups.get(store) is job:
                if job.again:  # changed by another daemon after the walk began
                    self._catch_ups[store] = _CatchUp(store, fresh=False)
                else:
                    del self._catch_ups[store]
        job.done.set()
        seconds = time.perf_counter() - started
        log.info("recall: store %s %s: %d files in %.1f s", store,
                 "reindexed" if job.fresh else "caught up", job.files, seconds)
        if self.observe is not None:
            self.observe("catch_up", seconds)

    def _swap(self, store: str, built: StoreIndex, building: Path) -> None:
        """Put a freshly built index in the old one's place."""
        built.close()
        old = self._indexes.get(store)
        if old is not None:
            old.close()
        live = self._slot / store
        retired = self._slot / f"{store}.retired"
        shutil.rmtree(retired, ignore_errors=True)
        if live.exists():
            live.rename(retired)
        building.rename(live)
        self._open(store)
        shutil.rmtree(retired, ignore_errors=True)

    # -- queries ---------------------------------------------------------------------------

    def search(self, agent: str, query: str, *, store: str | None = None, limit: int = 10,
               page: int = 1) -> Found:
        """The ``limit`` files of page ``page`` that best match ``query``, from the
        stores ``agent`` may read (or ``store``), best first. Waits until every change
        acknowledged before the call is indexed. Records nothing: not a read.

        Raises BadQuery, PermissionDenied, NotFound (no such store), Busy."""
        try:
            terms = text.query_terms(query)
        except ValueError as error:
            raise BadQuery(str(error)) from None
        stores = self._stores_of(agent, store)
        self._wait_fresh()
        wanted = page * limit
        window = min(MAX_WINDOW, wanted * 2 + 20)
        scored: list[tuple[float, str, str, bool]] = []
        for name in stores:
            index = self._indexes.get(name)
            if index is None:
                continue
            try:
                matches = index.search(terms, window)
            except BaseException as error:
                if not failed(error):
                    raise
                with self._cond:  # the indexer makes it anew
                    self._suspect[name] = IndexFailed(repr(error))
                    self._cond.notify_all()
                continue
            for match in matches:
                weight = SUPERSEDED_WEIGHT if match.superseded else 1.0
                scored.append((match.score * weight, name, match.rel, match.superseded))
        scored.sort(key=lambda item: (-item[0], item[1], item[2]))
        hits = []
        for score, name, rel, superseded in scored[wanted - limit:wanted]:
            hit = self._hit(agent, MemPath(name, tuple(rel.split("/"))), score, terms,
                            superseded)
            if hit is not None:
                hits.append(hit)
        with self._cond:
            indexing = sorted(name for name in self._catch_ups if name in stores)
        return Found(hits, terms, page + 1 if len(scored) > wanted else None, indexing)

    def _stores_of(self, agent: str, store: str | None) -> list[str]:
        if store is None:
            return self.engine.readable_stores(agent)
        if store not in self.engine.config.stores:
            raise NotFound(f"no store named {store!r}")
        self.engine.check_access(agent, store)
        return [store]

    def _wait_fresh(self) -> None:
        with self._cond:
            target = self._enqueued
            if not self._cond.wait_for(lambda: self._indexed >= target or self._closed,
                                       FRESH_WAIT):
                raise Busy(f"the index is {target - self._indexed} changes behind; "
                           "retry shortly")

    def _hit(self, agent: str, path: MemPath, score: float, terms: list[str],
             superseded: bool) -> Hit | None:
        try:
            data, info = self.engine.unrecorded.peek(agent, path, PEEK_BYTES)
        except (NotFound, InvalidInput, PermissionDenied, OSError):
            return None  # gone or changed into something memfs does not show
        lines = text.best_lines(data.decode("utf-8", "replace"), terms)
        return Hit(str(path), round(score, 4), lines, info.last_writer, info.last_written_at,
                   superseded)

    def stats(self) -> dict[str, Any]:
        """Per store: files indexed and bytes on disk."""
        return {store: {"files": index.count(), "bytes": index.size_bytes()}
                for store, index in self._indexes.items() if index is not None}


@backing.retry_stale
def _read(engine: Engine, path: MemPath) -> tuple[int, int, bytes] | None:
    """The file's size and mtime (ns) as a walk lists them, and the first
    INDEXED_BYTES of its current version; None when it is gone or not a file memfs
    shows."""
    try:
        opened = backing.open_kept(engine.store_fd(path.store), path.parts, path.encoded)
    except (InvalidInput, FileNotFoundError, NotADirectoryError):
        return None
    if opened is None:
        return None
    fd, st = opened
    with backing.closing_fd(fd):
        size = version_of(fd, st).size  # an append under way: only what is recorded
        return st.st_size, st.st_mtime_ns, backing.read_all(fd, min(size, INDEXED_BYTES))


def _take_slot(base: Path) -> tuple[Path, int]:
    """The first slot under ``base`` that no live daemon holds: its directory, and the
    fd of its flock (held until close)."""
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    number = 0
    while True:
        fd = os.open(base / f"{number}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            number += 1
            continue
        slot = base / str(number)
        slot.mkdir(mode=0o700, exist_ok=True)
        return slot, fd
