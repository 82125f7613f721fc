"""Recall's keyword index: one tantivy index in a directory of its own, holding every
store's files (each document names its store; a query is limited to the stores asked).
One index rather than one per store: each tantivy writer keeps its own threads and
memory (measured: about 6 threads and up to 150 MB of resident memory a writer).

Each file is one document: ``STORE/PATH`` (the key, also kept with the file's size and
mtime, to tell at catch-up which files changed), its store, its path's words, title and
text (terms with their frequencies, no positions: BM25 needs no more), and whether it
is a superseded decision. Nothing of the text is stored: the files are the content,
and the best lines are read from them at query time. The index is never the source of
truth: any failure to open or use it means "rebuild it from the files".

Not thread-safe for writing: one thread (the indexer) writes; any thread searches.

Its files are memory-mapped: reading a page that a file truncated by hand no longer has
would end the process (SIGBUS). So before each search, commit and listing, `check`
compares the files' sizes with those they had when last opened or committed, and
refuses to use an index one of whose files shrank (IndexFailed: rebuild it).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfs.recall.text import ANALYZER, Fields, analyzer
from memfs.store.paths import MemPath

# The index's format: a directory holding another (an older memfs, another analyzer)
# is rebuilt. Bump it whenever the schema or the analyzer changes.
FORMAT = "memfs-recall-2"
FORMAT_FILE = "memfs-format"
WRITER_HEAP = 15_000_000  # bytes: tantivy's smallest writer arena
# How much each field weighs in a document's score (tuned on tests/recall/evalset).
BOOSTS = {"path": 1.0, "title": 4.0, "body": 1.0}


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
        builder.add_text_field(name, tokenizer_name=ANALYZER, index_option="freq")
    builder.add_integer_field("superseded", stored=True)
    builder.add_integer_field("size", stored=True)
    builder.add_integer_field("mtime", stored=True)
    return builder.build()


class RecallIndex:
    """The index in ``directory`` (created when missing). Raises IndexFailed when
    what is there cannot be opened."""

    def __init__(self, directory: Path) -> None:
        import tantivy

        self.directory = directory
        self._writer: Any = None
        self._searcher: Any = None
        self._sizes: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()  # the searcher's and the sizes' swaps
        try:
            fresh = not (directory / FORMAT_FILE).exists()
            if fresh:
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir(mode=0o700, parents=True)
            elif (directory / FORMAT_FILE).read_text() != FORMAT:
                raise IndexFailed(f"{directory} holds another format")
            self._index: Any = tantivy.Index(_schema(), path=str(directory),
                                             reuse=not fresh)
            self._index.register_tokenizer(ANALYZER, analyzer())
            self._schema = self._index.schema
            self._searcher = self._index.searcher()
            if fresh:
                (directory / FORMAT_FILE).write_text(FORMAT)
            self._sizes = _private(directory)
        except IndexFailed:
            raise
        except BaseException as error:
            if not failed(error):
                raise
            raise IndexFailed(f"{directory}: {error!r}") from None

    # -- writing (the indexer thread) ----------------------------------------------------

    def _writing(self) -> Any:
        if self._writer is None:
            self._writer = self._index.writer(heap_size=WRITER_HEAP, num_threads=1)
            _private(self.directory)  # its lock file
        return self._writer

    def put(self, path: MemPath, size: int, mtime_ns: int, fields: Fields) -> None:
        """Index (or index again) the file ``path``; seen once `commit` returns."""
        import tantivy

        writer = self._writing()
        writer.delete_documents_by_term("key", str(path))
        writer.add_document(tantivy.Document(
            key=str(path), store=path.store, path=fields.path, title=fields.title,
            body=fields.body, superseded=int(fields.superseded), size=size, mtime=mtime_ns))

    def remove(self, path: MemPath) -> None:
        self._writing().delete_documents_by_term("key", str(path))

    def commit(self) -> None:
        """Make every put and remove since the last commit visible to searches.
        Raises IndexFailed (see `check`)."""
        if self._writer is None:
            return
        self.check()
        self._writer.commit()
        self._index.reload()
        searcher = self._index.searcher()
        sizes = _private(self.directory)
        with self._lock:
            self._searcher, self._sizes = searcher, sizes

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
            sizes = self._sizes
        for name, (inode, size) in sizes.items():
            try:
                now = os.stat(self.directory / name)
            except FileNotFoundError:
                continue  # removed: the pages already mapped stay readable
            # (a file tantivy replaced, such as meta.json, is another inode: not truncated)
            if now.st_ino == inode and now.st_size < size:
                raise IndexFailed(f"{self.directory / name} was truncated")

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

    def search(self, terms: list[str], stores: list[str], limit: int) -> list[Match]:
        """The ``limit`` best files of ``stores`` for ``terms`` (index terms: see
        text.query_terms), by BM25 over the fields, weighted by BOOSTS; best first."""
        import tantivy

        if not stores:
            return []
        searcher = self._current()
        schema, query_of = self._schema, tantivy.Query
        words = query_of.boolean_query([
            (tantivy.Occur.Should,
             query_of.boost_query(query_of.term_query(schema, field, term), boost))
            for term in terms for field, boost in BOOSTS.items()])
        within = query_of.const_score_query(
            query_of.term_set_query(schema, "store", list(stores)), 0.0)
        query = query_of.boolean_query([(tantivy.Occur.Must, words),
                                        (tantivy.Occur.Must, within)])
        found = []
        for score, address in searcher.search(query, limit).hits:
            doc = searcher.doc(address)
            store, _, rel = doc["key"][0].partition("/")
            found.append(Match(MemPath(store, tuple(rel.split("/"))), score,
                               bool(doc["superseded"][0])))
        return found

    def count(self) -> int:
        return int(self._current().num_docs)

    def size_bytes(self) -> int:
        """The bytes of its files (their sizes, as a store's bytes are counted)."""
        return sum(size for _, size in _private(self.directory).values())


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
