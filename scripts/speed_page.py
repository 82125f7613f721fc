"""docs/speed.md from one run of scripts/bench: the run's results file (JSON lines, one
record each) and the page written from it, with nothing else in between.

scripts/bench calls it three ways:

* ``speed_page.py begin RESULTS BENCH... [--only NAMES]``: the run's record (its date,
  the git commit and whether the tree had changes, the machine, its load, the
  benchmarks to run and those left out by ``--only``);
* ``speed_page.py mark RESULTS start|end BENCH [STATUS]``: a benchmark's start or end,
  with the time, the load averages and the CPU seconds all processes had used (so the
  page gives how busy the machine was during each), and at its end its exit status;
* ``speed_page.py write RESULTS PAGE``: the run's end, then the page.

And by hand, after a change to how the page is laid out: ``speed_page.py render PAGE``
writes the page again from the records it carries (the same run's figures, nothing
measured anew).

Between those, each benchmark appends its figures itself (benchlib.record, told where
by $MEMFS_BENCH_RESULTS). The page is `render` of the records, and ends with them, in
an HTML comment, so that `parse` gets them back: the page is well formed exactly when
``render(parse(page)) == page`` (tests/test_speed_page.py checks the one in the
repository: a hand edit breaks it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:  # imported (the tests)
    sys.path.append(str(Path(__file__).resolve().parent))

from benchlib import BOUND, busy_seconds, loadavg

REPO = Path(__file__).resolve().parent.parent
PAGE = "docs/speed.md"
NOTES = "design/speed-notes.md"  # the hand-written part, relative to docs/
DATA_START = "<!-- scripts/bench results (the page is written from these; do not edit):"
DATA_END = "-->"
Record = dict[str, Any]


class PageError(ValueError):
    """A page or a results file that is not in the generator's format."""


# -- what scripts/bench records -------------------------------------------------------


