"""HTTP as independent clients read it (RFC 9110, RFC 3986), against a real daemon:
headers that carry a path are percent-encoded, a HEAD has the headers of its GET, a 405
names the methods allowed, every web answer has the security headers, and a target
that is not UTF-8 is refused rather than guessed at."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.control.http.conftest import problem
from tests.support import Daemon

F = "/v1/stores/notes/files"


def backing(daemon: Daemon, rel: str) -> Path:
    return Path(daemon.config["root"]) / "stores" / rel


@pytest.mark.parametrize("name", ["日本語.md", "naïve.md", "a b%c.md", "tilde~&=+;.md"])
def test_location_of_a_created_file_is_percent_encoded(alice: httpx.Client, daemon: Daemon,
                                                       name: str) -> None:
    url = f"{F}/enc/{quote(name)}"
    created = alice.put(url, content=b"made once\n")
    assert created.status_code == 201, created.text  # not a 500 after the commit
    raw = dict(created.headers.raw)[b"location"]
    assert raw.isascii() and b" " not in raw
    assert raw.decode() == f"{F}/enc/{quote(name, safe='/')}"
    assert backing(daemon, f"notes/enc/{name}").read_bytes() == b"made once\n"
    # the header leads back to the file
    assert alice.get(raw.decode()).content == b"made once\n"


def test_head_has_the_headers_of_get(alice: httpx.Client) -> None:
    alice.put(f"{F}/head/page.md", content=b"# page\n")
    got = alice.get(f"{F}/head/page.md")
    head = alice.head(f"{F}/head/page.md")
    assert head.status_code == 200 and head.content == b""
    for name in ("content-type", "etag", "content-length", "last-modified",
                 "x-memfs-last-writer"):
        assert head.headers[name] == got.headers[name], name
    assert head.headers["content-type"].startswith("text/markdown")


def test_ui_without_its_slash_is_hardened_too(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.http_url) as anonymous:
        redirect = anonymous.get("/ui")
        page = anonymous.get("/ui/login")
    assert redirect.status_code == 308 and redirect.headers["location"] == "/ui/"
    for name in ("content-security-policy", "x-content-type-options", "x-frame-options",
                 "referrer-policy"):
        assert redirect.headers[name] == page.headers[name], name


@pytest.mark.parametrize("target", [f"{F}/bad/%FF.md", f"{F}/bad/%C3.md",
                                    f"{F}/bad/%ED%A0%80.md"])
def test_a_path_that_is_not_utf8_is_refused(alice: httpx.Client, daemon: Daemon,
                                            target: str) -> None:
    problem(alice.put(target, content=b"x"), 400, "invalid")
    assert not backing(daemon, "notes/bad").exists()  # not even as U+FFFD


def test_a_query_that_is_not_utf8_is_refused(alice: httpx.Client) -> None:
    problem(alice.get("/v1/stores/notes/files?glob=%FF"), 400, "invalid")


def test_a_put_of_the_current_content_commits_nothing(alice: httpx.Client) -> None:
    first = alice.put(f"{F}/same/a.md", content=b"same\n")
    history = "/v1/stores/notes/history"
    before = alice.get(history, params={"path": "same/a.md"}).json()["entries"]
    again = alice.put(f"{F}/same/a.md", content=b"same\n")
    assert again.status_code == 200, again.text
    assert again.json()["unchanged"] is True and again.json()["commit"] is None
    assert again.headers["etag"] == first.headers["etag"]
    restored = alice.post("/v1/stores/notes/restore", json={"path": "same/a.md",
                                                             "rev": "HEAD"})
    assert restored.status_code == 200 and restored.json()["unchanged"] is True
    assert alice.get(history, params={"path": "same/a.md"}).json()["entries"] == before
