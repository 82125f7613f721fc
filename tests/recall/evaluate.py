"""How good recall is at what it is for: the evaluation set in ``evalset/`` (notes of a
team of agents: incidents, runbooks, decisions with supersessions, session handoffs,
tasks, with near-duplicates; and questions asked the way agents ask, in other words
and word forms than the notes use, each with the files that answer it), scored as
mean reciprocal rank and recall@1/3/5 for memfs's recall and for a baseline that
ranks files by how many of the query's words they contain.

In process, with the real engine and the real `Recall` on a scratch root: the notes
are planted in the store's backing directory and indexed by the catch-up, as a
daemon would at start. `python -m tests.recall.evaluate [EVALSET]` prints the table
(scripts/bench_recall.py does too); tests/recall/test_quality.py asserts on it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from memfs.config import parse_config
from memfs.recall import Recall
from memfs.store.engine import Engine
from tests.support import public_tmpdir

EVALSET = Path(__file__).resolve().parent / "evalset"
STORE = "team"
AGENT = "evaluator"
CUTOFFS = (1, 3, 5)

Ranker = Callable[[str], list[str]]  # a question -> paths below the store, best first


def questions(evalset: Path = EVALSET) -> list[dict[str, object]]:
    """The set's questions: each ``{"q": TEXT, "answers": [PATH, ...]}``."""
    loaded: list[dict[str, object]] = json.loads((evalset / "questions.json").read_text())
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


def score(rank: Ranker, asked: list[dict[str, object]]) -> dict[str, float]:
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


def evaluate(evalset: Path = EVALSET) -> dict[str, dict[str, float]]:
    """{"memfs": scores, "baseline": scores} on ``evalset``."""
    files, asked = notes(evalset), questions(evalset)
    base = public_tmpdir("memfs-recall-eval-")
    config = parse_config({
        "root": str(base / "root"), "mount": str(base / "memory"),
        "socket": str(base / "control.sock"),
        "stores": {STORE: {"history": False}},
        "agents": {AGENT: {"uid": 4242, "stores": {STORE: "read"}}},
    })
    engine = Engine(config)
    recall = Recall(engine)
    try:
        store = engine.store_dir(STORE)
        for rel, body in files.items():
            (store / rel).parent.mkdir(parents=True, exist_ok=True)
            (store / rel).write_text(body)
        recall.start()
        recall.reindex([STORE])

        def memfs(query: str) -> list[str]:
            found = recall.search(AGENT, query, limit=max(CUTOFFS))
            return [hit.path.removeprefix(f"{STORE}/") for hit in found.hits]

        return {"memfs": score(memfs, asked), "baseline": score(baseline(files), asked)}
    finally:
        recall.close()
        engine.close()
        shutil.rmtree(base, ignore_errors=True)


def table(scores: dict[str, dict[str, float]]) -> str:
    """The scores as a small table, one ranker per line."""
    columns = ["mrr", *(f"recall@{k}" for k in CUTOFFS)]
    lines = [f"{'':10}" + "".join(f"{name:>10}" for name in columns)]
    for ranker, values in scores.items():
        lines.append(f"{ranker:10}" + "".join(f"{values[name]:10.3f}" for name in columns))
    return "\n".join(lines)


if __name__ == "__main__":
    chosen = Path(sys.argv[1]) if len(sys.argv) > 1 else EVALSET
    print(f"{len(questions(chosen))} questions over {len(notes(chosen))} notes ({chosen})")
    print(table(evaluate(chosen)))
