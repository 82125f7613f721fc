"""``GET /v1/search?q=``: ranked recall over HTTP against a real daemon (the recall op:
files best first, paged, only the token's agent's stores, not a read), beside
ripgrep's ``?pattern=``; ``POST /v1/reindex``; both in the OpenAPI document."""

from __future__ import annotations

import httpx

from tests.control.http.conftest import client, problem
from tests.support import Daemon

F = "/v1/stores/{store}/files/{path}"


def test_q_is_ranked_recall_and_pattern_stays_ripgrep(alice: httpx.Client,
                                                      carol: httpx.Client) -> None:
    alice.put(F.format(store="notes", path="recall/limits.md"),
              content=b"# Rate limiting\n\nAPI keys are rate-limited at the edge proxy.\n")
    alice.put(F.format(store="notes", path="recall/other.md"), content=b"limits of lunch\n")
    alice.put(F.format(store="ops", path="recall/limits.md"), content=b"rate limits in ops\n")
    found = alice.get("/v1/search", params={"q": "rate limiting"}).json()
    # (the two about rate limits first, in an order the ranker's fusion chooses)
    assert sorted(hit["path"] for hit in found["hits"][:2]) == ["notes/recall/limits.md",
                                                                "ops/recall/limits.md"]
    best = next(hit for hit in found["hits"] if hit["path"] == "notes/recall/limits.md")
    assert best["last_writer"] == "alice" and best["lines"][0]["line"] == 1
    assert {line["line"] for line in best["lines"]} == {1, 3}
    # only the stores carol may read; not a read
    mine = carol.get("/v1/search", params={"q": "rate limiting"}).json()
    assert "ops/recall/limits.md" not in [hit["path"] for hit in mine["hits"]]
    head = carol.head(F.format(store="notes", path="recall/limits.md"))
    assert head.headers["X-Memfs-Changed-Since-Last-Read"] == "false"
    problem(carol.get("/v1/search", params={"q": "rate", "store": "ops"}), 404,
            "not_found")  # a store carol is not attached to: as if it did not exist
    # paged
    first = alice.get("/v1/search", params={"q": "limits", "limit": "1"}).json()
    second = alice.get("/v1/search", params={"q": "limits", "limit": "1", "page": "2"}).json()
    assert first["next_page"] == 2 and first["hits"][0] != second["hits"][0]
    # ripgrep as before
    grep = alice.get("/v1/search", params={"pattern": "rate-limited"}).json()
    assert grep["output"] == "notes/recall/limits.md:API keys are rate-limited at the " \
                             "edge proxy.\n"


def test_bad_recall_requests_are_400(alice: httpx.Client) -> None:
    for params in ({"q": ""}, {"q": "x" * 1001}, {"q": " ".join(["w"] * 33)},
                   {"q": "a", "limit": "0"}, {"q": "a", "page": "x"},
                   {"q": "a", "pattern": "b"}, {"q": "a", "unknown": "1"},
                   [("q", "a"), ("q", "b")]):
        problem(alice.get("/v1/search", params=params), 400, "invalid")


def test_a_query_of_punctuation_finds_nothing(alice: httpx.Client) -> None:
    for q in ("...", "[", "?!"):
        found = alice.get("/v1/search", params={"q": q})
        assert found.status_code == 200, found.text
        assert (found.json()["hits"], found.json()["terms"]) == ([], [])


def test_reindex_and_the_openapi_document(daemon: Daemon, alice: httpx.Client) -> None:
    rebuilt = alice.post("/v1/reindex", json={"store": "notes"})
    assert rebuilt.status_code == 200 and "notes" in rebuilt.json()["indexed"]
    problem(alice.post("/v1/reindex", json={"store": "nosuchstore"}), 404, "not_found")
    with client(daemon, None) as anonymous:
        spec = anonymous.get("/v1/openapi.json").json()
    search = spec["paths"]["/v1/search"]["get"]
    (query,) = search["parameters"]  # pattern, arg or q: one form-exploded object
    assert query["schema"]["properties"]["q"]["maxLength"] == 1000
    assert spec["paths"]["/v1/reindex"]["post"]["x-memfs-op"] == "reindex"
