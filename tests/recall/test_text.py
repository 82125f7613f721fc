"""Recall's words, daemon-free (memfs/recall/text.py): stemming and folding meet other
word forms, stopwords leave a question's topic, acronyms spelled out are seen, titles
and supersedes are read from front matter, headings and JSON, and best lines are
numbered as memfs counts lines."""

from __future__ import annotations

import pytest

from memfs.recall.text import acronyms, best_lines, fields_of, query_terms


def test_other_forms_meet() -> None:
    assert query_terms("Rate-limited") == query_terms("rate limiting") == ["rate", "limit"]
    assert query_terms("Retrying QUEUES") == ["retri", "queue"]
    assert query_terms("café naïve") == ["cafe", "naiv"]


def test_stopwords_go_unless_nothing_else_is_left() -> None:
    assert query_terms("did we solve this before?") == ["solv"]
    assert query_terms("what is it") == ["what", "is", "it"]


@pytest.mark.parametrize("query", ["x" * 1001, " ".join(["w"] * 33)])
def test_bad_queries(query: str) -> None:
    with pytest.raises(ValueError):
        query_terms(query)


@pytest.mark.parametrize("query", ["", " ?! ", "[", "-- ..."])
def test_a_query_without_a_word_asks_for_nothing(query: str) -> None:
    assert query_terms(query) == []


def test_fields() -> None:
    decision = fields_of("decisions/2026-01-01-a.md", b"---\ntitle: Use SQLite\nstatus: "
                         b"superseded\nsuperseded_by: 2026-02-01-b\n---\n\n## Decision\n")
    assert decision.title == "Use SQLite" and decision.superseded
    linked = fields_of("d.md", b"---\ntitle: T\nstatus: accepted\nsuperseded_by: x\n---\n")
    assert linked.superseded  # an old record that names its successor
    note = fields_of("notes/a.md", b"intro\n\n## Retry queue\n\ntext\n")
    assert note.title == "Retry queue" and not note.superseded
    task = fields_of("tasks/t.json", b'{"id": "t", "title": "Add rate limits"}')
    assert task.title == "Add rate limits"
    assert fields_of("bad.json", b"{not json").title == ""
    assert fields_of("bin", b"\xff\xfe").body == "\ufffd\ufffd"


def test_best_lines_are_numbered_as_memfs_counts_lines() -> None:
    text = "# Retry queue\nintro\u2028still line two\r\nthe queue stopped\nretry later\n"
    assert best_lines(text, query_terms("retry queue"), count=2) == [
        (1, "# Retry queue"), (3, "the queue stopped")]
    assert best_lines(text, query_terms("absent"), count=2) == []
    assert best_lines("Café ouvert\n", query_terms("cafe")) == [(1, "Café ouvert")]


def test_the_acronyms_a_query_spells_out() -> None:
    assert acronyms("clear cached pages at the content delivery network") == ["ccp", "cdn"]
    assert acronyms("Service-Level Agreement breach notice") == [
        "sla", "lab", "abn", "slab", "labn"]
    # a run with a stopword in it spells nothing; nor does one that spells a stopword
    assert acronyms("how long are product prices cached") == ["ppc"]
    assert acronyms("in time of nights") == [] and acronyms("idle total surge") == []
