"""Schemathesis (pinned, in its own venv: .venv-schemathesis, made by `scripts/setup
--test`) against a real daemon, over every operation of /v1/openapi.json, in every
phase (examples, coverage, fuzzing, then stateful), with every check and both positive
and negative data (``--mode all``): a request valid by the document must be accepted,
one that is not must be refused, and every answer must be what the document says.
Exit status 0 when it finds nothing.

Run as root: `scripts/schemathesis [--max-examples N] [--max-time S] [--seed N]
[ST-RUN-ARGS...]`. Reproducible: seed 4242 (the default), strings of ASCII
(``--generation-codec ascii``), no example database. Bounded: N examples an operation
(default 25) and S seconds in all (default 360), shared by three runs of st: the
examples and coverage phases, fuzzing, stateful (each gets its share).

The daemon serves a temporary root (the stores of tests/memory, notes mirrored to a
bare repository) on 127.0.0.1 port 0; the token is alice's. Stored test data: a few
files (notes/a.md with two versions), a session, a task and a decision are made first;
the document is the daemon's own, fetched, with an example added to every operation
from them (`with_examples`: the examples phase sends each first), and the path
parameters are drawn mostly from their names (a random store or id is mostly 404,
which reaches little; the sessions, tasks, decisions and brief of a store are drawn
from the structured one: those of a store that keeps none are 404). So no operation
is reached only through 404s.

What is configured, and why (every check runs: the default; naming them on the
command line would override the settings per operation below):

* ``positive_data_acceptance`` also takes 412: a valid If-Match / If-None-Match names
  a version; positive data cannot know the current one, and a tag that does not match
  (or ``If-None-Match: *`` on a file that exists) must be 412 (RFC 9110 section
  13.1.1), so 412 is the correct answer to valid data. Each operation documents it.
* the stateful phase chains calls by the document's links (a record's ``id`` in a 201
  leads to its operations) and the ones it infers.
* ``use_after_free`` is off for PATCH of a file: an append to a missing file creates it
  (RFC 5789 lets a PATCH create its target), so a PATCH after a DELETE answering 201
  is right; every other operation keeps the check.
* ``positive_data_acceptance`` is off for two operations whose input is a program in a
  language of its own: ``GET /v1/search`` (``pattern``, a ripgrep regex; ``arg``, an rg
  command line) and ``PATCH .../files/{path}`` (``sed``, GNU sed scripts). Which strings
  are a valid regex or script no JSON Schema can say, so a request valid by the
  document may be refused by rg or sed itself (400). Every other check runs on them,
  and what a schema can say it says (a sed script has no control characters).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.memory.conftest import memory_config  # noqa: E402
from tests.store.mirror.remotes import bare_repository  # noqa: E402
from tests.support import UID_A, Daemon, connect_as, public_tmpdir, scaled  # noqa: E402

ST = REPO / ".venv-schemathesis" / "bin" / "st"
FILES = ["notes/a.md", "notes/docs/b.md", "notes/日本語.md", "ops/c.txt"]


def seed(daemon: Daemon) -> dict[str, list[str]]:
    """Make what the operations act on; returns the names to draw parameters from."""
    with connect_as(UID_A, daemon.socket) as alice:
        for path in FILES:
            alice.write(path, f"{path}: timeout retry\n")
        alice.read("notes/a.md")
        alice.write("notes/a.md", "notes/a.md: timeout retry, twice\n")  # HEAD~1 exists
        session = alice.call("session_start", store="team", goal="schemathesis")["id"]
        alice.call("task_add", store="team", task="drain-queue", title="Drain the queue")
        alice.call("task_add", store="team", task="held-task", title="Held by alice")
        alice.call("task_claim", store="team", task="held-task", ttl="24h")
        decision = alice.call("decision_record", store="team", title="Use sqlite",
                              decision="sqlite", reason="small")["id"]
    return {"stores": ["notes", "ops", "team"], "structured": ["team"],
            "files": sorted({p.split("/", 1)[1] for p in FILES}),
            "sessions": [session], "tasks": ["drain-queue", "held-task"],
            "decisions": [decision]}


STRUCTURED = re.compile(r"/(sessions|tasks|decisions|brief)")


def with_examples(document: dict[str, Any], names: dict[str, list[str]]) -> dict[str, Any]:
    """The OpenAPI document with an example for every operation, drawn from what
    `seed` made (the examples phase sends them first): each path parameter names
    something that exists, and each body is one the operation accepts, so that no
    operation is reached only through 404s."""
    path_values = {"path": "a.md", "session": names["sessions"][0],
                   "task": names["tasks"][-1], "decision": names["decisions"][0]}
    queries: dict[str, dict[str, Any]] = {
        "/v1/stores/{store}/files": {"glob": ["*.md"]},
        "/v1/search": {"search": {"pattern": "retry", "path": ["notes"]}},
        "/v1/stores/{store}/history": {"path": "a.md", "n": 5},
        "/v1/stores/{store}/diff": {"path": "a.md", "rev": "HEAD~1"},
        "/v1/stores/{store}/sessions": {"state": "open"},
        "/v1/stores/{store}/tasks": {"status": "open"},
        "/v1/stores/{store}/brief": {"max_bytes": 4000},
        "/v1/mirrors": {"store": "notes"},
    }
    bodies: dict[str, Any] = {
        "/v1/stores/{store}/sessions": {"goal": "an example session"},
        "/v1/stores/{store}/sessions/{session}/checkpoints": {"note": "half way"},
        "/v1/stores/{store}/sessions/{session}/handoff": {"summary": "done", "next": "ship"},
        "/v1/stores/{store}/tasks": {"task": "example-task", "title": "An example"},
        "/v1/stores/{store}/tasks/{task}/claim": {"ttl": "30m"},
        "/v1/stores/{store}/tasks/{task}/checkpoint": {"note": "half way"},
        "/v1/stores/{store}/tasks/{task}/complete": {"note": "done"},
        "/v1/stores/{store}/tasks/{task}/release": {"force": False},
        "/v1/stores/{store}/decisions": {"title": "Use git", "decision": "git",
                                         "reason": "history"},
        "/v1/stores/{store}/restore": {"path": "a.md", "rev": "HEAD~1", "force": True},
        "/v1/reindex": {"store": "notes"},
        "/v1/mirrors/push": {"store": "notes"},
    }
    for path, operations in document["paths"].items():
        store = "team" if STRUCTURED.search(path) else "notes"
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                name = parameter["name"]
                if parameter["in"] == "path":
                    parameter["example"] = store if name == "store" else path_values[name]
                elif parameter["in"] == "query" and name in queries.get(path, {}):
                    parameter["example"] = queries[path][name]
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content and path in bodies:
                content["application/json"]["example"] = bodies[path]
            elif "application/json" in content and method == "patch":
                content["application/json"]["example"] = {"append": "more\n"}
            elif "application/octet-stream" in content:
                content["application/octet-stream"]["example"] = "new content\n"
    return document


def st_config(names: dict[str, list[str]]) -> str:
    def listed(values: list[str]) -> str:
        return "[" + ", ".join(f'"{v}"' for v in values) + "]"

    bound = "\n".join(f'"path.{param}" = {{ dictionary = "{name}", probability = 0.8 }}'
                      for param, name in (("path", "files"),
                                          ("session", "sessions"), ("task", "tasks"),
                                          ("decision", "decisions")))
    dictionaries = "\n".join(f"[dictionaries.{name}]\nvalues = {listed(values)}"
                             for name, values in names.items())
    return f"""
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "412", "429", "5xx"]

