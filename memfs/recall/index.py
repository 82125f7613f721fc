"""One store's keyword index: a tantivy index in a directory of its own.

Each file is one document: its path below the store (the key, also kept with the
file's size and mtime, to tell at catch-up which files changed), its path's words,
title and text (terms with their frequencies, no positions: BM25 needs no more), and
whether it is a superseded decision. Nothing of the text is stored: the files are the
content, and the best lines are read from them at query time. The index is never the
source of truth: any failure to open or use it means "rebuild it from the files".

Not thread-safe for writing: one thread (the indexer) writes; any thread searches.

Its files are memory-mapped: reading a page that a file truncated by hand no longer has
would end the process (SIGBUS). So before each search, commit and listing, `check`
compares the files' sizes with those they had when last opened or committed, and
refuses to use an index one of whose files shrank (IndexFailed: rebuild it).
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfs.recall.text import ANALYZER, Fields, analyzer

# The index's format: a directory holding another (an older memfs, another analyzer)
# is rebuilt. Bump it whenever the schema or the analyzer changes.
FORMAT = "memfs-recall-1"
FORMAT_FILE = "memfs-format"
WRITER_HEAP = 15_000_000  # bytes: tantivy's smallest writer arena
# How much each field weighs in a document's score (tuned on tests/recall/evalset).
BOOSTS = {"path": 1.0, "title": 4.0, "body": 1.0}


class IndexFailed(Exception):
    """The index cannot be opened or used (missing parts, garbage, a format of another
    version): rebuild it."""


def failed(error: BaseException) -> bool:
    """Whether ``error`` is a failure of the index (tantivy raises ValueError, or a
    Rust panic, which is a BaseException), rather than the process being stopped."""
    return not isinstance(error, KeyboardInterrupt | SystemExit | GeneratorExit)


@dataclass(frozen=True)
class Match:
    rel: str
    score: float
    superseded: bool


def _schema() -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("key", stored=True, tokenizer_name="raw", index_option="basic")
    for name in BOOSTS:
        builder.add_text_field(name, tokenizer_name=ANALYZER, index_option="freq")
    builder.add_integer_field("superseded", stored=True)
    builder.add_integer_field("size", stored=True)
    builder.add_integer_field("mtime", stored=True)
    return builder.build()


class StoreIndex:
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

    def put(self, rel: str, size: int, mtime_ns: int, fields: Fields) -> None:
        """Index (or index again) the file ``rel``; seen once `commit` returns."""
        import tantivy

        writer = self._writing()
        writer.delete_documents_by_term("key", rel)
        writer.add_document(tantivy.Document(
            key=rel, path=fields.path, title=fields.title, body=fields.body,
            superseded=int(fields.superseded), size=size, mtime=mtime_ns))

    def remove(self, rel: str) -> None:
        self._writing().delete_documents_by_term("key", rel)

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

    def known(self) -> dict[str, tuple[int, int]]:
        """Every file indexed, with the size and mtime it had then."""
        import tantivy

        searcher = self._current()
        count = searcher.num_docs
        if count == 0:
            return {}
        found = {}
        for _, address in searcher.search(tantivy.Query.all_query(), count).hits:
            doc = searcher.doc(address)
            found[doc["key"][0]] = (doc["size"][0], doc["mtime"][0])
        return found

    def search(self, terms: list[str], limit: int) -> list[Match]:
        """The ``limit`` best files for ``terms`` (index terms: see text.query_terms),
        by BM25 over the fields, weighted by BOOSTS; best first."""
        import tantivy

        searcher = self._current()
        clauses = [
            (tantivy.Occur.Should,
             tantivy.Query.boost_query(tantivy.Query.term_query(self._schema, field, term),
                                       boost))
            for term in terms for field, boost in BOOSTS.items()]
        query = tantivy.Query.boolean_query(clauses)
        found = []
        for score, address in searcher.search(query, limit).hits:
            doc = searcher.doc(address)
            found.append(Match(doc["key"][0], score, bool(doc["superseded"][0])))
        return found

    def count(self) -> int:
        return int(self._current().num_docs)

    def size_bytes(self) -> int:
        """The bytes of its files (their sizes, as a store's bytes are counted)."""
        total = 0
        for entry in os.scandir(self.directory):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        return total


def _private(directory: Path) -> dict[str, tuple[int, int]]:
    """Make the index's files readable by the serving user only (tantivy makes them
    with the process's umask); returns their inodes and sizes, by name."""
    sizes = {}
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            if st.st_mode & 0o077:
                os.chmod(entry.path, 0o600)
            sizes[entry.name] = (st.st_ino, st.st_size)
    return sizes
