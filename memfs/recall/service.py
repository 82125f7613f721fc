"""`Recall`: the index kept up to date with the stores, and the ranked queries on it.

**Where.** ``ROOT/state/recall/SLOT/index/``: each daemon on a root takes a slot of its
own (the first whose flock ``SLOT.lock`` is free), so no two daemons ever write one
index, and a daemon that restarts takes a slot one that stopped left, and only
catches up.

**Up to date.** The engine calls `changed` after every change it lands (its commit
listener): one enqueue, numbered. A thread of its own (``memfs-recall``) takes every
queued path at once, reads each file as it is now (or finds it gone), updates the
index and commits it, then notes the highest number done. A query first waits until
every change numbered before it started is done: a change acknowledged before a
recall starts is found by it. Catching a store up, at start (a crash, an operator's
edit in the backing directory), after another daemon's change (`store_changed`, from
the stores' generation counters) or to rebuild it (`reindex`, or an index missing or
broken), walks the store's files and compares their size and mtime with what the
index holds (a rebuild puts every file again); it runs in chunks between the queued
changes, and queries answered meanwhile say which stores are still being caught up.
Because every step reads the file as it is when the step runs, steps in any order
leave the index equal to the files.

**Hybrid.** With an embedding model (config ``[recall] model``, embed.py), each file's
chunks are embedded when it is indexed, and their vectors kept in the index beside its
words (so they are rebuilt, caught up and fresh by the same rules, and a store's are
seen only by agents that may read it); a query is embedded in process and the files
nearest it fused with the lexical ranking by reciprocal rank (`fuse`). Without a model
(none configured, or the one configured cannot be used: said once at start) recall is
lexical.

**Lexical.** BM25 over the fields (index.BOOSTS), with the proximity of the query's
words and the acronyms it spells out that the index holds (text.acronyms), then
pseudo-relevance feedback: the PRF_TERMS most telling words of the PRF_FILES best files are
added to the query at PRF_WEIGHT and it is asked again.

**Never stops the daemon.** A failure of the index (it cannot be opened, or fails in
use) is logged and the index made anew and caught up with every store; queries
meanwhile find what is indexed so far.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import fcntl
import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

from memfs.recall import embed, text
from memfs.recall.errors import BadQuery, RecallError
from memfs.recall.index import IndexFailed, Match, RecallIndex, failed
from memfs.store.engine import Engine
from memfs.store.errors import InvalidInput, NotFound, PermissionDenied
from memfs.store.fs import backing
from memfs.store.fs.paths import MemPath, nameable
from memfs.store.read.versions import version_of

log = logging.getLogger("memfs.recall")

SUPERSEDED_WEIGHT = 0.5  # a superseded decision's score is multiplied by this
INDEXED_BYTES = 4 << 20  # of each file, this much is indexed
PEEK_BYTES = 1 << 20  # of each file found, this much is searched for its best lines
CHUNK = 512  # files a catch-up handles between two looks at the queued changes
FRESH_WAIT = 30.0  # seconds a query waits for the changes before it (else busy)
FULL_RETRY_SECONDS = 5.0  # a full disk: how often the index tries again
LOW_ROOM = 64 << 20  # bytes left under which a failed index write is taken for no room
MAX_WINDOW = 2000  # matches taken from the index for one page
# pseudo-relevance feedback (tuned on the tuning half of tests/recall/evalset_blind)
PRF_FILES = 3
PRF_TERMS = 12
PRF_WEIGHT = 0.3
# reciprocal rank fusion: a file's score is the sum over the rankings that hold it of
# weight / (RRF_K + rank); the nearest files by vectors taken: DENSE_WINDOW. Tuned on the
# tuning half of tests/recall/evalset_blind (MRR 0.72, recall@5 0.89 with K 10 and
# weights 1:2; 0.75 and 0.94 so): on questions in a user's own words the vectors lead,
# and the words order what they find alike and add what they do not find. The old set
# (questions in the notes' own words, where the words lead) scored 0.94 either way.
RRF_K = 2
LEXICAL_WEIGHT = 1.0
DENSE_WEIGHT = 6.0
DENSE_WINDOW = 100
# a file whose best chunk's cosine with the query is below the floor is not near it. A
# short query's cosines run high: this model gives unrelated English texts 0.0-0.2, and up
# to 0.29 to words of one kind ("capybara" and a note about a wombat), so for a query of
# fewer than LONG_QUERY words (stop words left out) the floor is DENSE_FLOOR. A question
# in a user's own words shares less with any text: on the tuning half of
# tests/recall/evalset_blind the note asked about scored 0.2-0.3 for some of its 36
# questions while being the best or second best file by meaning; so DENSE_FLOOR_LONG for
# those (tuning-half MRR 0.746 -> 0.779, 0.795 with `fuse`'s single mark-down).
DENSE_FLOOR = 0.3
LONG_QUERY = 3
DENSE_FLOOR_LONG = 0.15


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
    """A store to catch up; ``fresh``: put every file again (a reindex), not only
    those whose size or mtime changed."""

    store: str
    fresh: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    files: int = 0
    started: bool = False
    again: bool = False  # changed by another daemon since the walk began: walk again


class Recall:
    """The index of ``engine``'s stores under ``directory`` (default
    ``ROOT/state/recall``). `start` hooks it to the engine and starts the indexer;
    `close` stops it."""

    def __init__(self, engine: Engine, directory: Path | None = None) -> None:
        self.engine = engine
        self._base = directory or engine.root / "state" / "recall"
        self._slot, self._slot_lock = _take_slot(self._base)
        self._index: RecallIndex | None = None
        self._cond = threading.Condition()
        self._queued: dict[MemPath, int] = {}  # changed paths -> their number
        self._enqueued = 0  # numbers handed out
        self._indexed = 0  # every change numbered up to this is indexed
        self._catch_ups: dict[str, _CatchUp] = {}  # waiting or under way, by store
        self._suspect: Exception | None = None  # the index failed in a query: remake it
        self._full_logged = -float("inf")  # when a full disk was last logged
        self._closed = False
        self._thread: threading.Thread | None = None
        self.observe: Callable[[str, float], None] | None = None  # (what, seconds)
        self.model: embed.Embedder | None = None  # None: lexical only
        self._model_setting = engine.config.recall.model
        self._model_loaded = False
        # the dense half of hybrid queries, run beside their lexical half (the model and
        # numpy let go of the GIL): made at the first
        self._dense_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- life --------------------------------------------------------------------------

    def start(self) -> None:
        """Queue a catch-up of each store, listen to the engine's commits and start the
        indexer, which loads the model and opens the index (a missing or broken one is
        made anew) first: the daemon serves meanwhile (queries before say every store
        is being caught up)."""
        for store in sorted(self.engine.config.stores):
            self._catch_ups[store] = _CatchUp(store)
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
        with self._pool_lock:
            pool, self._dense_pool = self._dense_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        if self._index is not None:
            self._index.close()
        os.close(self._slot_lock)

    def load_model(self) -> embed.Embedder | None:
        """The configured embedding model, loaded once its checksum matched (None:
        lexical only); says which at the first call."""
        if self._model_loaded:
            return self.model
        self._model_loaded = True
        try:
            chosen = embed.model_file(self._model_setting)
            self.model = None if chosen is None else embed.Embedder(chosen)
        except embed.ModelUnusable as error:
            log.error("recall: lexical only: the embedding model cannot be used (%s)", error)
            return None
        if self.model is None:
            log.info("recall: lexical only (config: [recall] model = \"none\")")
        else:
            log.info("recall: hybrid, with the embedding model %s (sha256 %s...)",
                     chosen.path if chosen else "", self.model.model_id)
        return self.model

    @property
    def directory(self) -> Path:
        """This daemon's index."""
        return self._slot / "index"

    def _open(self) -> RecallIndex:
        """The index, opened; one that cannot be opened is removed and made anew
        (empty: the stores' catch-ups fill it). Raises IndexFailed when even that
        fails."""
        model = self.model
        shape = ("none", 0) if model is None else (model.model_id, model.dimensions)
        try:
            index = RecallIndex(self.directory, *shape)
        except IndexFailed as error:
            if error.disk_full:  # (a broken one is made anew, whatever the room)
                raise
            log.warning("recall: the index is unusable (%s): rebuilding it from the files",
                        error)
            shutil.rmtree(self.directory, ignore_errors=True)
            index = RecallIndex(self.directory, *shape)
        self._index = index
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
                self._catch_ups[store] = _CatchUp(store)
                self._cond.notify_all()
            elif job.started:
                job.again = True

    def reindex(self, stores: list[str]) -> dict[str, int]:
        """Put every file of ``stores`` in the index again, and remove what is not a
        file of theirs, and wait until done; returns the files indexed, by store.
        Queries meanwhile find the files as indexed before or after. A reindex of a
        store not yet under way is joined rather than queued again."""
        jobs = []
        with self._cond:
            for store in stores:
                job = self._catch_ups.get(store)
                if job is None or job.started or not job.fresh:
                    job = self._catch_ups[store] = _CatchUp(
                        store, fresh=True, again=job is not None and job.started)
                jobs.append(job)
            self._cond.notify_all()
        for job in jobs:
            while not job.done.wait(1.0):
                if self._closed:
                    raise RecallError("recall stopped before the reindex was done")
        return {job.store: job.files for job in jobs}

    # -- the indexer thread ----------------------------------------------------------------

    def _run(self) -> None:
        self.load_model()  # (about 0.5 s: not in the daemon's start)
        try:
            self._open()
        except IndexFailed as error:  # the first step tries again
            log.error("recall: cannot make the index: %s", error)
        job: Generator[None, None, None] | None = None
        while True:
            with self._cond:
                if not (self._queued or self._catch_ups or job or self._suspect
                        or self._closed):
                    _trim()  # idle: give back what the index's threads freed
                while not (self._queued or self._catch_ups or job or self._suspect
                           or self._closed):
                    self._cond.wait()
                if self._closed:
                    return
                batch, self._queued = self._queued, {}
                suspect, self._suspect = self._suspect, None
            try:
                if suspect is not None:
                    if job is not None:  # it was walking the index being made anew
                        job.close()
                        job = None
                    self._broken(suspect)
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
        """Index the files of ``batch`` as they are now; commit if anything changed."""
        started = time.perf_counter()
        for _attempt in range(2):  # again once in an index made anew: still fresh after
            try:
                # None: a full disk closed it (a change landing says there may be room
                # again: index it now, so that a recall after it finds it) or it could
                # not be made at start; the catch-ups queued then read every file.
                index = self._index or self._open()
                touched = False
                for path in batch:
                    if self._closed:  # stopping: the next start catches these up
                        break
                    if nameable(path.rel) and self._index_file(index, path):
                        touched = True
                if touched:
                    self._commit(index)
                break
            except IndexFailed as error:
                self._broken(error)
                if self._full(error):
                    break  # it waits for room; then the catch-ups read every file
        if self.observe is not None:
            self.observe("changes", time.perf_counter() - started)

    def _index_file(self, index: RecallIndex, path: MemPath,
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
                index.remove(path)
                return True
            size, mtime_ns, data = current
            if known == (size, mtime_ns):
                return False
            fields = text.fields_of(path.rel, data)
            vectors = b""
            if self.model is not None and index.vectors is not None:
                vectors = self._embedded(path, fields)
            index.put(path, size, mtime_ns, fields, vectors)
            return True
        except BaseException as error:
            if not failed(error):
                raise
            raise IndexFailed(f"{index.directory}: {error!r}") from None

    def _embedded(self, path: MemPath, fields: text.Fields) -> bytes:
        """The file's chunk vectors, quantized; a zero vector (never near any query:
        the file is found by its words only) when the model fails on it, which is
        logged, and is no reason to rebuild the index."""
        assert self.model is not None
        try:
            return embed.quantize(self.model.embed(
                embed.chunks(path.rel, fields.title, fields.body)))
        except Exception as error:
            import numpy

            log.warning("recall: cannot embed %s (%r): found by its words only", path, error)
            return embed.quantize(numpy.zeros((1, self.model.dimensions), numpy.float32))

    def _commit(self, index: RecallIndex) -> None:
        """Raises IndexFailed."""
        try:
            index.commit()
        except BaseException as error:
            if not failed(error):
                raise
            raise IndexFailed(f"{index.directory}: {error!r}") from None

    def _full(self, error: IndexFailed) -> bool:
        """Whether ``error`` means no room rather than a broken index: it says so, or
        the file system has less than LOW_ROOM left (tantivy reports an ENOSPC in its
        worker threads only as "an index writer was killed"). Removing the index then
        would free room a refused change could take; it is tried again instead, and a
        really broken one is made anew when it is opened again."""
        if error.disk_full:
            return True
        try:
            st = os.statvfs(self._base)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < LOW_ROOM

    def _broken(self, error: Exception) -> None:
        """The index failed in use: make it anew and catch every store up with it (on
        the indexer thread). The catch-ups under way or waiting are done again (a
        reindex waiting for one waits for its new walk). A full disk is no broken
        index: it is kept (removing it would free room the files need, and a change
        refused for lack of room would then land), and the stores are caught up with
        it once there is room again, tried every FULL_RETRY_SECONDS."""
        full = isinstance(error, IndexFailed) and self._full(error)
        if full:
            if time.monotonic() >= self._full_logged + FULL_RETRY_SECONDS * 6:
                self._full_logged = time.monotonic()
                log.warning("recall: the disk is full: the index waits, and catches up "
                            "once there is room (%s)", error)
        else:
            log.warning("recall: the index failed (%s): rebuilding it from the files", error)
        old, self._index = self._index, None
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        if full:
            with self._cond:
                for store in sorted(self.engine.config.stores):
                    job = self._catch_ups.setdefault(store, _CatchUp(store))
                    job.started = job.again = False
                self._cond.wait(FULL_RETRY_SECONDS)  # the indexer has nothing else to do
            return  # the next catch-up opens it again
        shutil.rmtree(self.directory, ignore_errors=True)
        with self._cond:
            for store in sorted(self.engine.config.stores):
                job = self._catch_ups.setdefault(store, _CatchUp(store))
                job.started = job.again = False  # walked again from the start
        self._open()

    def _catch_up(self, job: _CatchUp) -> Generator[None, None, None]:
        """Make the index hold exactly ``job.store``'s files, a chunk per step."""
        try:
            yield from self._walk(job)
        except IndexFailed as error:
            self._broken(error)

    def _walk(self, job: _CatchUp) -> Generator[None, None, None]:
        store, started = job.store, time.perf_counter()
        job.started = True
        index = self._index or self._open()
        try:
            known = index.known(store)
        except BaseException as error:
            if not failed(error):
                raise
            raise IndexFailed(f"{index.directory}: {error!r}") from None
        fd = self.engine.store_fd(store)
        job.files = 0
        for entry in backing.walk_files(fd):
            if self._closed:  # stopping (embedding is slow): the next start walks again
                return
            if not nameable(entry.rel):
                continue
            job.files += 1
            was = known.pop(entry.rel, None)
            self._index_file(index, MemPath(store, tuple(entry.rel.split("/"))),
                             None if job.fresh else was, (entry.size, entry.mtime_ns))
            if job.files % CHUNK == 0:
                self._commit(index)
                yield
        for rel in known:  # indexed, but gone from the files
            index.remove(MemPath(store, tuple(rel.split("/"))))
        self._commit(index)
        with self._cond:
            if self._catch_ups.get(store) is job:
                if job.again:  # changed by another daemon after the walk began
                    self._catch_ups[store] = _CatchUp(store)
                else:
                    del self._catch_ups[store]
        job.done.set()
        seconds = time.perf_counter() - started
        log.info("recall: store %s %s: %d files in %.1f s", store,
                 "reindexed" if job.fresh else "caught up", job.files, seconds)
        if self.observe is not None:
            self.observe("catch_up", seconds)

    # -- queries ---------------------------------------------------------------------------

    def search(self, agent: str, query: str, *, store: str | None = None, limit: int = 10,
               page: int = 1, hybrid: bool = True) -> Found:
        """The ``limit`` files of page ``page`` that best match ``query``, from the
        stores ``agent`` may read (or ``store``), best first: hybrid when there is a
        model (and ``hybrid``), else lexical. Waits until every change acknowledged
        before the call is indexed. Records nothing: not a read.

        Raises BadQuery, PermissionDenied, NotFound (no such store), Busy."""
        try:
            terms = text.query_terms(query)
        except ValueError as error:
            raise BadQuery(str(error)) from None
        stores = self._stores_of(agent, store)
        if not terms:  # a query of punctuation: no file matches it
            return Found([], [], None, [])
        self._wait_fresh()
        wanted = page * limit
        window = min(MAX_WINDOW, wanted * 2 + 20)
        index = self._index
        try:
            dense_half = None
            if hybrid and self.model is not None and index is not None:
                floor = DENSE_FLOOR_LONG if len(terms) >= LONG_QUERY else DENSE_FLOOR
                dense_half = self._pool().submit(self._dense, self.model, index, query,
                                                 stores, max(DENSE_WINDOW, window), floor)
            terms = terms + self._spelled(index, query, terms)
            lexical = [] if index is None else self._lexical(agent, index, terms, stores,
                                                             window)
            dense = [] if dense_half is None else dense_half.result()
        except BaseException as error:
            if not failed(error):
                raise
            with self._cond:  # the indexer makes it anew
                self._suspect = IndexFailed(repr(error))
                self._cond.notify_all()
            lexical, dense = [], []
        scored = fuse(lexical, dense) if dense else [
            (match.score * (SUPERSEDED_WEIGHT if match.superseded else 1.0), match)
            for match in lexical]
        scored.sort(key=lambda item: (-item[0], str(item[1].path)))
        hits = []
        for score, match in scored[wanted - limit:wanted]:
            hit = self._hit(agent, match.path, score, terms, match.superseded)
            if hit is not None:
                hits.append(hit)
        with self._cond:
            indexing = sorted(name for name in self._catch_ups if name in stores)
            if self._suspect is not None or self._index is None:
                indexing = list(stores)
        return Found(hits, terms, page + 1 if len(scored) > wanted else None, indexing)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._dense_pool is None:
                self._dense_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=2, thread_name_prefix="memfs-recall-dense")
            return self._dense_pool

    @staticmethod
    def _dense(model: embed.Embedder, index: RecallIndex, query: str, stores: list[str],
               window: int, floor: float) -> list[Match]:
        """The dense ranking: the files nearest the query's embedding, down to
        ``floor``. (On a thread of the pool, while the lexical half runs: measured at
        100,000 notes, a recall's wall time less about the query's embedding.)"""
        asked = model.embed([query])[0]
        return [match for match in index.nearest(asked, stores, window)
                if match.score >= floor]

    def _lexical(self, agent: str, index: RecallIndex, terms: list[str], stores: list[str],
                 window: int) -> list[Match]:
        """The lexical ranking: BM25 with proximity, asked again with the words the
        best files add (pseudo-relevance feedback)."""
        first = index.search(terms, stores, window)
        added = self._feedback(agent, index, terms, first[:PRF_FILES])
        if not added:
            return first
        weights = {term: 1.0 for term in terms} | added
        return index.search(list(weights), stores, window, weights)

    @staticmethod
    def _spelled(index: RecallIndex | None, query: str, terms: list[str]) -> list[str]:
        """The acronyms the query spells out (text.acronyms) that the index holds and
        the query does not ask already: asked as words of the query."""
        if index is None:
            return []
        spelled = [term for word in text.acronyms(query) for term in text.stems(word)
                   if term not in terms]
        held = index.rarity(spelled)
        return [term for term in dict.fromkeys(spelled) if held.get(term, 0.0) > 0]

    def _feedback(self, agent: str, index: RecallIndex, terms: list[str],
                  best: list[Match]) -> dict[str, float]:
        """The PRF_TERMS words of ``best`` files most telling of them (their share of
        each file's words, times their rarity in the index), not asked already, each
        with a weight of up to PRF_WEIGHT."""
        if not best or PRF_TERMS == 0:
            return {}
        weight: dict[str, float] = {}
        for match in best:
            try:
                data, _ = self.engine.unrecorded.peek(agent, match.path, PEEK_BYTES)
            except (NotFound, InvalidInput, PermissionDenied, OSError):
                continue
            found = text.stems(data.decode("utf-8", "replace"))
            if not found:
                continue
            share = 1.0 / len(found)
            for term in found:
                if term not in text.STOPWORDS and len(term) > 2 and not term.isdigit():
                    weight[term] = weight.get(term, 0.0) + share
        for term in terms:
            weight.pop(term, None)
        rarity = index.rarity(list(weight))
        ranked = sorted(((share * rarity.get(term, 0.0), term)
                         for term, share in weight.items()), reverse=True)[:PRF_TERMS]
        if not ranked or ranked[0][0] <= 0:
            return {}
        top = ranked[0][0]
        return {term: PRF_WEIGHT * value / top for value, term in ranked if value > 0}

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
        decoded = data.decode("utf-8", "replace")
        # a file found by its meaning alone holds no word asked: its first line instead
        lines = text.best_lines(decoded, terms) or text.first_lines(decoded, 1)
        return Hit(str(path), round(score, 4), lines, info.last_writer, info.last_written_at,
                   superseded)

