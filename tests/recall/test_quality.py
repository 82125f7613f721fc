"""Recall is good at what it is for (tests/recall/evaluate.py): the evaluation sets
are sound (each answer exists, the blind set's halves are disjoint and big enough),
and on every set the lexical ranker is not below counting the query's words in each
file (MRR and recall@5), and above it on the old set's MRR and recall@1; hybrid recall
(the real packaged model) is above lexical on both halves of the blind set."""

from __future__ import annotations

import functools

from tests.recall.evaluate import SETS, Scores, evaluate, notes, questions, table


@functools.cache
def scores() -> dict[str, dict[str, Scores]]:
    return evaluate(model="packaged")


def test_the_evaluation_sets_are_big_enough_and_each_answer_exists() -> None:
    files = notes()
    assert len(files) >= 80
    asked = {name: questions(path) for name, path in SETS.items()}
    assert len(asked["old"]) >= 30
    assert len(asked["tuning"]) + len(asked["held-out"]) >= 60
    tuning = {str(question["q"]) for question in asked["tuning"]}
    assert not tuning & {str(question["q"]) for question in asked["held-out"]}
    for question in [q for set_questions in asked.values() for q in set_questions]:
        answers = question["answers"]
        assert isinstance(answers, list) and answers
        assert all(answer in files for answer in answers), question


def test_lexical_recall_is_never_below_counting_words() -> None:
    for name, by_ranker in scores().items():
        lexical, baseline = by_ranker["lexical"], by_ranker["baseline"]
        assert lexical["mrr"] >= baseline["mrr"], (name, table(scores()))
        assert lexical["recall@5"] >= baseline["recall@5"], (name, table(scores()))
    old = scores()["old"]
    assert old["lexical"]["mrr"] > old["baseline"]["mrr"], table(scores())
    assert old["lexical"]["recall@1"] > old["baseline"]["recall@1"], table(scores())


def test_hybrid_recall_is_above_lexical_on_questions_written_apart() -> None:
    for name in ("tuning", "held-out"):
        by_ranker = scores()[name]
        assert by_ranker["hybrid"]["mrr"] > by_ranker["lexical"]["mrr"], table(scores())
        assert by_ranker["hybrid"]["recall@5"] >= by_ranker["lexical"]["recall@5"], \
            table(scores())