def machine() -> dict[str, str]:
    """The CPU model, its CPUs, memory, kernel and Python of this machine."""
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory = "?"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory = f"{int(line.split()[1]) / 1024 ** 2:.1f} GiB"
            break
    return {"cpu": model, "cpus": str(os.cpu_count()), "memory": memory,
            "kernel": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def begin(benches: list[str], left_out: list[str], options: str) -> Record:
    """The run's record; the tree's changes leave out the page itself (written after)."""
    changed = [line for line in git("status", "--porcelain", "--untracked-files=no")
               .splitlines() if line[3:] != PAGE]
    return {"kind": "run", "started": now(), "commit": git("rev-parse", "--short=12", "HEAD"),
            "dirty": bool(changed), "machine": machine(), "loadavg": loadavg(),
            "benches": benches, "left_out": left_out, "options": options}


def mark(event: str, bench: str, status: int | None = None) -> Record:
    found: Record = {"kind": event, "bench": bench, "time": time.time(),
                     "loadavg": loadavg(), "busy": round(busy_seconds(), 2)}
    if event == "end":
        found["status"] = status
    return found


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def append(results: Path, record: Record) -> None:
    with results.open("a") as out:
        out.write(json.dumps(record) + "\n")


def read_results(text: str) -> list[Record]:
    """The records of a results file (or of a page's comment), each checked for its
    kind and the fields the page needs."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise PageError(f"results line {number}: not JSON ({error})") from None
        kind = record.get("kind") if isinstance(record, dict) else None
        need = NEEDS.get(kind) if isinstance(kind, str) else None
        if need is None:
            raise PageError(f"results line {number}: no known kind: {line[:80]}")
        missing = need - record.keys()
        if missing:
            raise PageError(f"results line {number}: {record['kind']} record without "
                            f"{', '.join(sorted(missing))}")
        records.append(record)
    return records


NEEDS = {
    "run": {"started", "commit", "dirty", "machine", "loadavg", "benches", "left_out",
            "options"},
    "start": {"bench", "time", "loadavg", "busy"},
    "end": {"bench", "time", "loadavg", "busy", "status"},
    "figure": {"bench", "figure", "memfs", "baseline", "ratio", "goal", "met"},
    "finish": {"time", "loadavg", "ended"},
}


# -- the page -------------------------------------------------------------------------


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def render(records: list[Record]) -> str:
    """The page: the run, the machine and its load, then one table of every figure
    beside its same-run baseline, each benchmark's rows under a line of its own saying
    how long it took, how busy the machine was meanwhile, and whether it failed or was
    not run; then the records themselves."""
    runs = [r for r in records if r["kind"] == "run"]
    if len(runs) != 1:
        raise PageError(f"{len(runs)} run records: one run makes a page")
    run = runs[0]
    finish = next((r for r in records if r["kind"] == "finish"), None)
    cpus = int(run["machine"]["cpus"])
    dirty = " (with changes not committed)" if run["dirty"] else ""
    lines = [
        "# Speed", "",
        "Written by `scripts/bench` (scripts/speed_page.py) from one run: do not edit by "
        "hand, run", "`scripts/bench` again. Each figure is beside its baseline measured in "
        "the same run, on the same", "machine; what limits the figures still short of "
        f"their goals, and earlier measurements: [Speed notes]({NOTES}).", "",
        f"- **Run**: {run['started']} to {finish['ended'] if finish else '(not finished)'}, "
        f"commit `{run['commit']}`{dirty}; `scripts/bench {run['options']}`".rstrip(),
        f"- **Machine**: {run['machine']['cpu']}, {cpus} CPUs, {run['machine']['memory']} of "
        f"memory, {run['machine']['kernel']}, Python {run['machine']['python']}",
        f"- **Load averages** (1, 5, 15 min): {run['loadavg']} at the start, "
        f"{finish['loadavg'] if finish else '?'} at the end; each benchmark's below",
        f"- **Benchmarks**: {', '.join(run['benches']) or 'none'}"
        + (f"; not run (`--only`): {', '.join(run['left_out'])}" if run["left_out"] else ""),
        "",
        "| figure | memfs | baseline (same run) | ratio | goal | met? |",
        "|---|---|---|---|---|---|",
    ]
    strays = [r["bench"] for r in records if r["kind"] == "figure"
              and r["bench"] not in run["benches"]]  # shown too, never dropped
    for bench in [*run["benches"], *dict.fromkeys(strays)]:
        lines.append(bench_row(bench, records, cpus))
        for figure in (r for r in records if r["kind"] == "figure" and r["bench"] == bench):
            ratio = "" if figure["ratio"] is None else ratio_text(figure["ratio"],
                                                                  figure["goal"])
            met = {True: "yes", False: "**no**", None: ""}[figure["met"]]
            lines.append(f"| {cell(figure['figure'])} | {cell(figure['memfs'])} | "
                         f"{cell(figure['baseline'])} | {ratio} | {cell(figure['goal'])} | "
                         f"{met} |")
    for bench in run["left_out"]:
        lines.append(f"| **`{bench}.py`**: not run (`--only`) | | | | | |")
    lines += ["", DATA_START, *(json.dumps(r, sort_keys=True) for r in records), DATA_END]
    return "\n".join(lines) + "\n"


def ratio_text(ratio: float, goal: str) -> str:
    """Two decimals, or as many more as tell it from a bare goal's bound (1.5004 is not
    within "<= 1.5", and is not shown as 1.50)."""
    bound = BOUND.fullmatch(goal.strip())
    digits = 2
    while bound and digits < 6 and f"{ratio:.{digits}f}" == f"{float(bound[2]):.{digits}f}" \
            and ratio != float(bound[2]):
        digits += 1
    return f"{ratio:.{digits}f}x"


def bench_row(bench: str, records: list[Record], cpus: int) -> str:
    """A benchmark's line: how long it ran, the load averages at its start and end, the
    CPUs all processes kept busy meanwhile; failed (its exit status) or not finished."""
    start = next((r for r in records if r["kind"] == "start" and r["bench"] == bench), None)
    end = next((r for r in records if r["kind"] == "end" and r["bench"] == bench), None)
    figures = sum(1 for r in records if r["kind"] == "figure" and r["bench"] == bench)
    if start is None:
        return f"| **`{bench}.py`**: not started (the run ended before it) | | | | | |"
    if end is None:
        return f"| **`{bench}.py`**: did not finish | | | | | |"
    took = end["time"] - start["time"]
    busy = (end["busy"] - start["busy"]) / max(took, 1e-9)
    status = "" if end["status"] == 0 else f" **failed (exit status {end['status']})**"
    if figures == 0:
        status += " (no figures recorded)"
    return (f"| **`{bench}.py`**{status}: {duration(took)}, load averages "
            f"{start['loadavg']} to {end['loadavg']}, {busy:.2f} of {cpus} CPUs busy (all "
            "processes) | | | | | |")


def parse(page: str) -> list[Record]:
    """The records a page was written from (its closing comment)."""
    at = page.find("\n" + DATA_START + "\n")
    if at < 0:
        raise PageError(f"no results comment (a line {DATA_START!r}): not written by "
                        "scripts/bench")
    body = page[at + len(DATA_START) + 2:]
    end = body.find("\n" + DATA_END + "\n")
    if end < 0:
        raise PageError(f"the results comment does not end with a line {DATA_END!r}")
    return read_results(body[:end])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    first = steps.add_parser("begin", help="the run's record")
    first.add_argument("results", type=Path)
    first.add_argument("benches", nargs="*", help="the benchmarks to run, by name")
    first.add_argument("--left-out", default="", help="those left out (comma-separated)")
    first.add_argument("--options", default="", help="scripts/bench's options, as given")
    marking = steps.add_parser("mark", help="a benchmark's start or end")
    marking.add_argument("results", type=Path)
    marking.add_argument("event", choices=("start", "end"))
    marking.add_argument("bench")
    marking.add_argument("status", type=int, nargs="?", default=0)
    last = steps.add_parser("write", help="the run's end, then the page")
    last.add_argument("results", type=Path)
    last.add_argument("page", type=Path)
    again = steps.add_parser("render", help="a page again, from the records it carries")
    again.add_argument("page", type=Path)
    args = parser.parse_args()
    if args.step == "render":
        try:
            args.page.write_text(render(parse(args.page.read_text())))
        except PageError as error:
            print(f"speed_page: {args.page}: {error}", file=sys.stderr)
            return 1
    elif args.step == "begin":
        append(args.results, begin(args.benches, [b for b in args.left_out.split(",") if b],
                                   args.options))
    elif args.step == "mark":
        append(args.results, mark(args.event, args.bench, args.status))
    else:
        append(args.results, {"kind": "finish", "time": time.time(), "loadavg": loadavg(),
                              "ended": now()})
        try:
            page = render(read_results(args.results.read_text()))
        except PageError as error:
            print(f"speed_page: {args.results}: {error}", file=sys.stderr)
            return 1
        args.page.write_text(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