def fuse(lexical: list[Match], dense: list[Match]) -> list[tuple[float, Match]]:
    """Reciprocal rank fusion of the two rankings (each best first): a file's score is
    LEXICAL_WEIGHT / (RRF_K + its lexical rank) plus DENSE_WEIGHT / (RRF_K + its dense
    rank), ranks from 1, times SUPERSEDED_WEIGHT for a superseded decision. (Once, on
    the fused score: applied in each ranking as well, it buried a superseded decision
    asked for by what it said: tuning-half MRR 0.779 against 0.795, the old set 0.950
    either way.)"""
    fused: dict[MemPath, float] = {}
    matches: dict[MemPath, Match] = {}
    for ranking, weight in ((lexical, LEXICAL_WEIGHT), (dense, DENSE_WEIGHT)):
        for rank, match in enumerate(sorted(ranking, key=lambda match: -match.score),
                                     start=1):
            fused[match.path] = fused.get(match.path, 0.0) + weight / (RRF_K + rank)
            matches.setdefault(match.path, match)
    return [(score * (SUPERSEDED_WEIGHT if matches[path].superseded else 1.0), matches[path])
            for path, score in fused.items()]


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


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def _trim() -> None:
    """Return the memory freed by the index's threads to the system: glibc keeps what
    each thread frees in that thread's arena (measured: a daemon's resident memory
    grew by 70-100 MB over a few thousand commits without it, about 10 MB with it)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


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
