"""Turning memory into HTML safely: memory is untrusted text.

* Markdown is rendered by markdown-it-py (CommonMark plus tables and strikethrough)
  with raw HTML off, so ``<script>`` or any tag in a note comes out as text; links
  keep only the schemes http, https and mailto (and relative links); images become
  plain links (nothing is loaded from elsewhere); no ``style`` attribute is emitted
  (the page's Content-Security-Policy allows no inline style).
* Front matter (``---`` ... ``---`` at the top) is split off and shown as text,
  never rendered.
* Everything else reaches the page through Jinja2's autoescaping; `markdown` is the
  only producer of markup.

Also: a unified diff parsed for display (`parse_patch`), and the time and size
formats the pages use (one for every time: `time_element`). No I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup, escape

from memfs.memory.records import parse_iso
from memfs.store.history.repo import SINGLE_PATH_OPS

SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):", re.IGNORECASE)


def safe_link(url: str) -> bool:
    """Whether a (normalized) link target may be kept: a relative link, or one of
    SAFE_SCHEMES. Anything else (javascript:, data:, vbscript:, file:, ...) is
    dropped."""
    match = _SCHEME.match(url.strip())
    return match is None or match.group(1).lower() in SAFE_SCHEMES


def _image_as_link(_renderer: Any, tokens: list[Token], index: int, _options: Any,
                   _env: Any) -> str:
    token = tokens[index]
    src = str(token.attrGet("src") or "")
    alt = token.content or src
    if not src:
        return str(escape(f"[image: {alt}]"))
    return f'<a href="{escape(src)}" class="image-link">[image: {escape(alt)}]</a>'


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = safe_link  # type: ignore[method-assign]
    md.add_render_rule("image", _image_as_link)
    return md


_MD = _markdown()


def _unstyled(tokens: list[Token]) -> None:
    for token in tokens:
        if token.attrs:
            token.attrs.pop("style", None)
        if token.children:
            _unstyled(token.children)


def markdown(text: str) -> Markup:
    """``text`` as HTML; safe to put in a page as is (see the module doc)."""
    tokens = _MD.parse(text)
    _unstyled(tokens)
    return Markup(_MD.renderer.render(tokens, _MD.options, {}))


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(the front matter's text without its fences, or None; the rest)."""
    if not text.startswith("---\n"):
        return None, text
    end = text.find("\n---\n", 3)
    if end == -1:
        if text.endswith("\n---"):
            return text[4:-4], ""
        return None, text
    return text[4:end], text[end + 5:]


MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdown")


def is_markdown(path: str) -> bool:
    return path.lower().endswith(MARKDOWN_SUFFIXES)


# -- diffs -------------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass
class Line:
    kind: str  # add, del, ctx, hunk, note
    text: str
    old: int | None = None
    new: int | None = None


@dataclass
class FileDiff:
    """One file of a patch: its path (the new one, else the old), what happened to it,
    its lines for the unified view and its rows for the side-by-side view."""

    path: str
    status: str = "modified"  # added, deleted, modified, binary
    lines: list[Line] = field(default_factory=list)
    rows: list[tuple[Line | None, Line | None]] = field(default_factory=list)

    @property
    def added(self) -> int:
        return sum(1 for line in self.lines if line.kind == "add")

    @property
    def deleted(self) -> int:
        return sum(1 for line in self.lines if line.kind == "del")


