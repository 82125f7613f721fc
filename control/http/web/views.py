"""The page builders of the stores overview, a store's files and one file (see
control/http/web/look.py for what a builder may do)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import blake3

from memfs.control.http.web import render
from memfs.control.http.web.look import Look, Page, Redirect, expired_at, mem_path, page_number
from memfs.store.errors import InvalidInput, NotFound
from memfs.store.fs.paths import MemPath
from memfs.store.read.pages import page_of_bytes

FILES_PER_PAGE = 200
# A file is shown a page at a time, so that a page stays a few screens tall whatever
# the file's size: PAGE_LINES lines a page, and at most PAGE_BYTES of them (a page of
# longer lines is cut there, and says so).
PAGE_LINES = 500
PAGE_BYTES = 64 * 1024
RECENT = 10  # changes across the stores on the overview


def overview(look: Look) -> Page:
    """Every store of the agent: files, size, last change and who, tasks; the
    hazards (expired leases: who abandoned what) first."""
    rows: list[dict[str, Any]] = []
    hazards: list[dict[str, Any]] = []
    any_history = False
    for name, access in look.stores().items():
        spec = look.config.stores[name]
        entries = look.engine.unrecorded.files(look.agent, name)
        row: dict[str, Any] = {"name": name, "access": access, "history": spec.history,
                               "structured": spec.structured,
                               "description": spec.description, "files": len(entries),
                               "bytes": sum(e.size for e in entries), "last": None,
                               "tasks": None}
        if spec.history:
            any_history = True
            last = look.op("log", path=name, limit=1)["entries"]
            row["last"] = last[0] if last else None
        elif entries:
            newest = max(entries, key=lambda e: e.mtime_ns)
            path = MemPath(name, tuple(newest.rel.split("/")))
            info = look.engine.unrecorded.versions_of(look.agent, [path]).get(path)
            if info is not None:
                row["last"] = {"at": info.last_written_at, "author": info.last_writer,
                               "summary": f"write {path}", "rev": None}
        if spec.structured:
            tasks = look.op("task_list", store=name)["tasks"]
            counts = {status: 0 for status in ("open", "claimed", "expired", "done")}
            for task in tasks:
                counts[task["status"]] = counts.get(task["status"], 0) + 1
                if task["status"] == "expired":
                    hazards.append({"store": name, "task": task,
                                    "expired_at": expired_at(task)})
            row["tasks"] = counts
        rows.append(row)
    hazards.sort(key=lambda h: h["expired_at"] or 0)
    rows.sort(key=lambda r: (-(r["tasks"] or {}).get("expired", 0), r["name"]))
    recent = look.op("log", limit=RECENT)["entries"] if any_history else []
    return Page("overview.html", {"stores": rows, "hazards": hazards, "recent": recent},
                live="*")


def store_page(look: Look, store: str, folder: str, page: str | None) -> Page:
    """A folder of a store (the top by default): its subfolders with their file
    counts and sizes, and its files, FILES_PER_PAGE a page, with last writer and time."""
    info = look.store(store)
    number = page_number(page)
    folder = folder.strip("/")
    if folder:
        mem_path(store, folder)  # checked like any path
    prefix = f"{folder}/" if folder else ""
    entries = look.engine.unrecorded.files(look.agent, store)
    inside = [e for e in entries if e.rel.startswith(prefix)]
    if folder and not inside:
        raise NotFound(f"no folder {store}/{folder}")
    folders: dict[str, list[int]] = {}
    files = []
    for entry in inside:
        rest = entry.rel[len(prefix):]
        head, slash, _ = rest.partition("/")
        if slash:
            tally = folders.setdefault(head, [0, 0])
            tally[0] += 1
            tally[1] += entry.size
        else:
            files.append(entry)
    pages = max(1, -(-len(files) // FILES_PER_PAGE))
    number = min(number, pages)
    shown = files[(number - 1) * FILES_PER_PAGE:number * FILES_PER_PAGE]
    paths = [MemPath(store, tuple(e.rel.split("/"))) for e in shown]
    versions = look.engine.unrecorded.versions_of(look.agent, paths)
    listed = [{"rel": e.rel, "name": e.rel[len(prefix):], "size": e.size,
               "version": versions.get(path)} for e, path in zip(shown, paths, strict=True)]
    crumbs = []
    parts = folder.split("/") if folder else []
    for index, part in enumerate(parts):
        crumbs.append({"name": part, "dir": "/".join(parts[:index + 1])})
    mirrors = (look.op("mirror_status", store=store)["mirrors"]
               if look.config.stores[store].mirrors else [])
    return Page("store.html", {
        "store": info, "folder": folder, "crumbs": crumbs, "page": number, "pages": pages,
        "mirrors": mirrors,
        "folders": [{"name": n, "dir": prefix + n, "files": t[0], "bytes": t[1]}
                    for n, t in sorted(folders.items())],
        "files": listed, "file_count": len(files), "total_files": len(entries),
        "total_bytes": sum(e.size for e in entries)}, live=store)


def _text(data: bytes, cut: bool) -> str | None:
    """The bytes as UTF-8 text (a character cut at the end of a cut page dropped),
    else None."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        if cut and error.start >= len(data) - 3:
            return data[:error.start].decode("utf-8", "replace")
        return None


