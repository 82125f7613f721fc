"""jail/rg_json.py, pure: real ``rg --json`` output (captured from real runs by
tests/jail/rg_json/capture.py, which says over which files) into matches, and back
into rg's own text output of the same search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfs.jail.rg_json import BadOutput, Match, matches, render

HERE = Path(__file__).resolve().parent / "rg_json"
RUNS = sorted(path.stem for path in HERE.glob("*.jsonl"))
# the context each run asked for (-A): see capture.py
AFTER = {"context": 1, "after": 2, "invert": 1}
CONTEXT = {"context", "after", "before", "invert"}
BIG = 1 << 20


def found(name: str, limit: int = BIG) -> tuple[list[Match], bool]:
    return matches((HERE / f"{name}.jsonl").read_bytes(), after=AFTER.get(name, 0),
                   limit=limit)


def by_line(name: str) -> dict[tuple[str, int], Match]:
    return {(m["path"], m["line"]): m for m in found(name)[0]}


def size(match: Match) -> int:
    return len(json.dumps(match, ensure_ascii=False, separators=(",", ":")).encode()) + 1


def test_the_fixtures_are_there() -> None:
    assert {"plain", "context", "after", "before", "multiline", "invert", "spans",
            "bytes", "none"} <= set(RUNS)


@pytest.mark.parametrize("name", RUNS)
def test_rendered_matches_are_rgs_own_text(name: str) -> None:
    """Every line of rg's text output is in the matches: printed back, they are it."""
    result, truncated = found(name)
    assert not truncated
    text = "".join(render(result, context=name in CONTEXT))
    assert text == (HERE / f"{name}.txt").read_bytes().decode("utf-8", "replace")


@pytest.mark.parametrize("name", RUNS)
def test_every_span_is_its_match_in_characters(name: str) -> None:
    for match in found(name)[0]:
        assert not match["text"].endswith("\n")
        for span in match["submatches"]:
            assert 0 <= span["start"] <= span["end"] <= len(match["text"])
            assert match["text"][span["start"]:span["end"]] == span["match"], match


def test_a_plain_match() -> None:
    assert by_line("plain")[("ops/deploy.md", 1)] == {
        "path": "ops/deploy.md", "line": 1, "text": "deploy payments on friday",
        "submatches": [{"start": 7, "end": 15, "match": "payments"}],
        "before": [], "after": []}
    assert by_line("plain")[("ops/nolf.md", 1)]["text"] == "no newline at the end: payments"
    assert found("none") == ([], False)


def test_offsets_count_characters_not_bytes() -> None:
    """"Café € payments 💳": rg's byte offsets 10..18 are characters 7..15."""
    match = by_line("plain")[("notes/café.md", 1)]
    assert match["text"] == "Café € payments 💳 end"
    assert match["submatches"] == [{"start": 7, "end": 15, "match": "payments"}]
    spans = by_line("spans")[("notes/café.md", 1)]["submatches"]
    assert spans == [{"start": 5, "end": 7, "match": "€ "},
                     {"start": 7, "end": 10, "match": "pay"},
                     {"start": 10, "end": 15, "match": "ments"}]


def test_a_span_inside_a_character_takes_the_character() -> None:
    """-a '(?-u:\\xA9)' matches the second byte of 'é' (bytes 4..5): the span is 'é'."""
    [match] = found("bytes")[0]
    assert match["submatches"] == [{"start": 3, "end": 4, "match": "é"}]


def test_bytes_that_are_not_utf8_are_one_replacement_character_each() -> None:
    """rg sends the line in base64; each byte that is not UTF-8 is one U+FFFD, so the
    offsets after them still count one character a byte."""
    match = by_line("plain")[("notes/latin1.txt", 1)]
    assert match["text"] == "bad \ufffd\ufffd byte payments"
    assert match["submatches"] == [{"start": 12, "end": 20, "match": "payments"}]
    assert ("notes/\ufffdname.md", 1) in by_line("plain")  # a path rg gave in base64


def test_context_lines_before_and_after() -> None:
    """-C1: a line between two matches goes to the first's after while within -A."""
    lines = by_line("context")
    assert lines[("notes/runbook.md", 3)]["before"] == [{"line": 2, "text": "step two"}]
    assert lines[("notes/runbook.md", 3)]["after"] == [{"line": 4, "text": "step four"}]
    assert lines[("notes/close.md", 1)]["after"] == [{"line": 2, "text": "x"}]
    assert lines[("notes/close.md", 3)]["before"] == []
    assert lines[("notes/two.md", 1)]["after"] == [{"line": 2, "text": "b"}]
    assert lines[("notes/two.md", 6)]["before"] == [{"line": 5, "text": "e"}]


def test_after_and_before_only() -> None:
    after = by_line("after")
    assert [line["line"] for line in after[("notes/two.md", 1)]["after"]] == [2, 3]
    assert [line["line"] for line in after[("notes/close.md", 3)]["after"]] == [4, 5]
    before = by_line("before")
    assert [line["line"] for line in before[("notes/two.md", 6)]["before"]] == [4, 5]
    assert before[("notes/two.md", 1)]["after"] == []
    assert [line["line"] for line in before[("notes/close.md", 3)]["before"]] == [2]


def test_a_multiline_match() -> None:
    [match] = found("multiline")[0]
    assert match["line"] == 1 and match["text"] == "step one\nstep two"
    # the span took in the final newline: it ends before it
    assert match["submatches"] == [{"start": 5, "end": 17, "match": "one\nstep two"}]


def test_an_inverted_match_has_no_spans() -> None:
    [match] = found("invert")[0]
    assert (match["line"], match["submatches"]) == (3, [])
    assert match["before"] == [{"line": 2, "text": "step two"}]


@pytest.mark.parametrize("name", ["plain", "context"])
def test_the_limit_counts_what_is_returned(name: str) -> None:
    every, _ = found(name)
    sizes = [size(match) for match in every]
    for keep in range(len(every)):
        limit = sum(sizes[:keep])
        for room in (limit, limit + sizes[keep] - 1):
            result, truncated = found(name, room)
            assert result == every[:keep] and truncated
    assert found(name, sum(sizes)) == (every, False)


def test_a_cut_output_drops_its_partial_line_and_is_truncated() -> None:
    output = (HERE / "plain.jsonl").read_bytes()
    cut = output[: output.index(b'"ops/deploy.md"') + 20]
    result, truncated = matches(cut, after=0, limit=BIG, cut=True)
    assert truncated and result == found("plain")[0][: len(result)]
    assert result[-1]["path"] != "ops/deploy.md"
    with pytest.raises(BadOutput):
        matches(cut, after=0, limit=BIG)  # not cut: a partial line is no message


@pytest.mark.parametrize("output", [
    b"not json\n",
    b'{"type": "match"}\n',
    b'{"type": "match", "data": {"path": {"text": "a"}}}\n',
    b'{"type": "match", "data": {"path": {"text": "a"}, "line_number": 1, '
    b'"lines": {"bytes": "%%%"}, "submatches": []}}\n',
    b'{"type": "match", "data": {"path": {"text": "a"}, "line_number": 1, '
    b'"lines": {"text": "x"}, "submatches": [{"start": "a"}]}}\n',
])
def test_anything_but_rgs_messages_is_bad_output(output: bytes) -> None:
    with pytest.raises(BadOutput):
        matches(output, after=0, limit=BIG)
