"""The page builders of history: a store's or a file's changes, one commit with its
diff, and what changed across the stores in a time range (see control/http/web/look.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from memfs.control.http.web import render
from memfs.control.http.web.look import Look, Page, mem_path, moment
from memfs.control.ops.history import iso
from memfs.store.errors import InvalidInput

HISTORY_PER_PAGE = 50
PATCH_LIMIT = 2 * 1024 * 1024  # characters of a commit's diff shown
CHANGES_LIMIT = 500
DEFAULT_SINCE = "24h"


def history_page(look: Look, store: str, rel: str, rev: str | None) -> Page:
    """Changes of a store, or of one file or folder in it (``rel``), newest first,
    HISTORY_PER_PAGE a page; ``rev``: start at that revision (the "older" link)."""
    info = look.store(store)
    target = mem_path(store, rel.strip("/"), allow_store=True)
    got = look.op("log", path=str(target), limit=HISTORY_PER_PAGE + 1, rev=rev)["entries"]
    entries = got[:HISTORY_PER_PAGE]
    older = got[HISTORY_PER_PAGE]["rev"] if len(got) > HISTORY_PER_PAGE else None
    return Page("history.html", {"store": info, "rel": target.rel, "rev": rev,
                                 "entries": entries, "older": older},
                live=store if rev is None else None)


def commit_page(look: Look, store: str, rev: str, rel: str | None) -> Page:
    """One commit: who, when, what, and its diff (unified, and side by side on wide
    screens); ``rel``: only that file's part of the diff."""
    info = look.store(store)
    if rel is not None:
        rel = mem_path(store, rel).rel
    (entry,) = look.op("log", path=store, rev=rev, limit=1, patch=True)["entries"]
    lineage = look.op("log", path=store, rev=entry["rev"], limit=2)["entries"]
    parent = lineage[1] if len(lineage) > 1 else None
    patch = entry.pop("patch", "") or ""
    cut = len(patch) > PATCH_LIMIT
    if cut:
        patch = patch[:PATCH_LIMIT].rpartition("\n")[0]
    files = render.parse_patch(patch)
    others = []
    if rel is not None:
        others = [f.path for f in files if f.path != rel]
        files = [f for f in files if f.path == rel]
    return Page("commit.html", {"store": info, "entry": entry, "parent": parent,
                                "files": files, "others": others, "rel": rel, "cut": cut})


def changes_page(look: Look, since: str | None, until: str | None,
                 author: str | None) -> Page:
    """What changed across the agent's stores (with history) between two times,
    newest first, at most CHANGES_LIMIT; counts by store and by author."""
    since = (since or "").strip() or DEFAULT_SINCE
    start = moment(since, look.now)
    end = moment(until, look.now) if until and until.strip() else None
    if end is not None and end < start:
        raise InvalidInput("the range ends before it starts: give an earlier 'since'")
    if author is not None and not author.strip():
        author = None
    got = look.op("log", since=iso(start), until=None if end is None else iso(end),
                  author=author, limit=CHANGES_LIMIT + 1)["entries"]
    entries = got[:CHANGES_LIMIT]
    by_store = Counter(e["store"] for e in entries)
    by_author = Counter(e["author"] for e in entries)
    context: dict[str, Any] = {
        "since": since, "until": until or "", "author": author or "", "start": start,
        "end": end, "entries": entries, "more": len(got) > CHANGES_LIMIT,
        "by_store": by_store.most_common(), "by_author": by_author.most_common(),
        "no_history": [s for s in look.stores() if not look.config.stores[s].history]}
    return Page("changes.html", context, live="*" if end is None else None)
