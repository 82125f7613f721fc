"""The web view over plain HTTP (httpx) against a real daemon: security headers, the
sign-in cookie and CSRF rules, access exactly as the token's agent, read-only pages
(nothing is committed and nothing is recorded as read), clear error pages."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from memfs.control.client import ConflictError
from tests.control.http.web.conftest import nonce_of, sign_in
from tests.support import UID_A, UID_B, Daemon, connect_as, memfs_as

PAGES = ["/ui/", "/ui/stores/notes/", "/ui/stores/notes/files/web/page.md",
         "/ui/stores/notes/history", "/ui/stores/notes/history?path=web/page.md",
         "/ui/stores/notes/commits/HEAD", "/ui/stores/team/tasks", "/ui/stores/team/decisions",
         "/ui/stores/team/sessions", "/ui/changes?since=7d"]


@pytest.fixture(scope="module", autouse=True)
def content(daemon: Daemon) -> None:
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("notes/web/page.md", "# Page\n\nfirst\n")
        bob.write("notes/web/page.md", "# Page\n\nsecond\n")
        bob.call("task_add", store="team", task="web-task", title="Look at the web view")
        bob.call("decision_record", store="team", title="Web view", decision="Serve it",
                 reason="people want to look")
        session = bob.call("session_start", store="team", goal="try the web view")
        bob.call("session_handoff", store="team", session=session["id"], summary="done",
                 next="look again")


def test_every_page_renders_with_the_security_headers(alice_web: httpx.Client) -> None:
    for url in [*PAGES, "/ui/login", "/ui/stores/nope/", "/ui/no-such-page",
                "/ui/static/web.css", "/ui/static/live.js"]:
        response = alice_web.get(url)
        assert response.status_code in (200, 404), (url, response.status_code, response.text)
        csp = response.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, url
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, url
        assert "script-src 'self'" in csp and "style-src 'self'" in csp, url
        assert response.headers["x-content-type-options"] == "nosniff", url
        assert response.headers["x-frame-options"] == "DENY", url
        if not url.startswith("/ui/static/"):
            assert response.headers["content-type"].startswith("text/html"), url
            assert response.headers["cache-control"] == "no-store", url
            assert "<script>" not in response.text and " style=" not in response.text, url
            assert "signed in as" in response.text and ">alice<" in response.text, url


# a date or a time written out, as memory and history carry them
WRITTEN_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
TIME_ELEMENT = re.compile(r'<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z)" '
                          r'title="(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC">'
                          r"(just now|in \d+ \S+|\d+ \S+ ago)</time>")


def test_every_time_is_how_long_ago_with_the_utc_time_on_hover(daemon: Daemon,
                                                               alice_web: httpx.Client) -> None:
    """One format for every time on every page (history, files, tasks with a lease, a
    checkpoint, one done, sessions, commits): a <time> element; no time written out
    anywhere else on the page."""
    with connect_as(UID_B, daemon.socket) as bob:
        bob.call("task_add", store="team", task="timed", title="Times")
        bob.call("task_claim", store="team", task="timed", ttl="1h")
        bob.call("task_checkpoint", store="team", task="timed", note="half way")
        bob.call("task_add", store="team", task="timed-done", title="Done")
        bob.call("task_claim", store="team", task="timed-done", ttl="1h")
        bob.call("task_complete", store="team", task="timed-done", note="finished")
    shown = 0
    for url in [*PAGES, "/ui/stores/notes/?dir=web"]:
        page = alice_web.get(url).text
        elements = TIME_ELEMENT.findall(page)
        shown += len(elements)
        for stamp, _, title, _said in elements:
            assert stamp[:10] == title[:10] and stamp[11:19] == title[11:19], url
        # (the changes page's form shows how to write a time: its placeholder)
        outside = WRITTEN_TIME.findall(re.sub(r'placeholder="[^"]*"', "",
                                              TIME_ELEMENT.sub("", page)))
        assert not outside, (url, outside)
        assert page.count("<time") == len(elements), url
        # (a decision carries its day only; the store's top holds only folders)
        if url not in ("/ui/stores/team/decisions", "/ui/stores/notes/"):
            assert elements, url
    assert shown >= 20


def test_changes_link_to_what_they_name(daemon: Daemon, alice_web: httpx.Client) -> None:
    """A history row (and the overview's latest changes) that names a task, a session,
    a decision or a restore links to it, and the link's target is on that page."""
    with connect_as(UID_B, daemon.socket) as bob:
        first = bob.write("notes/web/restored.md", "one\n")["commit"]
        bob.write("notes/web/restored.md", "two\n")
        bob.call("restore", path="notes/web/restored.md", rev=first)
        bob.call("task_add", store="team", task="linked-task", title="Linked")
        session = bob.call("session_start", store="team", goal="links")["id"]
        old = bob.call("decision_record", store="team", title="Old", decision="a",
                       reason="b")["id"]
        new = bob.call("decision_record", store="team", title="New", decision="c",
                       reason="d", supersedes=old)["id"]
    team = alice_web.get("/ui/stores/team/history").text
    notes = alice_web.get("/ui/stores/notes/history").text
    overview = alice_web.get("/ui/").text
    expected = [
        (team, "/ui/stores/team/tasks#task-linked-task", "linked-task"),
        (team, f"/ui/stores/team/sessions?agent=bob#s-{session}", session),
        (team, f"/ui/stores/team/decisions#d-{new}", new),
        (team, f"/ui/stores/team/decisions#d-{old}", old),
        (notes, "/ui/stores/notes/files/web/restored.md", "notes/web/restored.md"),
        (notes, f"/ui/stores/notes/commits/{first[:7]}", first[:7]),
        (overview, f"/ui/stores/team/decisions#d-{new}", new),
    ]
    for page, href, text in expected:
        assert f'<a href="{href}">{text}</a>' in page, (href, text)
        target, _, anchor = href.partition("#")
        landed = alice_web.get(target.replace("&amp;", "&"))
        assert landed.status_code == 200, href
        if anchor:
            assert f'id="{anchor}"' in landed.text, href


def test_a_folder_of_folders_shows_no_empty_file_table(daemon: Daemon,
                                                      alice_web: httpx.Client) -> None:
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("notes/nested/a/x.md", "x\n")
        bob.write("notes/nested/b/y.md", "y\n")
        bob.write("notes/nested/b/z.md", "z\n")
    only_folders = alice_web.get("/ui/stores/notes/?dir=nested").text
    assert 'id="folders"' in only_folders and ">a/<" in only_folders and ">b/<" in only_folders
    assert 'id="files"' not in only_folders and "No files." not in only_folders
    files_only = alice_web.get("/ui/stores/notes/?dir=nested/b").text
    assert 'id="files"' in files_only and 'id="folders"' not in files_only
    assert ">y.md<" in files_only and ">z.md<" in files_only


def raw_of(page: str) -> str:
    found = re.search(r'<pre class="raw" id="raw">(.*?)</pre>', page, re.S)
    assert found, page
    return found.group(1)


def test_a_big_file_is_shown_a_page_at_a_time(daemon: Daemon,
                                              alice_web: httpx.Client) -> None:
    """500 lines a page (at most 64 KiB of them), with the way to the previous and
    next pages, also of an old version; a page past the last leads to the last."""
    lines = "".join(f"line {n}\n" for n in range(1, 1235))
    with connect_as(UID_B, daemon.socket) as bob:
        old = bob.write("notes/big/lines.txt", lines)["commit"]
        bob.read("notes/big/lines.txt")
        bob.write("notes/big/lines.txt", lines.replace("line 700\n", "line 700 changed\n"))
        bob.write("notes/big/one-line.txt", "x" * 200_000 + "\n")
    base = "/ui/stores/notes/files/big/lines.txt"
    first = alice_web.get(base).text
    assert raw_of(first) == "".join(f"line {n}\n" for n in range(1, 501))
    assert "page 1 of 3 · lines 1\u2013500 of 1,234" in first
    assert f'href="{base}?page=2" rel="next"' in first and 'rel="prev"' not in first
    second = alice_web.get(f"{base}?page=2").text
    assert raw_of(second).startswith("line 501\n") and "line 700 changed\n" in raw_of(second)
    assert f'href="{base}?page=1" rel="prev"' in second
    assert f'href="{base}?page=3" rel="next"' in second
    last = alice_web.get(f"{base}?page=3").text
    assert raw_of(last).endswith("line 1234\n") and "lines 1,001\u20131,234 of 1,234" in last
    assert 'rel="next"' not in last
    beyond = alice_web.get(f"{base}?page=99", follow_redirects=False)
    assert beyond.status_code == 303 and beyond.headers["location"] == f"{base}?page=3"
    then = alice_web.get(f"{base}?at={old}&page=2").text
    assert "line 700\n" in raw_of(then) and "changed" not in raw_of(then)
    assert f'href="{base}?at={old}&amp;page=3" rel="next"' in then
    for bad in ("0", "x", "-1"):
        assert alice_web.get(f"{base}?page={bad}").status_code == 400
    long = alice_web.get("/ui/stores/notes/files/big/one-line.txt").text
    assert len(raw_of(long)) == 64 * 1024 and "only its first 64.0 KiB are shown" in long
    assert 'class="pager' not in long  # one line: one page


def test_signed_out_pages_lead_to_the_sign_in_form(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.http_url, timeout=60) as web:
        for url in PAGES:
            response = web.get(url, follow_redirects=False)
            assert response.status_code == 303, url
            location = response.headers["location"]
            assert location.startswith("/ui/login?next=%2Fui%2F"), location
        assert web.get("/ui/events").status_code == 401
        assert web.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
        # the bearer header is not how pages are reached, and a token never unlocks /v1
        # through a cookie
        assert web.get("/v1/stores").status_code == 401


def test_sign_in_cookie_is_a_session_not_the_token(daemon: Daemon,
                                                    tokens: dict[str, str]) -> None:
    token = tokens["alice"]
    with httpx.Client(base_url=daemon.http_url, timeout=60) as web:
        form = web.get("/ui/login")
        login_cookie = form.headers["set-cookie"]
        assert "HttpOnly" in login_cookie and "SameSite=strict" in login_cookie
        assert "Path=/ui/login" in login_cookie
        response = web.post("/ui/login", data={"token": token, "nonce": nonce_of(form.text),
                                               "next": "/ui/stores/notes/history"},
                            headers={"Origin": daemon.http_url})
        assert response.status_code == 303
        assert response.headers["location"] == "/ui/stores/notes/history"
        session = next(c for c in response.headers.get_list("set-cookie")
                       if c.startswith("memfs_ui="))
        flags = [part.strip().lower() for part in session.split(";")]
        assert "httponly" in flags and "samesite=strict" in flags and "path=/ui" in flags
        assert "secure" not in flags  # plain HTTP on loopback; TLS adds it (see below)
        value = session.split(";")[0].split("=", 1)[1]
        secret = token.split("_", 2)[2]  # memfs_ID_SECRET (the secret may hold "_")
        assert len(value) >= 40 and secret not in session and token not in session
        assert token not in response.text
        # an unsafe "next" never leads elsewhere
        form = web.get("/ui/login")
        response = web.post("/ui/login", data={"token": token, "nonce": nonce_of(form.text),
                                               "next": "https://evil.example/"},
                            headers={"Origin": daemon.http_url})
        assert response.headers["location"] == "/ui/"


def test_bad_revoked_and_expired_tokens(daemon: Daemon) -> None:
    token = daemon.token("dave", "--label", "to revoke")
    token_id = token.split("_")[1]
    with httpx.Client(base_url=daemon.http_url, timeout=60) as web:
        for bad in ("memfs_000000000000_nope", "", token[:-2] + "xx", "x" * 300):
            form = web.get("/ui/login")
            response = web.post("/ui/login", data={"token": bad, "nonce": nonce_of(form.text)},
                                headers={"Origin": daemon.http_url}, follow_redirects=False)
            assert response.status_code == 401
            assert "unknown, revoked or expired" in response.text
            assert "memfs_ui" not in web.cookies
    signed = sign_in(daemon, token)
    assert signed.get("/ui/stores/team/tasks").status_code == 200
    revoked = memfs_as(0, daemon.socket, "token", "revoke", token_id)
    assert revoked.returncode == 0, revoked.stderr
    # the session opened with it ends with it
    after = signed.get("/ui/stores/team/tasks")
    assert after.status_code == 303 and after.headers["location"].startswith("/ui/login")
    assert signed.get("/ui/events").status_code == 401
    with pytest.raises(AssertionError):
        sign_in(daemon, token)  # and it cannot sign in again


def test_csrf_cross_site_posts_are_refused(daemon: Daemon, tokens: dict[str, str]) -> None:
    token = tokens["alice"]
    with httpx.Client(base_url=daemon.http_url, timeout=60) as web:
        nonce = nonce_of(web.get("/ui/login").text)
        data = {"token": token, "nonce": nonce}
        for headers in ({}, {"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Referer": "https://evil.example/ui/login"},
                        {"Origin": daemon.http_url.replace("127.0.0.1", "localhost")}):
            response = web.post("/ui/login", data=data, headers=headers)
            assert response.status_code == 403, headers
            assert "cross-site" in response.text
        assert "memfs_ui" not in web.cookies
        # the double-submit value must match the form's cookie
        response = web.post("/ui/login", data={**data, "nonce": "forged"},
                            headers={"Origin": daemon.http_url})
        assert response.status_code == 403 and "memfs_ui" not in web.cookies
        # a Referer of this very listener is enough without Origin
        response = web.post("/ui/login", data=data,
                            headers={"Referer": f"{daemon.http_url}/ui/login"})
        assert response.status_code == 303 and "memfs_ui" in web.cookies
        # sign-out needs the session's CSRF value and this origin
        page = web.get("/ui/").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf
        for form, headers in (({"csrf": "wrong"}, {"Origin": daemon.http_url}),
                              ({"csrf": csrf.group(1)}, {"Origin": "https://evil.example"})):
            assert web.post("/ui/logout", data=form, headers=headers).status_code == 403
            assert web.get("/ui/").status_code == 200  # still signed in
        out = web.post("/ui/logout", data={"csrf": csrf.group(1)},
                       headers={"Origin": daemon.http_url}, follow_redirects=False)
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert web.get("/ui/", follow_redirects=False).status_code == 303
        # a form that is not urlencoded, or too big, is refused too
        assert web.post("/ui/login", json=data,
                        headers={"Origin": daemon.http_url}).status_code == 415
        big = web.post("/ui/login", data={"token": "x" * 40_000, "nonce": nonce},
                       headers={"Origin": daemon.http_url})
        assert big.status_code == 413


def test_the_agents_stores_and_no_others(carol_web: httpx.Client) -> None:
    overview = carol_web.get("/ui/").text
    listed = set(re.findall(r'class="store-row" data-store="([^"]+)"', overview))
    assert listed == {"notes", "team"}  # carol: notes and team, both read-only
    # a store carol is not attached to does not exist for her, as one there is not
    for url, status in (("/ui/stores/ops/", 404), ("/ui/stores/ops/history", 404),
                        ("/ui/stores/secret/files/x.md", 404), ("/ui/stores/ops/commits/HEAD", 404),
                        ("/ui/stores/team2/tasks", 404), ("/ui/stores/nope/", 404),
                        ("/ui/stores/nope/tasks", 404)):
        response = carol_web.get(url)
        assert response.status_code == status, (url, response.text)
        assert "ops/" not in response.text.replace("/ui/stores/ops/", "")
    assert carol_web.get("/ui/stores/notes/files/web/page.md").status_code == 200
    changes = carol_web.get("/ui/changes?since=7d").text
    assert 'data-store="ops"' not in changes and ">ops<" not in changes


def test_browsing_changes_nothing_and_is_not_a_read(daemon: Daemon,
                                                    alice_web: httpx.Client) -> None:
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("notes/web/unread.md", "bob's note\n")
        head = bob.log("notes", limit=1)[0]["rev"]
        team_head = bob.log("team", limit=1)[0]["rev"]
    rev = head[:10]
    for url in [*PAGES, "/ui/stores/notes/files/web/unread.md",
                f"/ui/stores/notes/files/web/unread.md?at={rev}",
                f"/ui/stores/notes/commits/{rev}?path=web/unread.md",
                "/ui/stores/notes/?dir=web", "/ui/stores/notes/files/web/missing.md"]:
        alice_web.get(url)
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = alice_web.request(method, url, content=b"x")
            assert response.status_code == 405, (method, url)
            assert "only reads" in response.text
    with connect_as(UID_A, daemon.socket) as alice:
        assert alice.log("notes", limit=1)[0]["rev"] == head  # no commit
        assert alice.log("team", limit=1)[0]["rev"] == team_head
        # looking was not alice reading: she has no record of the file, so a blind
        # replace is still a conflict, and a missing file was not recorded as seen
        assert alice.call("stat", path="notes/web/unread.md")["seen"] is None
        with pytest.raises(ConflictError):
            alice.write("notes/web/unread.md", "overwrite\n")


def test_bad_input_gets_a_clear_error_page(alice_web: httpx.Client) -> None:
    cases = [
        ("/ui/stores/notes/history?rev=yesterday", 400, "bad revision"),
        ("/ui/stores/notes/history?rev=0000000", 404, "no commit"),
        ("/ui/stores/notes/commits/HEAD~99999", 404, "not that long"),
        ("/ui/stores/notes/commits/zz", 400, "bad revision"),
        ("/ui/stores/notes/?page=0", 400, "bad page"),
        ("/ui/stores/notes/?page=abc", 400, "bad page"),
        ("/ui/stores/notes/?dir=../secret", 400, "bad path"),
        ("/ui/stores/notes/?dir=nowhere", 404, "no folder"),
        ("/ui/stores/notes/?bogus=1", 400, "unknown query parameter"),
        ("/ui/stores/notes/files/web/missing.md", 404, "does not exist"),
        ("/ui/stores/notes/files/web/page.md?at=2000-01-01", 404, "starts after"),
        ("/ui/stores/notes/tasks", 400, "not structured"),
        ("/ui/changes?since=last+tuesday", 400, "bad time"),
        ("/ui/changes?since=1h&until=2000-01-01", 400, "ends before it starts"),
        ("/ui/stores/team/sessions?agent=" + "x" * 100, 400, "agent"),
        ("/ui/stores/notes/files/" + "a/" * 70 + "x.md", 400, "deep"),
    ]
    for url, status, words in cases:
        response = alice_web.get(url)
        assert response.status_code == status, (url, response.status_code, response.text)
        assert response.headers["content-type"].startswith("text/html"), url
        message = re.search(r'id="error-message">([^<]*)<', response.text)
        assert message and words in message.group(1), (url, message and message.group(1))
        assert "Nothing was changed" in response.text
    assert alice_web.get("/ui/").status_code == 200  # and the daemon serves on


def test_names_with_bidirectional_overrides_are_not_shown(daemon: Daemon,
                                                          alice_web: httpx.Client) -> None:
    # planted by hand: "txt.<RLO>dm.exe" would read as "txt.exe.md" reversed
    folder = Path(daemon.config["root"]) / "stores" / "notes" / "web"
    names = ["txt.\u202edm.exe", "a\u2066b.md", "zero\u200bwidth.md"]
    for name in names:
        (folder / name).write_text("planted\n")
        os.chown(folder / name, folder.stat().st_uid, folder.stat().st_gid)
    try:
        pages = [alice_web.get("/ui/stores/notes/?dir=web").text, alice_web.get("/ui/").text]
        for page in pages:
            assert not any(c in page for c in "\u202e\u2066\u200b"), "a planted name is shown"
        for name in names:
            response = alice_web.get(f"/ui/stores/notes/files/web/{quote(name)}")
            assert response.status_code == 400, (name, response.status_code)
            assert "printable characters only" in response.text
    finally:
        for name in names:
            (folder / name).unlink()


def test_a_folder_path_leads_to_the_folder(alice_web: httpx.Client) -> None:
    response = alice_web.get("/ui/stores/notes/files/web", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/stores/notes/?dir=web"
    page = alice_web.get("/ui/stores/notes/?dir=web").text
    assert "/ui/stores/notes/files/web/page.md" in page


def test_secure_cookie_over_tls(daemon: Daemon) -> None:
    import shutil
    import ssl
    import subprocess

    from tests.control.http.conftest import http_config
    from tests.support import public_tmpdir

    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed for a certificate"
    base = public_tmpdir("memfs-web-tls-")
    cert, key = base / "cert.pem", base / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=120)
    with Daemon(http_config("memfs-web-tls-", tls_cert=str(cert), tls_key=str(key))) as tls:
        token = tls.token("alice")
        trusted = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(base_url=tls.http_url, verify=trusted, timeout=60) as web:
            form = web.get("/ui/login")
            assert "secure" in form.headers["set-cookie"].lower()
            response = web.post("/ui/login", data={"token": token, "nonce": nonce_of(form.text)},
                                headers={"Origin": tls.http_url})
            assert response.status_code == 303
            session = next(c for c in response.headers.get_list("set-cookie")
                           if c.startswith("memfs_ui="))
            assert "secure" in [part.strip().lower() for part in session.split(";")]
            # an http:// origin is another origin
            again = web.post("/ui/login", data={"token": token, "nonce": "x"},
                             headers={"Origin": tls.http_url.replace("https", "http")})
            assert again.status_code == 403


def test_static_files_are_only_the_assets(daemon: Daemon) -> None:
    with httpx.Client(base_url=daemon.http_url, timeout=60) as web:  # no sign-in needed
        css = web.get("/ui/static/web.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert web.get("/ui/static/live.js").headers["content-type"].startswith(
            "text/javascript")
        for path in ("/ui/static/", "/ui/static/%2e%2e/app.py", "/ui/static/..%2fapp.py",
                     "/ui/static/../templates/base.html", "/ui/static/nope.js"):
            response = web.get(path)
            assert response.status_code == 404, path
            assert "import" not in response.text and "{%" not in response.text, path
