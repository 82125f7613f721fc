"""HTTP as independent clients read it (RFC 9110, RFC 3986), against a real daemon:
headers that carry a path are percent-encoded, a HEAD has the headers of its GET, a 405
names the methods allowed, every web answer has the security headers, and a target
that is not UTF-8 is refused rather than guessed at."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.control.http.conftest import client, problem
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
    with client(daemon, None) as anonymous:
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


# -- preconditions (RFC 9110 section 13) -------------------------------------------------


def tag_of(response: httpx.Response) -> str:
    return response.headers["etag"]


def commits_of(client: httpx.Client, rel: str) -> int:
    found = client.get("/v1/stores/notes/history", params={"path": rel, "n": 100})
    return len(found.json()["entries"])


def test_if_match_star_means_any_current_version(alice: httpx.Client, bob: httpx.Client,
                                                 daemon: Daemon) -> None:
    star = {"If-Match": "*"}
    problem(alice.put(f"{F}/star/new/a.md", content=b"x", headers=star), 412, "conflict")
    assert not backing(daemon, "notes/star").exists()  # nothing made, not even a folder
    alice.put(f"{F}/star/a.md", content=b"one\n")
    assert alice.put(f"{F}/star/a.md", content=b"two\n", headers=star).status_code == 200
    # "*" is no licence to skip the agent's record: bob never read the file
    problem(bob.put(f"{F}/star/a.md", content=b"bob\n", headers=star), 409, "conflict")
    bob.get(f"{F}/star/a.md")
    assert bob.put(f"{F}/star/a.md", content=b"bob\n", headers=star).status_code == 200
    assert backing(daemon, "notes/star/a.md").read_bytes() == b"bob\n"


def test_a_tag_that_does_not_match_is_412_never_400(alice: httpx.Client,
                                                    daemon: Daemon) -> None:
    current = tag_of(alice.put(f"{F}/tags/a.md", content=b"one\n"))
    before = commits_of(alice, "tags/a.md")
    for value in ('"0000"', f"W/{current}", '""', f'W/{current}, "abc"', ""):
        problem(alice.put(f"{F}/tags/a.md", content=b"two\n", headers={"If-Match": value}),
                412, "conflict")
    assert backing(daemon, "notes/tags/a.md").read_bytes() == b"one\n"
    assert commits_of(alice, "tags/a.md") == before
    # a list with the current tag among others matches (strongly)
    listed = alice.put(f"{F}/tags/a.md", content=b"two\n",
                       headers={"If-Match": f'"0000", W/"x", {current}'})
    assert listed.status_code == 200, listed.text


def test_if_none_match_on_a_change(alice: httpx.Client, daemon: Daemon) -> None:
    current = tag_of(alice.put(f"{F}/none/a.md", content=b"one\n"))
    for value in (current, f"W/{current}", f'"other", {current}', "*"):  # weak comparison
        problem(alice.put(f"{F}/none/a.md", content=b"two\n",
                          headers={"If-None-Match": value}), 412, "conflict")
    problem(alice.delete(f"{F}/none/a.md", headers={"If-None-Match": "*"}), 412, "conflict")
    assert backing(daemon, "notes/none/a.md").read_bytes() == b"one\n"
    other = alice.put(f"{F}/none/a.md", content=b"two\n", headers={"If-None-Match": '"x"'})
    assert other.status_code == 200
    # both headers: each must hold
    both = {"If-Match": tag_of(other), "If-None-Match": '"x"'}
    assert alice.put(f"{F}/none/a.md", content=b"three\n", headers=both).status_code == 200


def test_force_skips_the_record_not_the_precondition(alice: httpx.Client, bob: httpx.Client,
                                                     daemon: Daemon) -> None:
    current = tag_of(alice.put(f"{F}/force/a.md", content=b"alice\n"))
    forced = {"force": "true"}
    problem(bob.put(f"{F}/force/a.md", params=forced, content=b"bob\n",
                    headers={"If-Match": '"' + "0" * 64 + '"'}), 412, "conflict")
    assert backing(daemon, "notes/force/a.md").read_bytes() == b"alice\n"
    done = bob.put(f"{F}/force/a.md", params=forced, content=b"bob\n",
                   headers={"If-Match": current})
    assert done.status_code == 200, done.text


def test_append_sed_delete_and_restore_take_preconditions(alice: httpx.Client,
                                                          daemon: Daemon) -> None:
    first = tag_of(alice.put(f"{F}/cond/a.md", content=b"a\n"))
    wrong = {"If-Match": '"' + "0" * 64 + '"'}
    problem(alice.patch(f"{F}/cond/a.md", json={"append": "b\n"}, headers=wrong),
            412, "conflict")
    appended = alice.patch(f"{F}/cond/a.md", json={"append": "b\n"},
                           headers={"If-Match": first})
    assert appended.status_code == 200, appended.text
    problem(alice.patch(f"{F}/cond/a.md", json={"sed": "s/a/A/"}, headers={"If-Match": first}),
            412, "conflict")
    assert backing(daemon, "notes/cond/a.md").read_bytes() == b"a\nb\n"
    alice.get(f"{F}/cond/a.md")
    assert alice.delete(f"{F}/cond/a.md", headers={"If-Match": "*"}).status_code == 200
    restore = {"path": "cond/a.md", "rev": "HEAD~1"}
    # no file: If-Match fails (even for a restore, which may recreate one), * too
    for value in (first, "*"):
        problem(alice.post("/v1/stores/notes/restore", json=restore,
                           headers={"If-Match": value}), 412, "conflict")
    assert not backing(daemon, "notes/cond/a.md").exists()
    made = alice.post("/v1/stores/notes/restore", json=restore, headers={"If-None-Match": "*"})
    assert made.status_code == 200 and made.json()["created"] is True


def test_get_and_head_if_none_match_compare_weakly(alice: httpx.Client) -> None:
    current = tag_of(alice.put(f"{F}/cache/a.md", content=b"one\n"))
    for value in (current, f"W/{current}", f'"x", {current}', "*"):
        assert alice.get(f"{F}/cache/a.md", headers={"If-None-Match": value}).status_code == 304
        assert alice.head(f"{F}/cache/a.md",
                          headers={"If-None-Match": value}).status_code == 304
    fresh = alice.get(f"{F}/cache/a.md", headers={"If-None-Match": '"0000"'})
    assert fresh.status_code == 200 and fresh.content == b"one\n"
    # the digest as a substring of something else is not its tag
    bare = current.strip('"')
    assert alice.get(f"{F}/cache/a.md",
                     headers={"If-None-Match": f'"x{bare}"'}).status_code == 200
    problem(alice.get(f"{F}/cache/a.md", headers={"If-None-Match": bare}), 400, "invalid")


def test_405_names_every_allowed_method(alice: httpx.Client) -> None:
    refused = problem(alice.post(f"{F}/x.md"), 405, "method_not_allowed")
    assert refused["status"] == 405
    allowed = alice.post(f"{F}/x.md").headers["allow"]
    assert set(allowed.split(", ")) == {"GET", "HEAD", "PUT", "PATCH", "DELETE"}
    assert alice.put("/v1/stores").headers["allow"] == "GET, HEAD"


def test_memory_endpoints_of_a_store_that_keeps_none_are_404(alice: httpx.Client,
                                                              carol: httpx.Client) -> None:
    for url in ("/v1/stores/notes/tasks", "/v1/stores/notes/brief",
                "/v1/stores/notes/sessions/2026-11-30-alice-a91f"):
        assert "not structured" in problem(alice.get(url), 404, "not_found")["detail"]
    problem(alice.post("/v1/stores/notes/tasks", json={"task": "t", "title": "T"}), 404,
            "not_found")
    problem(alice.get("/v1/stores/secret/tasks"), 404, "not_found")  # not hers: not there
    assert alice.get("/v1/stores/team/tasks").status_code == 200
