"""REST endpoints that mirror protocol ops: history, diff, restore, sessions, the
brief, tasks (lease errors as 409) and decisions; their success and error codes."""

from __future__ import annotations

import itertools

import httpx

from tests.control.http.conftest import problem
from tests.support import Daemon

T = "/v1/stores/team"
_ids = itertools.count()


def test_whoami(alice: httpx.Client) -> None:
    me = alice.get("/v1/whoami").json()
    assert me["agent"] == "alice" and me["stores"]["team"] == "read_write"


def test_history_diff_and_restore(alice: httpx.Client, bob: httpx.Client) -> None:
    f = "/v1/stores/notes/files/hist/a.md"
    alice.put(f, content=b"one\n")
    alice.put(f, content=b"two\n")
    log = alice.get("/v1/stores/notes/history", params={"path": "hist/a.md", "n": "5"})
    entries = log.json()["entries"]
    assert [e["summary"] for e in entries] == ["write notes/hist/a.md"] * 2
    assert entries[0]["author"] == "alice" and len(entries) == 2
    assert len(alice.get("/v1/stores/notes/history", params={"n": 1}).json()["entries"]) == 1
    problem(alice.get("/v1/stores/notes/history", params={"n": "0"}), 400, "invalid")
    problem(alice.get("/v1/stores/notes/history", params={"n": "many"}), 400, "invalid")
    problem(alice.get("/v1/stores/notes/history", params={"limit": "3"}), 400, "invalid")
    problem(alice.get("/v1/stores/secret/history"), 404, "not_found")
    diff = alice.get("/v1/stores/notes/diff", params={"path": "hist/a.md", "rev": "HEAD~1"})
    assert "-one" in diff.json()["diff"] and "+two" in diff.json()["diff"]
    problem(alice.get("/v1/stores/notes/diff"), 400, "invalid")  # path is required

    # restore is a version-checked write: bob never read the file
    problem(bob.post("/v1/stores/notes/restore", json={"path": "hist/a.md", "rev": "HEAD~1"}),
            409, "conflict")
    etag = bob.get(f).headers["etag"]
    problem(bob.post("/v1/stores/notes/restore", json={"path": "hist/a.md", "rev": "HEAD~1"},
                     headers={"If-Match": '"' + "0" * 64 + '"'}), 412, "conflict")
    restored = bob.post("/v1/stores/notes/restore", json={"path": "hist/a.md",
                                                          "rev": "HEAD~1"},
                        headers={"If-Match": etag})
    assert restored.status_code == 200, restored.text
    assert alice.get(f).content == b"one\n"
    problem(bob.post("/v1/stores/notes/restore", json={"path": "hist/a.md", "rev": "nope!"}),
            400, "invalid")
    problem(bob.post("/v1/stores/notes/restore", json={"path": "hist/a.md", "rev": "HEAD~1",
                                                       "expect": "absent"}), 400, "invalid")


def test_sessions(alice: httpx.Client, bob: httpx.Client, carol: httpx.Client) -> None:
    started = alice.post(f"{T}/sessions", json={"goal": "try the HTTP API"})
    assert started.status_code == 201, started.text
    session = started.json()["id"]
    point = alice.post(f"{T}/sessions/{session}/checkpoints", json={"note": "half way"})
    assert point.status_code == 201, point.text
    handed = alice.post(f"{T}/sessions/{session}/handoff",
                        json={"summary": "done", "next": "ship it"})
    assert handed.status_code == 200, handed.text
    shown = alice.get(f"{T}/sessions/{session}").json()
    assert shown["id"] == session and shown["state"] == "closed"
    listed = bob.get(f"{T}/sessions", params={"agent": "alice", "limit": "10"}).json()
    assert session in [s["id"] for s in listed["sessions"]]
    # sessions belong to their agent; carol may only read
    problem(bob.post(f"{T}/sessions/{session}/checkpoints", json={"note": "mine?"}), 403,
            "permission_denied")
    problem(carol.post(f"{T}/sessions", json={"goal": "x"}), 403, "permission_denied")
    problem(alice.post(f"{T}/sessions/{session}/checkpoints", json={}), 400, "invalid")
    problem(alice.post(f"{T}/sessions/{session}/checkpoints", json={"note": 5}), 400,
            "invalid")
    problem(alice.post(f"{T}/sessions/{session}/checkpoints",
                       json={"note": "x", "session": "other"}), 400, "invalid")
    problem(alice.post(f"{T}/sessions", json={"goal": "x", "as_agent": "bob"}), 400,
            "invalid")
    problem(alice.get(f"{T}/sessions/2020-01-01-alice-abcd"), 404, "not_found")
    problem(alice.get(f"{T}/sessions/not-an-id"), 404, "not_found")  # names no session
    problem(alice.post("/v1/stores/notes/sessions", json={}), 404, "not_found")  # none


