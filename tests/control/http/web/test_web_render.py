"""The web view's pure parts: memory rendered as safe HTML, diffs parsed for display,
sign-in helpers, times."""

from __future__ import annotations

import re

import pytest

from memfs.control.http.web import render
from memfs.control.http.web.look import moment
from memfs.control.http.web.signin import safe_next
from memfs.store.errors import InvalidInput

HOSTILE = """---
title: <script>alert('front')</script>
---
# Note <script>alert(1)</script>

<img src=x onerror="alert(2)">
<div id="injected">raw html block</div>

[js](javascript:alert(3)) [JS](JaVaScRiPt:alert(4)) [ent](&#106;avascript:alert(5))
[data](data:text/html;base64,PHNjcmlwdD5hbGVydCg2KTwvc2NyaXB0Pg==) [vb](vbscript:x)
[file](file:///etc/passwd) <javascript:alert(7)> ![img](javascript:alert(8))
[tab](java\tscript:alert(9)) [ok](https://example.org/a?b=1) [rel](../runbooks/x.md)
[mail](mailto:oncall@example.org)

| a | b |
|--:|:--|
| 1 | 2 |
"""


def test_hostile_markdown_renders_as_text() -> None:
    front, body = render.split_front_matter(HOSTILE)
    assert front is not None and "<script>" in front  # shown escaped by the template
    html = str(render.markdown(body))
    assert "<script" not in html and "<img" not in html and "<div" not in html
    assert "onerror=" not in html.replace("onerror=&quot;", "")  # only as escaped text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs == ["https://example.org/a?b=1", "../runbooks/x.md",
                     "mailto:oncall@example.org"]
    assert " style=" not in html  # table alignment would be inline style: dropped
    assert "<table>" in html


@pytest.mark.parametrize("url, kept", [
    ("https://a.example/", True), ("http://a", True), ("mailto:x@y", True),
    ("../x.md", True), ("#anchor", True), ("/ui/stores/notes/", True),
    ("javascript:alert(1)", False), (" JAVASCRIPT:alert(1)", False), ("data:text/html,x", False),
    ("vbscript:x", False), ("file:///etc/passwd", False), ("ftp://x", False),
])
def test_link_schemes(url: str, kept: bool) -> None:
    assert render.safe_link(url) is kept


def test_images_become_links() -> None:
    html = str(render.markdown("![a diagram](diagram.png) ![x](https://t.example/p.gif)"))
    assert "<img" not in html
    assert '<a href="diagram.png" class="image-link">[image: a diagram]</a>' in html


def test_front_matter_split() -> None:
    assert render.split_front_matter("no front\n---\nx") == (None, "no front\n---\nx")
    assert render.split_front_matter("---\na: 1\n---\nbody") == ("a: 1", "body")
    assert render.split_front_matter("---\na: 1\n---") == ("a: 1", "")
    assert render.split_front_matter("---\nnever closed") == (None, "---\nnever closed")


PATCH = """diff --git a/notes/a.md b/notes/a.md
index 1111111..2222222 100644
--- a/notes/a.md
+++ b/notes/a.md
@@ -1,4 +1,4 @@
 one
-two
+TWO <b>
 three
-four
\\ No newline at end of file
+four
diff --git a/notes/new.md b/notes/new.md
new file mode 100644
--- /dev/null
+++ b/notes/new.md
@@ -0,0 +1 @@
+hello
diff --git a/gone.bin b/gone.bin
deleted file mode 100644
Binary files a/gone.bin and /dev/null differ
"""


def test_parse_patch() -> None:
    files = render.parse_patch(PATCH)
    assert [(f.path, f.status, f.added, f.deleted) for f in files] == [
        ("notes/a.md", "modified", 2, 2), ("notes/new.md", "added", 1, 0),
        ("gone.bin", "binary", 0, 0)]
    first = files[0]
    kinds = [(line.kind, line.text, line.old, line.new) for line in first.lines]
    assert kinds[:4] == [("hunk", "@@ -1,4 +1,4 @@", None, None), ("ctx", "one", 1, 1),
                         ("del", "two", 2, None), ("add", "TWO <b>", None, 2)]
    assert ("note", "\\ No newline at end of file", None, None) in kinds
    # side by side: a deletion and its replacement share a row
    pairs = [(left.text if left else None, right.text if right else None)
             for left, right in first.rows]
    assert ("two", "TWO <b>") in pairs and ("four", "four") in pairs
    assert files[2].lines[0].kind == "note"


