"""Recall is good at what it is for: on the evaluation set (tests/recall/evalset:
questions asked the way agents ask, in other words and word forms than the notes use),
memfs ranks better than counting the query's words in each file: above that baseline
on MRR and recall@1, and not below it at recall@5 (tests/recall/evaluate.py)."""

from __future__ import annotations

from tests.recall.evaluate import evaluate, notes, questions, table


def test_the_evaluation_set_is_big_enough_and_each_answer_exists() -> None:
    files, asked = notes(), questions()
    assert len(files) >= 80 and len(asked) >= 30
    for question in asked:
        answers = question["answers"]
        assert isinstance(answers, list) and answers
        assert all(answer in files for answer in answers), question


def test_recall_beats_counting_words() -> None:
    scores = evaluate()
    memfs, baseline = scores["memfs"], scores["baseline"]
    print(table(scores))
    assert memfs["mrr"] > baseline["mrr"], table(scores)
    assert memfs["recall@1"] > baseline["recall@1"], table(scores)
    assert memfs["recall@5"] >= baseline["recall@5"], table(scores)
