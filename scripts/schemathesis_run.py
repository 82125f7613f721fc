"""Schemathesis (pinned, in its own venv: .venv-schemathesis, made by `scripts/setup
--test`) against a real daemon, over every operation of /v1/openapi.json, with every
check and positive data: a request valid by the document must be accepted, and every
answer must be what the document says. Exit status 0 when it finds nothing.

Run as root: `scripts/schemathesis [--max-examples N] [--seed N] [ST-RUN-ARGS...]`. The
daemon serves a temporary root (the stores of tests/memory) on 127.0.0.1 port 0; the
token is alice's; a few files, a session, a task and a decision are made first, and the
path parameters are drawn mostly from their names (a random store or id is mostly
404, which reaches little; the sessions, tasks, decisions and brief of a store are
drawn from the structured one: those of a store that keeps none are refused, 400,
which no schema can tell from the name). Bounded: N examples an operation (default
25) and a time budget, so it takes a few minutes on 2 cores.

What is configured, and why (every check stays on):

* ``positive_data_acceptance`` also takes 412: a valid If-Match / If-None-Match names
  a version; positive data cannot know the current one, and a tag that does not match
  must be 412 (RFC 9110 section 13.1.1), so 412 is the correct answer to valid data.
* the phases are examples, coverage and fuzzing, then the stateful phase, which
  chains calls by the document's links (a record's ``id`` in a 201 leads to its
  operations) and the ones it infers, within what is left of the time budget.
* ``use_after_free`` is off for PATCH of a file: an append to a missing file creates it
  (RFC 5789 lets a PATCH create its target), so a PATCH after a DELETE answering 201
  is right; every other operation keeps the check.
* ``positive_data_acceptance`` is off for two operations whose input is a program in a
  language of its own: ``GET /v1/search`` (``pattern``, a ripgrep regex; ``arg``, an rg
  command line) and ``PATCH .../files/{path}`` (``sed``, GNU sed scripts). Which strings
  are a valid regex or script no JSON Schema can say, so a request valid by the
  document may be refused by rg or sed itself (400). Every other check runs on them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.memory.conftest import memory_config  # noqa: E402
from tests.support import UID_A, Daemon, connect_as, public_tmpdir  # noqa: E402

ST = REPO / ".venv-schemathesis" / "bin" / "st"
FILES = ["notes/a.md", "notes/docs/b.md", "notes/日本語.md", "ops/c.txt"]


def seed(daemon: Daemon) -> dict[str, list[str]]:
    """Make what the operations act on; returns the names to draw parameters from."""
    with connect_as(UID_A, daemon.socket) as alice:
        for path in FILES:
            alice.write(path, f"{path}: timeout retry\n")
        session = alice.call("session_start", store="team", goal="schemathesis")["id"]
        alice.call("task_add", store="team", task="drain-queue", title="Drain the queue")
        decision = alice.call("decision_record", store="team", title="Use sqlite",
                              decision="sqlite", reason="small")["id"]
    return {"stores": ["notes", "ops", "team"], "structured": ["team"],
            "files": sorted({p.split("/", 1)[1] for p in FILES}),
            "sessions": [session], "tasks": ["drain-queue"], "decisions": [decision]}


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
    parser.add_argument("--max-time", type=int, default=240,
                        help="seconds for the examples, coverage and fuzzing phases")
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument("--stateful-time", type=int, default=120,
                        help="seconds for the stateful phase, after them (0: none)")
    args, extra = parser.parse_known_args()
    if os.geteuid() != 0:
        print("scripts/schemathesis: run as root", file=sys.stderr)
        return 2
    if not ST.exists():
        print(f"scripts/schemathesis: {ST} is missing: run scripts/setup --test",
              file=sys.stderr)
        return 2
    config = memory_config(public_tmpdir("memfs-schemathesis-"))
    config["http"] = {"listen": "127.0.0.1:0"}
    with Daemon(config) as daemon, tempfile.TemporaryDirectory() as work:
        names = seed(daemon)
        token = daemon.token("alice", "--label", "schemathesis")
        config_file = Path(work) / "schemathesis.toml"
        config_file.write_text(st_config(names))
        runs = [("examples,coverage,fuzzing", args.max_time),
                ("stateful", args.stateful_time)]
        failed = 0
        for phases, seconds in runs:
            if seconds <= 0:
                continue
            command = [str(ST), "--no-color", "--config-file", str(config_file), "run",
                       f"{daemon.http_url}/v1/openapi.json",  # every check: the default
                       # every check (the default: naming them on the command line
                       # would override the per-operation settings of the config)
                       "--mode", "all", "--phases", phases,
                       "--seed", str(args.seed), "--generation-codec", "ascii",
                       "--generation-database", "none",
                       "--max-examples", str(args.max_examples),
                       "--max-time", str(seconds), "--workers", "1",
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
