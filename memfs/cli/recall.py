"""``memfs recall`` and ``memfs reindex``: ranked recall from the command line.

Registered into the parser by memfs/cli/__init__.py (`register`); each command gets the
connected client and the parsed arguments, and returns the exit code.
"""

from __future__ import annotations

import sys
import time

from memfs.control.client import Client

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    Add = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]


def cmd_recall(client: Client, args: argparse.Namespace) -> int:
    """Files best first: ``SCORE  STORE/PATH  (WRITER, TIME)`` and below each its best
    lines as ``  LINE: text``; exit 1 when nothing matches (as grep)."""
    result = client.recall(args.query, store=args.store, limit=args.n, page=args.page)
    if args.json:
        from memfs.control.client import jsonlite

        print(jsonlite.dumps(result))
        return 0 if result["hits"] else 1
    out = sys.stdout
    for hit in result["hits"]:
        at = hit["last_written_at"]
        when = "" if at is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(at))
        old = "  [superseded]" if hit["superseded"] else ""
        out.write(f"{hit['score']:7.2f}  {hit['path']}  ({hit['last_writer'] or '?'}, "
                  f"{when}){old}\n")
        for line in hit["lines"]:
            out.write(f"{line['line']:>9}: {line['text']}\n")
    if result["next_page"] is not None:
        print(f"memfs: more: --page {result['next_page']}", file=sys.stderr)
    if result["indexing"]:
        print(f"memfs: note: still indexing {', '.join(result['indexing'])}; results "
              "may be missing files", file=sys.stderr)
    return 0 if result["hits"] else 1


def cmd_reindex(client: Client, args: argparse.Namespace) -> int:
    started = time.monotonic()
    result = client.reindex(args.store)
    if args.json:
        from memfs.control.client import jsonlite

        print(jsonlite.dumps(result))
        return 0
    seconds = time.monotonic() - started
    for store, files in sorted(result["indexed"].items()):
        print(f"reindexed {store}: {files} files")
    print(f"memfs: done in {seconds:.1f} s", file=sys.stderr)
    return 0


def register(add: Add) -> None:
    """Add the recall commands to the CLI's parser."""
    recall = add("recall", cmd_recall, "ranked recall: the files that best match QUERY, "
                 "best first (BM25 over your stores; not a read)")
    recall.add_argument("query", metavar="QUERY", help="words, in any order and form")
    recall.add_argument("--store", metavar="STORE", help="only this store")
    recall.add_argument("-n", type=int, default=10, metavar="N", help="files per page (10)")
    recall.add_argument("--page", type=int, default=1, metavar="P", help="page (from 1)")
    reindex = add("reindex", cmd_reindex, "rebuild recall's index of STORE (default: each "
                  "store you may read) from its files")
    reindex.add_argument("store", nargs="?", metavar="STORE",
                         help="one store (default: each store you may read)")