def file_page(look: Look, store: str, rel: str, at: str | None,
              page: str | None = None) -> Page | Redirect:
    """One page of a file (PAGE_LINES lines, at most PAGE_BYTES): rendered markdown
    and raw text, digest, last writer and time, and its history. ``at``: the file as
    it was at that revision (``show``); ``page``: which page (1-based; past the last:
    to the last). Looking records nothing (see control/http/web/look.py). A folder's
    path leads to the folder."""
    info = look.store(store)
    path = mem_path(store, rel)
    number = page_number(page)
    first = (number - 1) * PAGE_LINES + 1
    version: dict[str, Any]
    if at is not None:
        shown = look.op("show", path=str(path), rev=at, encoding="bytes")
        full = shown["content"]
        part = page_of_bytes(full, first, PAGE_LINES, PAGE_BYTES)
        version = {"digest": blake3.blake3(full).hexdigest(), "size": len(full),
                   "rev": shown["rev"], "short": shown["short"]}
    else:
        try:
            part, current = look.engine.unrecorded.page(look.agent, path, first, PAGE_LINES,
                                                         PAGE_BYTES)
        except (NotFound, InvalidInput):
            prefix = f"{path.rel}/"
            files = look.engine.unrecorded.files(look.agent, store)
            if any(e.rel.startswith(prefix) for e in files):
                return Redirect(f"/ui/stores/{quote(store)}/?dir={quote(path.rel)}")
            raise
        version = {"digest": current.digest, "size": current.size,
                   "last_writer": current.last_writer, "last_written_at": current.last_written_at}
    pages = max(1, -(-part.total_lines // PAGE_LINES))
    if number > pages:
        return Redirect(f"/ui/stores/{quote(store)}/files/{quote(path.rel)}?"
                        + urlencode({k: v for k, v in (("at", at), ("page", pages)) if v}))
    text = _text(part.data, part.cut)
    front, body, rendered = None, text, None
    if text is not None and render.is_markdown(path.rel):
        if number == 1:
            front, body = render.split_front_matter(text)
        rendered = render.markdown(body or "")
    history = None
    if info["history"]:
        history = look.op("log", path=str(path), limit=20)["entries"]
    parts = path.parts
    crumbs = [{"name": part, "dir": "/".join(parts[:i + 1])} for i, part in enumerate(parts[:-1])]
    return Page("file.html", {
        "store": info, "rel": path.rel, "name": parts[-1], "crumbs": crumbs, "at": at,
        "version": version, "text": text, "front": front, "rendered": rendered,
        "cut": part.cut, "page_bytes": PAGE_BYTES, "page": number, "pages": pages,
        "first_line": first, "last_line": first + part.lines - 1,
        "total_lines": part.total_lines, "history": history},
        live=None)