def test_brief(alice: httpx.Client) -> None:
    brief = alice.get(f"{T}/brief", params={"max_bytes": "2048"})
    assert brief.status_code == 200 and "markdown" in brief.json()
    problem(alice.get(f"{T}/brief", params={"max_bytes": "10"}), 400, "invalid")


def test_tasks_and_leases(alice: httpx.Client, bob: httpx.Client,
                          carol: httpx.Client) -> None:
    task = f"http-task-{next(_ids)}"
    added = alice.post(f"{T}/tasks", json={"task": task, "title": "Try leases", "body": "b"})
    assert added.status_code == 201, added.text
    problem(alice.post(f"{T}/tasks", json={"task": task, "title": "again"}), 409, "conflict")
    claimed = alice.post(f"{T}/tasks/{task}/claim", json={"ttl": "10m"})
    assert claimed.status_code == 200 and claimed.json()["lease"]["agent"] == "alice"
    held = problem(bob.post(f"{T}/tasks/{task}/claim", json={}), 409, "lease_held")
    assert held["details"]["holder"] == "alice"
    assert alice.post(f"{T}/tasks/{task}/checkpoint", json={"note": "going"}).status_code == 200
    assert alice.post(f"{T}/tasks/{task}/release").status_code == 200  # empty body
    problem(alice.post(f"{T}/tasks/{task}/checkpoint", json={"note": "late"}), 409,
            "lease_lost")
    assert bob.post(f"{T}/tasks/{task}/claim", json={"ttl": "5m"}).status_code == 200
    problem(alice.post(f"{T}/tasks/{task}/release", json={"force": True}), 403,
            "permission_denied")  # force is for delegates; tokens never are
    done = bob.post(f"{T}/tasks/{task}/complete", json={"note": "shipped"})
    assert done.status_code == 200 and done.json()["status"] == "done"
    assert alice.get(f"{T}/tasks/{task}").json()["completed_by"] == "bob"
    listed = alice.get(f"{T}/tasks", params={"status": "done"}).json()["tasks"]
    assert task in [t["id"] for t in listed]
    problem(alice.get(f"{T}/tasks", params={"status": "someday"}), 400, "invalid")
    problem(alice.get(f"{T}/tasks/no-such-task"), 404, "not_found")
    problem(carol.post(f"{T}/tasks/{task}/claim", json={}), 403, "permission_denied")
    problem(alice.post(f"{T}/tasks/{task}/claim", json={"ttl": "forever"}), 400, "invalid")


def test_decisions(alice: httpx.Client, bob: httpx.Client) -> None:
    first = alice.post(f"{T}/decisions", json={"title": "Use HTTP", "decision": "Serve REST",
                                               "reason": "agents elsewhere"})
    assert first.status_code == 201, first.text
    old = first.json()["id"]
    second = bob.post(f"{T}/decisions", json={"title": "Use HTTPS", "decision": "TLS",
                                              "reason": "beyond loopback",
                                              "supersedes": old})
    assert second.status_code == 201, second.text
    assert alice.get(f"{T}/decisions/{old}").json()["status"] == "superseded"
    accepted = [d["id"] for d in alice.get(f"{T}/decisions").json()["decisions"]]
    assert second.json()["id"] in accepted and old not in accepted
    everything = alice.get(f"{T}/decisions", params={"status": "all"}).json()["decisions"]
    assert old in [d["id"] for d in everything]
    problem(alice.post(f"{T}/decisions", json={"title": "no reason", "decision": "x"}), 400,
            "invalid")
    problem(alice.get(f"{T}/decisions/2020-01-01-nothing"), 404, "not_found")


def test_plain_writes_to_structured_folders_are_refused(alice: httpx.Client,
                                                        daemon: Daemon) -> None:
    problem(alice.put(f"{T}/files/tasks/forged.json", content=b"{}"), 400, "invalid")
    problem(alice.patch(f"{T}/files/tasks/forged.json", json={"append": "x"}), 400, "invalid")


def test_a_path_that_names_no_resource_is_404(alice: httpx.Client) -> None:
    """An id in the path that no record can have (schemathesis's stateful phase sent
    such ids) names no resource: 404, while the same value in a body is 400."""
    for url in (f"{T}/decisions/0", f"{T}/sessions/not-an-id", f"{T}/tasks/Bad%20Id",
                f"{T}/sessions/0/checkpoints"):
        call = alice.post if url.endswith("checkpoints") else alice.get
        kwargs = {"json": {"note": "n"}} if call is alice.post else {}
        answer = problem(call(url, **kwargs), 404, "not_found")
        assert answer["detail"].startswith("no "), answer
    problem(alice.post(f"{T}/tasks/x/claim", json={"session": "not an id"}), 400, "invalid")