def _strip_prefix(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def _pair(diff: FileDiff, dels: list[Line], adds: list[Line]) -> None:
    for index in range(max(len(dels), len(adds))):
        diff.rows.append((dels[index] if index < len(dels) else None,
                          adds[index] if index < len(adds) else None))
    dels.clear()
    adds.clear()


def parse_patch(text: str) -> list[FileDiff]:
    """The files of a git-style unified diff, in order. Unknown lines are kept as
    notes; nothing is ever dropped silently or interpreted as markup."""
    files: list[FileDiff] = []
    current: FileDiff | None = None
    old = new = 0
    dels: list[Line] = []
    adds: list[Line] = []
    in_hunk = False
    for raw in text.split("\n"):
        if raw.startswith("diff --git "):
            if current is not None:
                _pair(current, dels, adds)
            parts = raw[len("diff --git "):].split(" ")
            current = FileDiff(_strip_prefix(parts[-1]) if parts else "?")
            files.append(current)
            in_hunk = False
            continue
        if current is None:
            if not raw:
                continue
            current = FileDiff("?")
            files.append(current)
        hunk = _HUNK.match(raw)
        if hunk:
            _pair(current, dels, adds)
            old, new = int(hunk.group(1)), int(hunk.group(2))
            line = Line("hunk", raw)
            current.lines.append(line)
            current.rows.append((line, line))
            in_hunk = True
            continue
        if not in_hunk:
            if raw.startswith("new file mode"):
                current.status = "added"
            elif raw.startswith("deleted file mode"):
                current.status = "deleted"
            elif raw.startswith("Binary files"):
                current.status = "binary"
                current.lines.append(Line("note", raw))
            elif raw.startswith("+++ ") and raw[4:] != "/dev/null":
                current.path = _strip_prefix(raw[4:])
            continue
        if raw.startswith("+"):
            line = Line("add", raw[1:], new=new)
            new += 1
            adds.append(line)
        elif raw.startswith("-"):
            line = Line("del", raw[1:], old=old)
            old += 1
            dels.append(line)
        elif raw.startswith(" "):
            _pair(current, dels, adds)
            line = Line("ctx", raw[1:], old=old, new=new)
            old += 1
            new += 1
            current.rows.append((line, line))
        elif raw.startswith("\\"):
            line = Line("note", raw)
        elif not raw:
            continue
        else:
            line = Line("note", raw)
        current.lines.append(line)
    if current is not None:
        _pair(current, dels, adds)
    return files


# -- what a change's summary names ------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """A piece of a summary line: its text, and the page it links to (None: plain)."""

    text: str
    href: str | None = None


_NAME = r"[^\s,]+"  # an agent, a task, session or decision id: no space, no comma
_REV = r"[0-9a-f]{4,40}"
_SUMMARIES = [re.compile(pattern) for pattern in (
    rf"task: {_NAME} (?:added|claimed|checkpoint|completed|released) (?P<task>{_NAME})"
    r"(?:, forced)?",
    rf"task: {_NAME}'s lease of (?P<task>{_NAME}) released by {_NAME}, forced",
    rf"session: (?P<agent>{_NAME}) (?:started|checkpoint|handoff) (?P<session>{_NAME})",
    rf"decision: (?P<decision>{_NAME})(?: supersedes (?P<superseded>{_NAME}))?",
    rf"restore (?P<path>.+) to (?P<rev>{_REV})",
    rf"(?P<op>{'|'.join(sorted(SINGLE_PATH_OPS - {'restore'}))}) (?P<path>.+)",
)]


def summary_parts(store: str, summary: str) -> list[Part]:
    """A change's summary line (memfs writes them: ``write notes/a.md``, ``restore
    notes/a.md to 3f2c1e0``, ``task: bob claimed fix-login``, ``session: bob started
    2026-12-01-bob-1a2b``, ``decision: D supersedes OLD``) with what it names linked:
    a file to its page (a deleted one to its history), a revision to its change, a
    task, session or decision to its card. Anything else is one plain part."""
    base = f"/ui/stores/{quote(store)}"
    for pattern in _SUMMARIES:
        match = pattern.fullmatch(summary)
        if match is None:
            continue
        found = match.groupdict()
        links: list[tuple[str, str]] = []
        path = found.get("path")
        if path is not None:
            if not path.startswith(f"{store}/") or len(path) == len(store) + 1:
                break
            rel = path[len(store) + 1:]
            links.append(("path", f"{base}/history?{urlencode({'path': rel})}"
                          if found.get("op") == "delete"
                          else f"{base}/files/{quote(rel, safe='/')}"))
        if found.get("rev"):
            links.append(("rev", f"{base}/commits/{found['rev']}"))
        if found.get("task"):
            links.append(("task", f"{base}/tasks#task-{quote(found['task'])}"))
        if found.get("session"):
            links.append(("session", f"{base}/sessions?{urlencode({'agent': found['agent']})}"
                          f"#s-{quote(found['session'])}"))
        for group in ("decision", "superseded"):
            if found.get(group):
                links.append((group, f"{base}/decisions#d-{quote(found[group])}"))
        parts, at = [], 0
        for group, href in sorted(links, key=lambda link: match.start(link[0])):
            start, end = match.span(group)
            if start > at:
                parts.append(Part(summary[at:start]))
            parts.append(Part(summary[start:end], href))
            at = end
        if at < len(summary):
            parts.append(Part(summary[at:]))
        return parts
    return [Part(summary)]


# -- times and sizes ---------------------------------------------------------------------


def when(at: float) -> str:
    """A UTC time to the second, for people: 2026-11-30 13:22:59 UTC."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def span(seconds: float) -> str:
    """A duration for people: 45s, 12m 5s, 3h 20m, 2d 4h."""
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {secs}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


def relative(at: float, now: float) -> str:
    """How long ago ``at`` was, in one unit: just now, 45 s ago, 3 min ago, 5 h ago
    (to 47), 2 days ago (to 59), 3 months ago (to 24), 2 years ago; a time still to
    come: in 20 min."""
    seconds = abs(now - at)
    if seconds < 5:
        return "just now"
    if seconds < 60:
        words = f"{int(seconds)} s"
    elif seconds < 3600:
        words = f"{int(seconds // 60)} min"
    elif seconds < 48 * 3600:
        words = f"{int(seconds // 3600)} h"
    else:
        days = int(seconds // 86400)
        count, unit = ((days, "day") if days < 60 else (days // 30, "month") if days < 730
                       else (days // 365, "year"))
        words = f"{count} {unit}{'s' if count != 1 else ''}"
    return f"in {words}" if at > now else f"{words} ago"


def instant(value: object) -> float | None:
    """Epoch seconds of a time as the pages get it: epoch seconds (history, version
    records) or UTC ISO text (memory records: 2026-12-01T18:07:23.050Z); None for
    None or text that is no such time."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_iso(value)
        except ValueError:
            return None
    return None


def time_element(value: object, now: float) -> Markup:
    """The one way the pages show a time: how long ago it was (`relative`) in a
    ``<time>`` element whose ``datetime`` is the exact UTC time and whose title shows
    it (``<time datetime="2026-12-01T18:07:23Z" title="2026-12-01 18:07:23 UTC">3 min
    ago</time>``); the page's CSS keeps it on one line. Nothing for None; text that
    is no time is shown as it is (escaped)."""
    at = instant(value)
    if at is None:
        return Markup("") if value is None else escape(str(value))
    exact = datetime.fromtimestamp(at, UTC)
    stamp = exact.strftime("%Y-%m-%dT%H:%M:%S") + (
        f".{exact.microsecond // 1000:03d}Z" if exact.microsecond >= 1000 else "Z")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        stamp, when(at), relative(at, now))


def size(n: int) -> str:
    """A byte count for people: 812 B, 4.0 KiB, 1.2 MiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