def test_sizes_spans_and_times() -> None:
    assert render.size(812) == "812 B" and render.size(4096) == "4.0 KiB"
    assert render.size(3 * 1024 * 1024) == "3.0 MiB"
    assert render.span(45) == "45s" and render.span(725) == "12m 5s"
    assert render.span(3 * 3600 + 1200) == "3h 20m" and render.span(52 * 3600) == "2d 4h"
    assert render.when(0) == "1970-01-01 00:00:00 UTC"
    assert moment("30m", 10_000.0) == 10_000.0 - 1800
    assert moment("2w", 10_000_000.0) == 10_000_000.0 - 14 * 86400
    assert moment("1970-01-02", 0) == 86400
    for bad in ("yesterday", "30 m", "-1h", "1970-13-01", "x" * 100):
        with pytest.raises(InvalidInput):
            moment(bad, 0)


@pytest.mark.parametrize("given, expected", [
    ("/ui/stores/notes/history?path=a.md", "/ui/stores/notes/history?path=a.md"),
    ("/ui/", "/ui/"), (None, "/ui/"), ("https://evil.example/", "/ui/"),
    ("//evil.example/ui/", "/ui/"), ("/ui//evil.example", "/ui/"), ("/ui/\\evil", "/ui/"),
    ("/v1/stores", "/ui/"), ("/ui/a\nb", "/ui/"), ("javascript:alert(1)", "/ui/"),
])
def test_where_sign_in_leads(given: str | None, expected: str) -> None:
    assert safe_next(given) == expected


@pytest.mark.parametrize("seconds, said", [
    (0, "just now"), (4, "just now"), (45, "45 s ago"), (60, "1 min ago"),
    (3599, "59 min ago"), (3600, "1 h ago"), (47 * 3600, "47 h ago"),
    (48 * 3600, "2 days ago"), (86400 * 59, "59 days ago"), (86400 * 60, "2 months ago"),
    (86400 * 365, "12 months ago"), (86400 * 730, "2 years ago"), (-1200, "in 20 min"),
    (-86400 * 3, "in 3 days"),
])
def test_relative_times(seconds: int, said: str) -> None:
    now = 1_800_000_000.0
    assert render.relative(now - seconds, now) == said


def test_one_element_for_every_time() -> None:
    """Epoch seconds and memory's ISO text alike: how long ago, the exact UTC time in
    ``datetime`` and the title; not a time: the text as it is, escaped."""
    now = render.instant("2026-12-01T18:10:23Z")
    assert now is not None
    for value in (now - 180, "2026-12-01T18:07:23Z"):
        assert render.time_element(value, now) == (
            '<time datetime="2026-12-01T18:07:23Z" title="2026-12-01 18:07:23 UTC">'
            "3 min ago</time>")
    assert render.time_element("2026-12-01T18:07:22.950Z", now) == (
        '<time datetime="2026-12-01T18:07:22.950Z" title="2026-12-01 18:07:22 UTC">'
        "3 min ago</time>")
    assert render.time_element(None, now) == ""
    assert render.time_element("<b>soon</b>", now) == "&lt;b&gt;soon&lt;/b&gt;"
    assert render.instant(True) is None and render.instant("2026-12-01 18:07:23Z") is None


@pytest.mark.parametrize("summary, links", [
    ("write notes/a b.md", {"notes/a b.md": "/ui/stores/notes/files/a%20b.md"}),
    ("delete notes/d/x.md", {"notes/d/x.md": "/ui/stores/notes/history?path=d%2Fx.md"}),
    ("restore notes/a.md to 3f2c1e0", {"notes/a.md": "/ui/stores/notes/files/a.md",
                                       "3f2c1e0": "/ui/stores/notes/commits/3f2c1e0"}),
    ("task: bob claimed fix-login", {"fix-login": "/ui/stores/notes/tasks#task-fix-login"}),
    ("task: bob released fix-login, forced",
     {"fix-login": "/ui/stores/notes/tasks#task-fix-login"}),
    ("task: alice's lease of fix-login released by bob, forced",
     {"fix-login": "/ui/stores/notes/tasks#task-fix-login"}),
    ("session: bob handoff 2026-12-01-bob-1a2b",
     {"2026-12-01-bob-1a2b": "/ui/stores/notes/sessions?agent=bob#s-2026-12-01-bob-1a2b"}),
    ("decision: 2026-12-01-b supersedes 2026-11-30-a",
     {"2026-12-01-b": "/ui/stores/notes/decisions#d-2026-12-01-b",
      "2026-11-30-a": "/ui/stores/notes/decisions#d-2026-11-30-a"}),
    ("recover: 3 paths of notes", {}), ("write ops/a.md", {}), ("write notes/", {}),
    ("restore notes/a.md to HEAD", {}), ("frobnicate notes/a.md", {}),
])
def test_what_a_summary_names_links_to_it(summary: str, links: dict[str, str]) -> None:
    parts = render.summary_parts("notes", summary)
    assert "".join(part.text for part in parts) == summary
    assert {part.text: part.href for part in parts if part.href} == links