[parameters]
{bound}

{dictionaries}

[[operations]]
include-path-regex = "/(sessions|tasks|decisions|brief)"
parameters."path.store" = {{ dictionary = "structured", probability = 0.8 }}

[[operations]]
exclude-path-regex = "/(sessions|tasks|decisions|brief)"
parameters."path.store" = {{ dictionary = "stores", probability = 0.8 }}

# an endless stream (tests/remote/ test it): no answer would ever end
[[operations]]
include-path = "/v1/events"
enabled = false

[[operations]]
include-path = "/v1/search"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-path = "/v1/stores/{{store}}/files/{{path}}"
include-method = "PATCH"
checks.positive_data_acceptance.enabled = false
checks.use_after_free.enabled = false
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-examples", type=int, default=25)
    parser.add_argument("--max-time", type=int, default=360,
                        help="seconds for the whole run: 40%% for the examples and "
                             "coverage phases, 35%% fuzzing, 25%% stateful")
    parser.add_argument("--seed", type=int, default=4242)
    args, extra = parser.parse_known_args()
    if os.geteuid() != 0:
        print("scripts/schemathesis: run as root", file=sys.stderr)
        return 2
    if not ST.exists():
        print(f"scripts/schemathesis: {ST} is missing: run scripts/setup --test",
              file=sys.stderr)
        return 2
    base = public_tmpdir("memfs-schemathesis-")
    config = memory_config(base)
    config["http"] = {"listen": "127.0.0.1:0"}
    # notes is mirrored to a bare repository of the daemon's user: the mirror ops act
    remote = bare_repository(base / "mirrors" / "notes.git")
    config["stores"]["notes"] = {"mirror": f"file://{remote}"}
    with Daemon(config) as daemon, tempfile.TemporaryDirectory() as work:
        names = seed(daemon)
        token = daemon.token("alice", "--label", "schemathesis")
        config_file = Path(work) / "schemathesis.toml"
        config_file.write_text(st_config(names))
        with urllib.request.urlopen(f"{daemon.http_url}/v1/openapi.json") as answer:
            document = with_examples(json.load(answer), names)
        document_file = Path(work) / "openapi.json"  # the daemon's, with examples
        document_file.write_text(json.dumps(document))
        # a run per part, each with its share of the time: every phase gets to run
        runs = [("examples,coverage", args.max_time * 0.4),
                ("fuzzing", args.max_time * 0.35), ("stateful", args.max_time * 0.25)]
        failed = 0
        for phases, seconds in runs:
            command = [str(ST), "--no-color", "--config-file", str(config_file), "run",
                       str(document_file), "--url", daemon.http_url,
                       # every check (the default: naming them on the command line
                       # would override the per-operation settings of the config)
                       "--mode", "all", "--phases", phases,
                       "--seed", str(args.seed), "--generation-codec", "ascii",
                       "--generation-database", "none",
                       "--max-examples", str(args.max_examples),
                       "--max-time", str(max(1, round(seconds))), "--workers", "1",
                       # st's 10 s per request, stretched like the suite's waits (a
                       # reindex under emulation takes longer)
                       "--request-timeout", str(scaled(10)),
                       "--header", f"Authorization: Bearer {token}",
                       "--output-truncate", "true",
                       "--report-dir", str(Path(work) / "report"), *extra]
            failed |= subprocess.run(command, cwd=work, check=False).returncode
            if not daemon.alive():
                print("scripts/schemathesis: the daemon died", file=sys.stderr)
                return 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
