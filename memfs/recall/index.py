"""Recall's keyword index: one tantivy index in a directory of its own, holding every
store's files (each document names its store; a query is limited to the stores asked).
One index rather than one per store: each tantivy writer keeps its own threads and
memory (measured: about 6 threads and up to 150 MB of resident memory a writer).

Each file is one document: ``STORE/PATH`` (the key, also kept with the file's size and
mtime, to tell at catch-up which files changed), its store, its path's words, title,
headings and text (terms with their frequencies; the text's positions too, for the
proximity of query words), whether it is a superseded decision, and, when recall has an
embedding model, its chunks' vectors (embed.py: int8, checksummed). Nothing of the text
is stored: the files are the content, and the best lines are read from them at query
time. The index is never the source of truth: any failure to open or use it (vectors
whose checksum fails included) means "rebuild it from the files".

The vectors are also held in memory (`Vectors`, loaded when the index is opened and
changed with each commit), where a query compares them all with its own.

Not thread-safe for writing: one thread (the indexer) writes; any thread searches.

Its files are memory-mapped: reading a page that a file truncated by hand no longer has
would end the process (SIGBUS). So before each search, commit and listing, `check`
compares the files' sizes with those they had when last opened or committed, and
refuses to use an index one of whose files shrank (IndexFailed: rebuild it).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfs.recall.embed import dequantize
from memfs.recall.text import ANALYZER, Fields, analyzer
from memfs.store.fs.paths import MemPath

# The index's format: a directory holding another (an older memfs, another analyzer,
# vectors of another model) is rebuilt. Bump it whenever the schema or the analyzer
# changes; the model's id is written after it.
FORMAT = "memfs-recall-4"
FORMAT_FILE = "memfs-format"
WRITER_HEAP = 15_000_000  # bytes: tantivy's smallest writer arena
# How much each field weighs in a document's score (tuned on the tuning half of
# tests/recall/evalset_blind)
BOOSTS = {"path": 1.0, "title": 3.0, "headings": 0.5, "body": 1.0}
# A pair of query words that follow each other within this many words of the text
# adds PROXIMITY_BOOST times a term's weight
PROXIMITY_SLOP = 3
PROXIMITY_BOOST = 1.0
CHECK_BYTES = 4  # of a file's vectors' checksum (blake2b: catches corruption, not forgery)
BLOCK_ROWS = 512  # vectors compared with a query at once
# files of the index that are read whole, never memory-mapped (nor are those whose
# name starts with "."): rewritten under a name that another inode may take, such a
# file can be "shorter" without having been truncated
UNMAPPED = frozenset({"meta.json", FORMAT_FILE})


class IndexFailed(Exception):
    """The index cannot be opened or used (missing parts, garbage, a format of another
    version): rebuild it; unless `disk_full`."""

    @property
    def disk_full(self) -> bool:
        """The file system is full (or over quota): the index is not broken, there is
        no room to write it, and removing it would only free room the files need."""
        return _DISK_FULL.search(str(self)) is not None


_DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded|os error (?:28|122)\b")


def failed(error: BaseException) -> bool:
    """Whether ``error`` is a failure of the index (tantivy raises ValueError, or a
    Rust panic, which is a BaseException), rather than the process being stopped."""
    return not isinstance(error, KeyboardInterrupt | SystemExit | GeneratorExit)


@dataclass(frozen=True)
class Match:
    path: MemPath
    score: float
    superseded: bool


def _schema() -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("key", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("store", tokenizer_name="raw", index_option="basic")
    for name in BOOSTS:
        builder.add_text_field(name, tokenizer_name=ANALYZER,
                               index_option="position" if name == "body" else "freq")
    builder.add_integer_field("superseded", stored=True)
    builder.add_integer_field("size", stored=True)
    builder.add_integer_field("mtime", stored=True)
    builder.add_bytes_field("vectors", stored=True)
    return builder.build()


def _path_of(key: str) -> MemPath:
    store, _, rel = key.partition("/")
    return MemPath(store, tuple(rel.split("/")))


def sealed(vectors: bytes) -> bytes:
    """``vectors`` with a checksum before them (see `unsealed`)."""
    return hashlib.blake2b(vectors, digest_size=CHECK_BYTES).digest() + vectors


def unsealed(data: bytes) -> bytes:
    """The vectors `sealed` wrapped. Raises IndexFailed when they are not what was
    written (a corrupt index: never a wrong answer)."""
    check, vectors = data[:CHECK_BYTES], data[CHECK_BYTES:]
    if hashlib.blake2b(vectors, digest_size=CHECK_BYTES).digest() != check:
        raise IndexFailed("a file's vectors fail their checksum")
    return vectors


class Vectors:
    """Every indexed file's chunk vectors (int8 rows with a scale each), in memory, by
    key; rows of files removed or indexed again are dropped when they outnumber the
    others. Not thread-safe: RecallIndex holds its lock around every use."""

    def __init__(self, dimensions: int) -> None:
        import numpy as np

        self._np = np
        self.dimensions = dimensions
        self._rows = np.zeros((0, dimensions), dtype=np.int8)
        self._scales = np.zeros(0, dtype=np.float32)
        self._owner = np.zeros(0, dtype=np.int32)  # row -> document number
        self._used = 0
        self._docs: list[tuple[str, str, bool]] = []  # number -> (key, store, superseded)
        self._store_ids: dict[str, int] = {}
        self._codes = np.zeros(0, dtype=np.int32)  # number -> its store's id, -1: gone
        self._number: dict[str, int] = {}  # key -> its live document number
        self._dead_rows = 0

    def put(self, key: str, store: str, superseded: bool, vectors: bytes) -> None:
        """Raises ValueError when ``vectors`` are not rows of this table's width."""
        rows, scales = dequantize(vectors, self.dimensions)
        self.remove(key)
        np = self._np
        number = len(self._docs)
        self._docs.append((key, store, superseded))
        if number >= len(self._codes):
            self._codes = np.resize(self._codes, max(1024, 2 * len(self._codes)))
        self._codes[number] = self._store_ids.setdefault(store, len(self._store_ids))
        self._number[key] = number
        need = self._used + len(rows)
        if need > len(self._rows):
            grown = max(need, 2 * len(self._rows), 1024)
            self._rows = np.resize(self._rows, (grown, self.dimensions))
            self._scales = np.resize(self._scales, grown)
            self._owner = np.resize(self._owner, grown)
        self._rows[self._used:need] = rows
        self._scales[self._used:need] = scales
        self._owner[self._used:need] = number
        self._used = need

    def remove(self, key: str) -> None:
        number = self._number.pop(key, None)
        if number is None:
            return
        self._codes[number] = -1
        self._dead_rows += int((self._owner[:self._used] == number).sum())
        if self._dead_rows > max(1024, self._used // 2):
            self._compact()

    def _compact(self) -> None:
        np = self._np
        alive = self._codes[self._owner[:self._used]] >= 0
        rows, scales = self._rows[:self._used][alive], self._scales[:self._used][alive]
        old = self._owner[:self._used][alive]
        renumber = {n: at for at, n in enumerate(sorted(set(old.tolist())))}
        self._docs = [self._docs[n] for n in sorted(renumber)]
        self._codes = np.array([self._store_ids[doc[1]] for doc in self._docs],
                               dtype=np.int32)
        self._number = {doc[0]: at for at, doc in enumerate(self._docs)}
        self._rows, self._scales = rows.copy(), scales.copy()
        self._owner = np.array([renumber[n] for n in old.tolist()], dtype=np.int32)
        self._used, self._dead_rows = len(rows), 0

    def search(self, query: Any, stores: list[str], limit: int) -> list[tuple[str, float,
                                                                            bool]]:
        """The ``limit`` files of ``stores`` whose best chunk is nearest ``query`` (a
        unit vector): (key, cosine, superseded), best first."""
        np = self._np
        if not self._used:
            return []
        # a store id -> whether it is asked (the last entry: -1, a file gone)
        asked = np.zeros(len(self._store_ids) + 1, dtype=bool)
        asked[[self._store_ids[store] for store in stores if store in self._store_ids]] = True
        keep = asked[self._codes[:len(self._docs)]]
        query = query.astype(np.float32)
        scores = np.empty(self._used, dtype=np.float32)
        # rows converted to float a block at a time, into a buffer that stays in the
        # cache (measured: 10x faster than converting them all at once)
        block = np.empty((BLOCK_ROWS, self.dimensions), dtype=np.float32)
        for start in range(0, self._used, BLOCK_ROWS):
            end = min(start + BLOCK_ROWS, self._used)
            np.copyto(block[:end - start], self._rows[start:end], casting="unsafe")
            np.dot(block[:end - start], query, out=scores[start:end])
        scores *= self._scales[:self._used]
        best = np.full(len(self._docs), -np.inf, dtype=np.float32)
        np.maximum.at(best, self._owner[:self._used], scores)
        best[~keep] = -np.inf
        count = min(limit, int(np.isfinite(best).sum()))
        if count == 0:
            return []
        top = np.argpartition(-best, count - 1)[:count]
        top = top[np.argsort(-best[top], kind="stable")]
        return [(self._docs[n][0], float(best[n]), self._docs[n][2]) for n in top.tolist()]


class RecallIndex:
    """The index in ``directory`` (created when missing). Raises IndexFailed when
    what is there cannot be opened."""

    def __init__(self, directory: Path, model: str = "none", dimensions: int = 0) -> None:
        """``model``: the id of the embedding model whose vectors it keeps ("none":
        no vectors), of ``dimensions``."""
        import tantivy

        self.directory = directory
        self._writer: Any = None
        self._searcher: Any = None
        self._watched: list[tuple[str, int, int]] = []  # `check`'s: (path, inode, size)
        self._lock = threading.Lock()  # the searcher's, the sizes' and vectors' swaps
        self.vectors = Vectors(dimensions) if model != "none" else None
        self._pending: dict[str, tuple[str, bool, bytes] | None] = {}  # until commit
        format_ = f"{FORMAT}\nmodel {model}\n"
        try:
            fresh = not (directory / FORMAT_FILE).exists()
            if fresh:
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir(mode=0o700, parents=True)
            elif (directory / FORMAT_FILE).read_text() != format_:
                raise IndexFailed(f"{directory} holds another format")
            self._index: Any = tantivy.Index(_schema(), path=str(directory),
                                             reuse=not fresh)
            self._index.register_tokenizer(ANALYZER, analyzer())
            self._schema = self._index.schema
            self._searcher = self._index.searcher()
            if fresh:
                (directory / FORMAT_FILE).write_text(format_)
            self._watched = _watched(directory, _private(directory))
            if self.vectors is not None:
                self._load_vectors()
        except IndexFailed:
            raise
        except BaseException as error:
            if not failed(error):
                raise
            raise IndexFailed(f"{directory}: {error!r}") from None

    def _load_vectors(self) -> None:
        """Read every document's vectors into memory. Raises IndexFailed."""
        import tantivy

        assert self.vectors is not None
        searcher = self._searcher
        if searcher.num_docs == 0:
            return
        for _, address in searcher.search(tantivy.Query.all_query(), searcher.num_docs).hits:
            doc = searcher.doc(address)
            key = doc["key"][0]
            stored = doc.get_first("vectors")
            if stored is None:
                raise IndexFailed(f"{key} has no vectors")
            try:
                self.vectors.put(key, key.partition("/")[0], bool(doc["superseded"][0]),
                                 unsealed(bytes(stored)))
            except ValueError as error:
                raise IndexFailed(f"{key}: {error}") from None

    # -- writing (the indexer thread) ----------------------------------------------------

    def _writing(self) -> Any:
        if self._writer is None:
            self._writer = self._index.writer(heap_size=WRITER_HEAP, num_threads=1)
            _private(self.directory)  # its lock file
        return self._writer

    def put(self, path: MemPath, size: int, mtime_ns: int, fields: Fields,
            vectors: bytes = b"") -> None:
        """Index (or index again) the file ``path``, with its chunks' ``vectors``
        (embed.quantize's; none when the index keeps none); seen once `commit`
        returns."""
        import tantivy

        writer = self._writing()
        writer.delete_documents_by_term("key", str(path))
        doc = tantivy.Document(
            key=str(path), store=path.store, path=fields.path, title=fields.title,
            headings=fields.headings, body=fields.body, superseded=int(fields.superseded),
            size=size, mtime=mtime_ns)
        if self.vectors is not None:
            doc.add_bytes("vectors", sealed(vectors))
            self._pending[str(path)] = (path.store, fields.superseded, vectors)
        writer.add_document(doc)

    def remove(self, path: MemPath) -> None:
        self._writing().delete_documents_by_term("key", str(path))
        if self.vectors is not None:
            self._pending[str(path)] = None

    def commit(self) -> None:
        """Make every put and remove since the last commit visible to searches.
        Raises IndexFailed (see `check`)."""
        if self._writer is None:
            return
        self.check()
        self._writer.commit()
        self._index.reload()
        searcher = self._index.searcher()
        watched = _watched(self.directory, _private(self.directory))
        pending, self._pending = self._pending, {}
        with self._lock:
            self._searcher, self._watched = searcher, watched
            if self.vectors is not None:
                for key, put in pending.items():
                    if put is None:
                        self.vectors.remove(key)
                    else:
                        self.vectors.put(key, put[0], put[1], put[2])

    def close(self) -> None:
        """Let go of the index (what was not committed is dropped: the files hold it),
        once its writer's merges are over: none may write into its folder later."""
        with self._lock:
            writer, self._writer = self._writer, None
            self._searcher = self._index = None
        if writer is not None:
            try:
                writer.wait_merging_threads()
            except BaseException as error:
                if not failed(error):
                    raise

    def check(self) -> None:
        """Raise IndexFailed if one of the index's files is shorter than when it was
        last opened or committed (truncated by hand: reading it would be fatal)."""
        with self._lock:
            watched = self._watched
        for name, inode, size in watched:
            try:
                now = os.stat(name)
            except FileNotFoundError:
                continue  # removed: the pages already mapped stay readable
            # (a file tantivy replaced is another inode: not truncated)
            if now.st_ino == inode and now.st_size < size:
                raise IndexFailed(f"{name} was truncated")

    # -- reading (any thread) ------------------------------------------------------------

    def _current(self) -> Any:
        """The searcher of the last commit. Raises IndexFailed (see `check`)."""
        self.check()
        with self._lock:
            if self._searcher is None:
                raise IndexFailed(f"{self.directory} is closed")
            return self._searcher

    def known(self, store: str) -> dict[str, tuple[int, int]]:
        """Every file of ``store`` indexed (its path below the store), with the size and
        mtime it had then."""
        import tantivy

        searcher = self._current()
        count = searcher.num_docs
        if count == 0:
            return {}
        query = tantivy.Query.term_query(self._schema, "store", store)
        found = {}
        for _, address in searcher.search(query, count).hits:
            doc = searcher.doc(address)
            found[doc["key"][0].partition("/")[2]] = (doc["size"][0], doc["mtime"][0])
        return found

    def search(self, terms: list[str], stores: list[str], limit: int,
               weights: dict[str, float] | None = None) -> list[Match]:
        """The ``limit`` best files of ``stores`` for ``terms`` (index terms: see
        text.query_terms), by BM25 over the fields, weighted by BOOSTS and by
        ``weights`` (a term's, default 1), plus PROXIMITY_BOOST for each pair of
        consecutive terms near each other in the text; best first. Only files holding
        one of the terms of weight 1 at least are found: terms of less weight (added
        by feedback) change the order of those, and bring in no other."""
        import tantivy

        if not stores:
            return []
        searcher = self._current()
        schema, query_of = self._schema, tantivy.Query
        weights = weights or {}
        asked = [term for term in terms if weights.get(term, 1.0) >= 1.0]
        added = [term for term in terms if weights.get(term, 1.0) < 1.0]

        def fields_of(chosen: list[str]) -> list[tuple[Any, Any]]:
            return [(tantivy.Occur.Should,
                     query_of.boost_query(query_of.term_query(schema, field, term),
                                          boost * weights.get(term, 1.0)))
                    for term in chosen for field, boost in BOOSTS.items()]

        near = [(tantivy.Occur.Should,
                 query_of.boost_query(query_of.phrase_query(schema, "body", [first, second],
                                                            slop=PROXIMITY_SLOP),
                                      PROXIMITY_BOOST))
                for first, second in itertools.pairwise(asked)]
        within = query_of.const_score_query(
            query_of.term_set_query(schema, "store", list(stores)), 0.0)
        # the files holding a word asked, scored by them; the words added only score
        # those (a clause of its own: measured at 100,000 notes, 1.6x faster than one union
        # of them all)
        needed = [(tantivy.Occur.Must, query_of.boolean_query(fields_of(asked) + near)),
                  (tantivy.Occur.Must, within)]
        if added:
            needed.append((tantivy.Occur.Should, query_of.boolean_query(fields_of(added))))
        query = query_of.boolean_query(needed)
        found = []
        for score, address in searcher.search(query, limit).hits:
            doc = searcher.doc(address)
            store, _, rel = doc["key"][0].partition("/")
            found.append(Match(MemPath(store, tuple(rel.split("/"))), score,
                               bool(doc["superseded"][0])))
        return found

    def rarity(self, terms: list[str]) -> dict[str, float]:
        """Each term's inverse document frequency in the texts, log(1 + N / df)
        (0 for a term no text holds)."""
        import math

        searcher = self._current()
        count = searcher.num_docs
        found = {}
        for term in terms:
            df = searcher.doc_freq("body", term)
            found[term] = math.log(1 + count / df) if df else 0.0
        return found

    def nearest(self, query: Any, stores: list[str], limit: int) -> list[Match]:
        """The ``limit`` files of ``stores`` nearest the unit vector ``query`` by
        their best chunk's cosine; best first. None without vectors."""
        if self.vectors is None or not stores:
            return []
        self.check()
        with self._lock:
            found = self.vectors.search(query, stores, limit)
        return [Match(_path_of(key), score, superseded) for key, score, superseded in found]

    def count(self) -> int:
        return int(self._current().num_docs)

    def size_bytes(self) -> int:
        """The bytes of its files (their sizes, as a store's bytes are counted)."""
        return sum(size for _, size in _private(self.directory).values())


def _watched(directory: Path, sizes: dict[str, tuple[int, int]],
             ) -> list[tuple[str, int, int]]:
    """The files of ``sizes`` that `check` looks at (those memory-mapped), as (path,
    inode, size): made once a commit, as a query checks them each time."""
    return [(os.path.join(directory, name), inode, size)
            for name, (inode, size) in sizes.items()
            if not name.startswith(".") and name not in UNMAPPED]


def _private(directory: Path) -> dict[str, tuple[int, int]]:
    """Make the index's files readable by the serving user only (tantivy makes them
    with the process's umask); returns their inodes and sizes, by name."""
    sizes = {}
    for entry in os.scandir(directory):
        try:
            if entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                if st.st_mode & 0o077:
                    os.chmod(entry.path, 0o600)
                sizes[entry.name] = (st.st_ino, st.st_size)
        except FileNotFoundError:
            continue  # a temporary file of a merge, gone since the listing
    return sizes
