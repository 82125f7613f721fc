"""How good recall is at what it is for, on two evaluation sets over the same notes
(``evalset/notes/``: a team of agents' incidents, runbooks, decisions with
supersessions, session handoffs, tasks, with near-duplicates):

* ``old``: ``evalset/questions.json``, 36 questions written beside the notes (by the
  people who wrote the ranker, from the notes' own words: it flatters a keyword ranker);
* ``tuning`` and ``held-out``: ``evalset_blind/``, 72 questions written from the notes'
  paths and titles only, in a user's own words, split by a fixed seed (its README).
  Rankers are tuned on ``tuning`` only; ``held-out`` is what they are judged on.

Each is scored as mean reciprocal rank and recall@1/3/5 for the word-count baseline
(files ranked by how many distinct query words they hold, as ``rg -i -w -c`` would
count), memfs's lexical ranker and its hybrid (lexical fused with the embedding
model's vectors). In process, with the real engine and the real `Recall` on a scratch
root: the notes are planted in the store's backing directory and indexed by the
catch-up, as a daemon would at start. `python -m tests.recall.evaluate` prints the
tables (scripts/bench_recall.py does too); tests/recall/test_quality.py asserts on them.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from memfs.config import parse_config
from memfs.recall import Recall
from memfs.store.engine import Engine
from tests.support import public_tmpdir

HERE = Path(__file__).resolve().parent
EVALSET = HERE / "evalset"
BLIND = HERE / "evalset_blind"
SETS = {"old": EVALSET / "questions.json", "tuning": BLIND / "tuning.json",
        "held-out": BLIND / "heldout.json"}
STORE = "team"
AGENT = "evaluator"
CUTOFFS = (1, 3, 5)

Ranker = Callable[[str], list[str]]  # a question -> paths below the store, best first
Scores = dict[str, float]


def questions(path: Path = SETS["old"]) -> list[dict[str, object]]:
    """A set's questions: each ``{"q": TEXT, "answers": [PATH, ...]}``."""
    loaded: list[dict[str, object]] = json.loads(path.read_text())
    return loaded


def notes(evalset: Path = EVALSET) -> dict[str, str]:
    """The set's notes, by path below the store."""
    root = evalset / "notes"
    return {str(path.relative_to(root)): path.read_text()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _words(text: str) -> list[str]:
    return [word.lower() for word in re.findall(r"\w+", text)]


def baseline(files: dict[str, str]) -> Ranker:
    """Files ranked by how many distinct words of the query they contain (their path's
    words count too); ties in path order."""
    contained = {rel: set(_words(body)) | set(_words(rel)) for rel, body in files.items()}

    def rank(query: str) -> list[str]:
        wanted = set(_words(query))
        return sorted(files, key=lambda rel: (-len(wanted & contained[rel]), rel))

    return rank


def score(rank: Ranker, asked: list[dict[str, object]]) -> Scores:
    """MRR and recall@k (the share of questions with an answer among the first k)."""
    reciprocal = 0.0
    within = dict.fromkeys(CUTOFFS, 0)
    for question in asked:
        answers = set(question["answers"])  # type: ignore[call-overload]
        ranked = rank(str(question["q"]))
        first = next((at for at, rel in enumerate(ranked) if rel in answers), None)
        if first is None:
            continue
        reciprocal += 1 / (first + 1)
        for k in CUTOFFS:
            within[k] += first < k
    count = len(asked)
    return {"mrr": reciprocal / count, **{f"recall@{k}": within[k] / count for k in CUTOFFS}}


@contextlib.contextmanager
def planted(files: dict[str, str], model: str = "packaged") -> Iterator[Recall]:
    """A real `Recall` (with ``model``) over a scratch root whose store STORE holds
    ``files`` (by path below the store), readable by AGENT: planted in the backing
    directory and indexed by the catch-up, as a daemon does at start."""
    base = public_tmpdir("memfs-recall-eval-")
    config = parse_config({
        "root": str(base / "root"), "mount": str(base / "memory"),
        "socket": str(base / "control.sock"), "recall": {"model": model},
        "stores": {STORE: {"history": False}},
        "agents": {AGENT: {"uid": 4242, "stores": {STORE: "read"}}},
    })
    engine = Engine.of(config)
    recall = Recall(engine)
    try:
        store = engine.store_dir(STORE)
        for rel, body in files.items():
            (store / rel).parent.mkdir(parents=True, exist_ok=True)
            (store / rel).write_text(body)
        recall.start()
        recall.reindex([STORE])
        yield recall
    finally:
        recall.close()
        engine.close()
        shutil.rmtree(base, ignore_errors=True)


def evaluate(sets: dict[str, Path] | None = None, model: str = "packaged",
             ) -> dict[str, dict[str, Scores]]:
    """{set: {"baseline": scores, "lexical": scores, "hybrid": scores}} for each set of
    ``sets`` (default SETS); no "hybrid" when ``model`` is "none"."""
    files = notes()
    asked = {name: questions(path) for name, path in (sets or SETS).items()}
    with planted(files, model) as recall:

        def ranker(hybrid: bool) -> Ranker:
            def rank(query: str) -> list[str]:
                found = recall.search(AGENT, query, limit=max(CUTOFFS), hybrid=hybrid)
                return [hit.path.removeprefix(f"{STORE}/") for hit in found.hits]
            return rank

        rankers = {"baseline": baseline(files), "lexical": ranker(False)}
        if recall.model is not None:
            rankers["hybrid"] = ranker(True)
        return {name: {ranker_name: score(rank, set_questions)
                       for ranker_name, rank in rankers.items()}
                for name, set_questions in asked.items()}


def table(scores: dict[str, dict[str, Scores]]) -> str:
    """The scores side by side: a line per ranker, a group of columns per set."""
    sets = list(scores)
    rankers = list(next(iter(scores.values())))
    columns = ["mrr", *(f"R@{k}" for k in CUTOFFS)]
    head = f"{'':9}" + " | ".join(f"{name:^27}" for name in sets)
    lines = [head, f"{'':9}" + " | ".join(" ".join(f"{c:>6}" for c in columns) for _ in sets)]
    for ranker in rankers:
        cells = []
        for name in sets:
            values = scores[name].get(ranker)
            cells.append(" ".join(f"{'-':>6}" for _ in columns) if values is None else
                         " ".join(f"{values[key]:6.3f}" for key in
                                  ["mrr", *(f"recall@{k}" for k in CUTOFFS)]))
        lines.append(f"{ranker:9}" + " | ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    chosen = sys.argv[1] if len(sys.argv) > 1 else "packaged"
    print(f"{len(notes())} notes; " + ", ".join(
        f"{name} {len(questions(path))} questions" for name, path in SETS.items()))
    print(table(evaluate(model=chosen)))
