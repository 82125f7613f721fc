"""REST files, stores and search against a real daemon: success and error codes,
ETag / If-Match / If-None-Match, the version check (a stale PUT is 409 and changes
nothing), reads recorded like socket reads, limits, and isolation between agents."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import blake3
import httpx

from tests.control.http.conftest import client, problem
from tests.support import UID_A, UID_B, Daemon, connect_as

F = "/v1/stores/notes/files"


def digest(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def backing(daemon: Daemon, rel: str) -> Path:
    return Path(daemon.config["root"]) / "stores" / rel


def test_healthz_and_openapi_need_no_token(daemon: Daemon) -> None:
    with client(daemon, None) as anonymous:
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        spec = anonymous.get("/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    assert "/v1/stores/{store}/files/{path}" in spec["paths"]
    assert set(spec["paths"]["/v1/stores/{store}/files/{path}"]) == {
        "get", "head", "put", "patch", "delete"}
    # parameters come from the protocol models: the history's `n` has LogRequest's bounds
    history = spec["paths"]["/v1/stores/{store}/history"]["get"]
    n = next(param for param in history["parameters"] if param["name"] == "n")
    assert n["schema"]["maximum"] == 10_000 and history["x-memfs-op"] == "log"
    task_add = spec["paths"]["/v1/stores/{store}/tasks"]["post"]["requestBody"]
    assert task_add["content"]["application/json"]["schema"]["required"] == ["task", "title"]
    assert "WriteRequest" in spec["components"]["schemas"]


def test_stores_lists_mine_with_access(alice: httpx.Client, carol: httpx.Client) -> None:
    mine = alice.get("/v1/stores").json()
    assert mine["agent"] == "alice"
    by_name = {store["name"]: store for store in mine["stores"]}
    assert by_name["notes"]["access"] == "read_write" and by_name["team"]["structured"]
    assert "secret" not in by_name
    assert [s["name"] for s in carol.get("/v1/stores").json()["stores"]] == ["notes", "team"]


def test_put_get_round_trip_with_etag(alice: httpx.Client, daemon: Daemon) -> None:
    data = b"# plan\nfirst line\n"
    created = alice.put(f"{F}/rt/plan.md", content=data)
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == f'"{digest(data)}"'
    assert created.headers["location"] == f"{F}/rt/plan.md"
    assert created.json()["created"] is True and created.json()["digest"] == digest(data)
    got = alice.get(f"{F}/rt/plan.md")
    assert got.status_code == 200 and got.content == data
    assert got.headers["etag"] == f'"{digest(data)}"'
    assert got.headers["x-memfs-last-writer"] == "alice"
    assert got.headers["content-type"].startswith("text/markdown")
    assert backing(daemon, "notes/rt/plan.md").read_bytes() == data
    head = alice.head(f"{F}/rt/plan.md")
    assert head.status_code == 200 and head.headers["etag"] == got.headers["etag"]
    assert head.headers["content-length"] == str(len(data)) and head.content == b""
    listed = alice.get("/v1/stores/notes/files", params={"glob": "rt/*.md"}).json()
    assert listed == {"paths": ["notes/rt/plan.md"]}


def test_binary_content_round_trips(alice: httpx.Client) -> None:
    data = bytes(range(256)) + b"\xff\xfe not utf-8"
    assert alice.put(f"{F}/rt/blob.bin", content=data).status_code == 201
    got = alice.get(f"{F}/rt/blob.bin")
    assert got.content == data
    assert got.headers["content-type"] == "application/octet-stream"


def test_stale_put_is_409_and_changes_nothing(alice: httpx.Client, bob: httpx.Client,
                                              daemon: Daemon) -> None:
    assert alice.put(f"{F}/stale.md", content=b"v1\n").status_code == 201
    assert bob.get(f"{F}/stale.md").content == b"v1\n"  # bob's read is recorded
    assert alice.put(f"{F}/stale.md", content=b"v2 by alice\n").status_code == 200
    refused = problem(bob.put(f"{F}/stale.md", content=b"v2 by bob\n"), 409, "conflict")
    assert refused["details"]["last_writer"] == "alice"
    assert refused["details"]["current_digest"] == digest(b"v2 by alice\n")
    assert backing(daemon, "notes/stale.md").read_bytes() == b"v2 by alice\n"
    # reading again, then writing, is accepted
    assert bob.get(f"{F}/stale.md").content == b"v2 by alice\n"
    accepted = bob.put(f"{F}/stale.md", content=b"v3 by bob\n")
    assert accepted.status_code == 200 and accepted.json()["previous_digest"] == digest(
        b"v2 by alice\n")


def test_put_over_a_file_never_read_is_409(alice: httpx.Client, bob: httpx.Client) -> None:
    assert alice.put(f"{F}/unread.md", content=b"alice's\n").status_code == 201
    problem(bob.put(f"{F}/unread.md", content=b"bob's\n"), 409, "conflict")
    assert alice.get(f"{F}/unread.md").content == b"alice's\n"


def test_if_match_mismatch_is_412_and_changes_nothing(alice: httpx.Client) -> None:
    alice.put(f"{F}/im.md", content=b"one\n")
    etag = alice.get(f"{F}/im.md").headers["etag"]
    wrong = '"' + "0" * 64 + '"'
    body = problem(alice.put(f"{F}/im.md", content=b"two\n", headers={"If-Match": wrong}),
                   412, "conflict")
    assert body["title"] == "Precondition failed"
    assert alice.get(f"{F}/im.md").content == b"one\n"
    ok = alice.put(f"{F}/im.md", content=b"two\n", headers={"If-Match": etag})
    assert ok.status_code == 200
    # the old tag no longer matches: 412 for the replace, the delete and a sed edit
    problem(alice.put(f"{F}/im.md", content=b"three\n", headers={"If-Match": etag}),
            412, "conflict")
    problem(alice.delete(f"{F}/im.md", headers={"If-Match": etag}), 412, "conflict")
    problem(alice.patch(f"{F}/im.md", json={"sed": ["s/two/2/"]}, headers={"If-Match": etag}),
            412, "conflict")
    assert alice.get(f"{F}/im.md").content == b"two\n"


def test_if_match_cannot_bypass_the_agents_record(alice: httpx.Client,
                                                  bob: httpx.Client) -> None:
    """Knowing the current digest is not enough: the agent must have seen it."""
    made = alice.put(f"{F}/guess.md", content=b"alice\n")
    problem(bob.put(f"{F}/guess.md", content=b"bob\n",
                    headers={"If-Match": made.headers["etag"]}), 409, "conflict")


def test_if_none_match_star_creates_only(alice: httpx.Client, bob: httpx.Client) -> None:
    first = alice.put(f"{F}/once.md", content=b"first\n", headers={"If-None-Match": "*"})
    assert first.status_code == 201
    problem(alice.put(f"{F}/once.md", content=b"again\n", headers={"If-None-Match": "*"}),
            412, "conflict")
    problem(bob.put(f"{F}/once.md", content=b"bob\n", headers={"If-None-Match": "*"}),
            412, "conflict")
    assert alice.get(f"{F}/once.md").content == b"first\n"


def test_bad_preconditions_are_400(alice: httpx.Client) -> None:
    for headers in ({"If-Match": "not-a-tag"}, {"If-Match": '"a" "b"'},
                    {"If-None-Match": "abc"}, {"If-Match": '"a", *'},
                    {"If-Match": 'w/"a"'}):
        problem(alice.put(f"{F}/pre.md", content=b"x", headers=headers), 400, "invalid")
    problem(alice.put(f"{F}/pre.md?force=maybe", content=b"x"), 400, "invalid")
    problem(alice.put(f"{F}/pre.md?forse=true", content=b"x"), 400, "invalid")
    assert alice.get(f"{F}/pre.md").status_code == 404


def test_force_overwrites_unseen_changes(alice: httpx.Client, bob: httpx.Client) -> None:
    alice.put(f"{F}/forced.md", content=b"alice\n")
    problem(bob.put(f"{F}/forced.md", content=b"bob\n"), 409, "conflict")
    forced = bob.put(f"{F}/forced.md", params={"force": "true"}, content=b"bob\n")
    assert forced.status_code == 200
    assert alice.get(f"{F}/forced.md").content == b"bob\n"


def test_get_if_none_match_is_304(alice: httpx.Client) -> None:
    alice.put(f"{F}/cond.md", content=b"same\n")
    etag = alice.get(f"{F}/cond.md").headers["etag"]
    again = alice.get(f"{F}/cond.md", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag


def test_get_records_the_read_like_the_socket(alice: httpx.Client, daemon: Daemon) -> None:
    """An HTTP read makes a later socket write by the same agent acceptable, and a
    socket write by another agent shows as changed-since-last-read."""
    with connect_as(UID_B, daemon.socket) as bob_socket:
        bob_socket.write("notes/shared-read.md", "bob v1\n")
        alice.get(f"{F}/shared-read.md")
        bob_socket.read("notes/shared-read.md")
        bob_socket.write("notes/shared-read.md", "bob v2\n")
    changed = alice.get(f"{F}/shared-read.md")
    assert changed.headers["x-memfs-changed-since-last-read"] == "true"
    with connect_as(UID_A, daemon.socket) as alice_socket:
        result = alice_socket.write("notes/shared-read.md", "alice v3\n")
    assert result["previous_digest"] == digest(b"bob v2\n")


def test_missing_file_is_404_and_records_absence(alice: httpx.Client, bob: httpx.Client
                                                 ) -> None:
    alice.put(f"{F}/gone.md", content=b"x\n")
    bob.get(f"{F}/gone.md")
    alice.delete(f"{F}/gone.md")
    problem(bob.get(f"{F}/gone.md"), 404, "not_found")
    # bob saw that no file is there: creating it is fine now
    assert bob.put(f"{F}/gone.md", content=b"bob's\n").status_code == 201
    problem(alice.get(f"{F}/never/was.md"), 404, "not_found")
    problem(alice.delete(f"{F}/never/was.md"), 404, "not_found")


def test_patch_append_and_sed(alice: httpx.Client, bob: httpx.Client) -> None:
    alice.put(f"{F}/patch.md", content=b"a\nb\n")
    appended = bob.patch(f"{F}/patch.md", json={"append": "c\n"})  # no read needed
    assert appended.status_code == 200 and appended.json()["size"] == 6
    problem(alice.patch(f"{F}/patch.md", json={"sed": ["s/a/A/"]}), 409, "conflict")
    alice.get(f"{F}/patch.md")
    edited = alice.patch(f"{F}/patch.md", json={"sed": "s/a/A/"})
    assert edited.status_code == 200, edited.text
    assert alice.get(f"{F}/patch.md").content == b"A\nb\nc\n"
    for bad in ({}, {"append": "x", "sed": ["p"]}, {"append": 3}, {"sed": []},
                {"sed": ["w /etc/passwd"]}, {"append": "x", "extra": 1}, {"sed": ["p"],
                                                                         "force": "yes"}):
        problem(alice.patch(f"{F}/patch.md", json=bad), 400, "invalid")
    problem(alice.patch(f"{F}/patch.md", content=b"[1]"), 400, "invalid")
    problem(alice.patch(f"{F}/patch.md", content=b"{not json"), 400, "invalid")
    problem(alice.patch(f"{F}/patch.md", json={"append": "x"},
                        headers={"If-Match": '"' + "0" * 64 + '"'}), 412, "conflict")
    assert alice.get(f"{F}/patch.md").content == b"A\nb\nc\n"


def test_delete_is_version_checked(alice: httpx.Client, bob: httpx.Client,
                                   daemon: Daemon) -> None:
    alice.put(f"{F}/del.md", content=b"x\n")
    problem(bob.delete(f"{F}/del.md"), 409, "conflict")
    assert backing(daemon, "notes/del.md").exists()
    etag = bob.get(f"{F}/del.md").headers["etag"]
    assert bob.delete(f"{F}/del.md", headers={"If-Match": etag}).json()["deleted"] is True
    assert not backing(daemon, "notes/del.md").exists()


def test_isolation_between_agents(alice: httpx.Client, carol: httpx.Client,
                                  daemon: Daemon) -> None:
    alice.put("/v1/stores/ops/files/private.md", content=b"ops\n")
    # a store an agent is not attached to does not exist for it, as one that does not
    problem(carol.get("/v1/stores/ops/files/private.md"), 404, "not_found")
    problem(carol.get("/v1/stores/ops/files"), 404, "not_found")
    problem(carol.put("/v1/stores/ops/files/x.md", content=b"x"), 404, "not_found")
    problem(carol.put(f"{F}/carol.md", content=b"x"), 403, "permission_denied")  # read-only
    problem(alice.get("/v1/stores/secret/files/s.md"), 404, "not_found")
    problem(alice.get("/v1/stores/nostore/files/s.md"), 404, "not_found")
    assert not backing(daemon, "notes/carol.md").exists()


def test_bad_paths_are_400(alice: httpx.Client) -> None:
    for path in ("%2e%2e/%2e%2e/etc/passwd", "a/%00b", "a//b", "a/%2e%2e/%2e%2e/x"):
        response = alice.put(f"{F}/{path}", content=b"x")
        assert response.status_code in (400, 404), (path, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")


def test_too_large_is_413_and_changes_nothing(alice: httpx.Client, daemon: Daemon) -> None:
    limit = 16 * 1024 * 1024
    problem(alice.put(f"{F}/huge.bin", content=b"x" * (limit + 1)), 413, "too_large")
    assert not backing(daemon, "notes/huge.bin").exists()

    def chunks():  # type: ignore[no-untyped-def]  # no Content-Length: a streamed body
        for _ in range(17):
            yield b"y" * (1024 * 1024)

    problem(alice.put(f"{F}/huge.bin", content=chunks()), 413, "too_large")
    assert not backing(daemon, "notes/huge.bin").exists()
    assert alice.get("/healthz").status_code == 200


def test_search_uses_the_jailed_ripgrep(alice: httpx.Client, carol: httpx.Client) -> None:
    alice.put(f"{F}/search/a.md", content=b"Needle here\n")
    alice.put("/v1/stores/ops/files/search.md", content=b"needle in ops\n")
    found = alice.get("/v1/search", params={"pattern": "needle", "flag": "-i",
                                            "path": "notes/search"}).json()
    assert found["exit_code"] == 0 and found["output"] == "notes/search/a.md:Needle here\n"
    everywhere = alice.get("/v1/search", params=[("arg", "-l"), ("arg", "needle")]).json()
    assert everywhere["output"].splitlines() == ["ops/search.md"]
    assert carol.get("/v1/search", params={"pattern": "needle"}).json()["exit_code"] == 1
    problem(carol.get("/v1/search", params={"pattern": "x", "path": "ops"}), 404,
            "not_found")
    problem(alice.get("/v1/search", params={"pattern": "x", "flag": "--pre=sh"}), 400,
            "invalid")
    problem(alice.get("/v1/search"), 400, "invalid")
    problem(alice.get("/v1/search", params={"pattern": "x", "arg": "y"}), 400, "invalid")


def test_search_format_json_answers_structured_matches(
        alice: httpx.Client, carol: httpx.Client) -> None:
    """?format=json: the matches (offsets in characters), with pattern or arg; the
    flags that print no matches are refused, as is format with q (ranked recall)."""
    alice.put(f"{F}/structured/a.md", content="first\nCafé needle here\nlast\n".encode())
    found = alice.get("/v1/search", params=[
        ("pattern", "needle"), ("flag", "-C1"), ("path", "notes/structured"),
        ("format", "json")])
    assert found.status_code == 200
    assert found.json() == {"matches": [{
        "path": "notes/structured/a.md", "line": 2, "text": "Café needle here",
        "submatches": [{"start": 5, "end": 11, "match": "needle"}],
        "before": [{"line": 1, "text": "first"}], "after": [{"line": 3, "text": "last"}]}],
        "exit_code": 0, "truncated": False, "stderr": ""}
    by_arg = alice.get("/v1/search", params=[("arg", "-i"), ("arg", "NEEDLE"),
                                             ("arg", "notes/structured"), ("format", "json")])
    assert [m["path"] for m in by_arg.json()["matches"]] == ["notes/structured/a.md"]
    text = alice.get("/v1/search", params={"pattern": "needle", "path": "notes/structured",
                                           "format": "text"}).json()
    assert text["output"] == "notes/structured/a.md:Café needle here\n"
    problem(carol.get("/v1/search", params={"pattern": "x", "path": "ops",
                                            "format": "json"}), 404, "not_found")
    refused = problem(alice.get("/v1/search", params=[
        ("arg", "-l"), ("arg", "needle"), ("format", "json")]), 400, "invalid")
    assert "does not go with format json" in refused["detail"]
    for params in ({"pattern": "x", "flag": "--json"}, {"pattern": "x", "format": "xml"},
                   {"q": "needle", "format": "json"},
                   [("pattern", "x"), ("format", "json"), ("format", "text")]):
        problem(alice.get("/v1/search", params=params), 400, "invalid")


def test_old_version_with_at(alice: httpx.Client) -> None:
    alice.put(f"{F}/at.md", content=b"old\n")
    alice.get(f"{F}/at.md")
    alice.put(f"{F}/at.md", content=b"new\n")
    old = alice.get(f"{F}/at.md", params={"at": "HEAD~1"})
    assert old.status_code == 200 and old.content == b"old\n"
    old_digest = digest(b"old\n")
    assert old.headers["etag"] == f'"{old_digest}"'
    problem(alice.get(f"{F}/at.md", params={"at": "yesterday-ish"}), 400, "invalid")
    problem(alice.get(f"{F}/at.md", params={"at": "0000000"}), 404, "not_found")


def test_unknown_endpoints_and_methods(alice: httpx.Client) -> None:
    problem(alice.get("/v1/nothing-here"), 404, "not_found")
    problem(alice.post(f"{F}/x.md"), 405, "method_not_allowed")
    problem(alice.get("/v1/stores", params={"x": "1"}), 400, "invalid")


def test_the_daemon_survives_hostile_requests(alice: httpx.Client, daemon: Daemon) -> None:
    import socket

    host, port = daemon.http_url.removeprefix("http://").rsplit(":", 1)
    for junk in (b"\x00\xff garbage\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: " +
                 b"y" * 100_000 + b"\r\n\r\n", b"PUT /v1/stores/notes/files/a HTTP/1.1\r\n"
                 b"Content-Length: 99999999999999999999\r\n\r\n"):
        # the server may answer and close before we are done: that is fine too
        with (socket.create_connection((host, int(port)), timeout=30) as raw,
              contextlib.suppress(ConnectionError, OSError)):
            raw.sendall(junk)
            raw.shutdown(socket.SHUT_WR)
            while raw.recv(65536):
                pass
    assert alice.get("/healthz").status_code == 200
    assert daemon.alive()
    assert os.path.exists(daemon.socket)


def test_a_path_below_a_file_is_not_found_and_cannot_be_made(alice: httpx.Client,
                                                              daemon: Daemon) -> None:
    alice.put(f"{F}/under.md", content=b"x\n")
    for response in (alice.get(f"{F}/under.md/x"), alice.delete(f"{F}/under.md/x"),
                     alice.get(f"{F}", params={"glob": "under.md/x"}),
                     alice.get("/v1/stores/notes/diff", params={"path": "under.md/x"}),
                     alice.get("/v1/stores/notes/history", params={"path": "under.md/x"})):
        assert "is a file, not a folder" in problem(response, 404, "not_found")["detail"]
    assert alice.head(f"{F}/under.md/x").status_code == 404
    for response in (alice.put(f"{F}/under.md/x", content=b"y"),
                     alice.patch(f"{F}/under.md/x", json={"append": "y"})):
        assert "is a file, not a folder" in problem(response, 409, "conflict")["detail"]
    assert backing(daemon, "notes/under.md").read_bytes() == b"x\n"


def test_head_answers_the_status_and_headers_of_get(alice: httpx.Client) -> None:
    alice.put(f"{F}/head.md", content=b"one\n")
    alice.get(f"{F}/head.md")
    alice.put(f"{F}/head.md", content=b"two\n")
    skipped = {"date", "x-memfs-changed-since-last-read"}  # GET records the read; HEAD not
    for params, headers in (({}, {}), ({"at": "HEAD~1"}, {}), ({"at": "0000000"}, {}),
                            ({}, {"If-None-Match": "*"}), ({"at": "x y"}, {}),
                            ({"nope": "1"}, {})):
        for path in (f"{F}/head.md", f"{F}/missing.md", f"{F}/head.md/x"):
            got = alice.get(path, params=params, headers=headers)
            head = alice.head(path, params=params, headers=headers)
            assert head.status_code == got.status_code, (path, params, headers)
            assert head.content == b""
            assert {k: v for k, v in head.headers.items() if k not in skipped} \
                == {k: v for k, v in got.headers.items() if k not in skipped}, (path, params)


def test_a_sed_script_with_control_characters_is_refused(alice: httpx.Client) -> None:
    alice.put(f"{F}/ctl.md", content=b"a\n")
    alice.get(f"{F}/ctl.md")
    refused = problem(alice.patch(f"{F}/ctl.md", json={"sed": "\u001f\u001ee"}), 400,
                      "invalid")
    assert "control characters" in refused["detail"]
    tab = alice.patch(f"{F}/ctl.md", json={"sed": "s/a/\tb/"})  # tab and newline pass
    assert tab.status_code == 200, tab.text
    assert alice.get(f"{F}/ctl.md").content == b"\tb\n"


def test_a_glob_is_what_the_openapi_document_says(alice: httpx.Client) -> None:
    assert alice.get(F, params={"glob": "**/*.md"}).status_code == 200
    for bad in ("0" * 64, "a//b", "../x", "./x", "[z-a]", "[a-c]*", "x" * 60 + "/" * 900):
        problem(alice.get(F, params={"glob": bad}), 400, "invalid")
    problem(alice.get(F, params={"glob": "0" * 63}), 404, "not_found")  # no such file
    assert alice.get(F, params={"glob": "0*" * 31}).json() == {"paths": []}
