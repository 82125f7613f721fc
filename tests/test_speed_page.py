"""docs/speed.md, written by scripts/bench from one run (scripts/speed_page.py): the
generator's page from a small results file (the header, the figures' rows, a failed
benchmark and one left out shown as such), the records benchlib.record appends from a
real benchmark process, the three steps scripts/bench calls, and the page in the
repository, which must be the generator's own output for the records it carries (a
hand edit breaks that)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO

_spec = importlib.util.spec_from_file_location("speed_page", REPO / "scripts" / "speed_page.py")
assert _spec is not None and _spec.loader is not None
speed_page = importlib.util.module_from_spec(_spec)
sys.modules["speed_page"] = speed_page
_spec.loader.exec_module(speed_page)

PAGE = REPO / "docs" / "speed.md"
MACHINE = {"cpu": "Test CPU 9000", "cpus": "2", "memory": "3.9 GiB",
           "kernel": "Linux 6.1.0", "python": "3.11.2"}


def small_run() -> list[dict[str, Any]]:
    """bench_alpha passes with two figures, bench_beta fails (exit status 3) after one,
    bench_gamma was left out by --only."""
    figure = {"kind": "figure", "baseline": "", "ratio": None, "goal": "", "met": None}
    return [
        {"kind": "run", "started": "2026-12-07 00:10 UTC", "commit": "0123456789ab",
         "dirty": True, "machine": MACHINE, "loadavg": "0.50 0.40 0.30",
         "benches": ["bench_alpha", "bench_beta"], "left_out": ["bench_gamma"],
         "options": "--only alpha,beta"},
        {"kind": "start", "bench": "bench_alpha", "time": 1000.0, "loadavg": "0.50 0.40 0.30",
         "busy": 500.0},
        {**figure, "bench": "bench_alpha", "figure": "a replace | over the socket",
         "memfs": "1.25 ms", "baseline": "a bare write: 1.00 ms", "ratio": 1.25,
         "goal": "<= 1.5", "met": True},
        {**figure, "bench": "bench_alpha", "figure": "writes/s at 32 clients",
         "memfs": "3,000/s", "baseline": "the bare loop: 10,000/s", "ratio": 0.3,
         "goal": ">= 0.8", "met": False},
        {"kind": "end", "bench": "bench_alpha", "time": 1040.0, "loadavg": "1.10 0.50 0.30",
         "busy": 560.0, "status": 0},
        {"kind": "start", "bench": "bench_beta", "time": 1040.0, "loadavg": "1.10 0.50 0.30",
         "busy": 560.0},
        {**figure, "bench": "bench_beta", "figure": "RSS after a soak", "memfs": "80 MB"},
        {"kind": "end", "bench": "bench_beta", "time": 1050.0, "loadavg": "1.20 0.60 0.30",
         "busy": 565.0, "status": 3},
        {"kind": "finish", "time": 1051.0, "loadavg": "1.20 0.60 0.30",
         "ended": "2026-12-07 00:11 UTC"},
    ]


def rows(page: str) -> list[list[str]]:
    """The cells of each row of the page's table (``\\|`` kept inside a cell)."""
    import re
    found = []
    for line in page.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            found.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
    return found[1:]


def test_the_page_of_a_small_run() -> None:
    page = speed_page.render(small_run())
    assert page.startswith("# Speed\n\nWritten by `scripts/bench`")
    assert "do not edit by hand" in page
    assert "commit `0123456789ab` (with changes not committed)" in page
    assert "`scripts/bench --only alpha,beta`" in page
    assert "Test CPU 9000, 2 CPUs, 3.9 GiB of memory, Linux 6.1.0, Python 3.11.2" in page
    assert "0.50 0.40 0.30 at the start, 1.20 0.60 0.30 at the end" in page
    assert "| figure | memfs | baseline (same run) | ratio | goal | met? |" in page
    table = rows(page)
    assert table[0][0] == ("**`bench_alpha.py`**: 40 s, load averages 0.50 0.40 0.30 to "
                           "1.10 0.50 0.30, 1.50 of 2 CPUs busy (all processes)")
    assert table[1] == ["a replace \\| over the socket", "1.25 ms", "a bare write: 1.00 ms",
                        "1.25x", "<= 1.5", "yes"]
    assert table[2] == ["writes/s at 32 clients", "3,000/s", "the bare loop: 10,000/s",
                        "0.30x", ">= 0.8", "**no**"]
    assert "**failed (exit status 3)**" in table[3][0] and "10 s" in table[3][0]
    assert table[4] == ["RSS after a soak", "80 MB", "", "", "", ""]
    assert table[5][0] == "**`bench_gamma.py`**: not run (`--only`)"
    assert len(table) == 6
    assert speed_page.parse(page) == small_run()
    assert speed_page.render(speed_page.parse(page)) == page


def test_a_benchmark_without_figures_or_an_end_is_shown() -> None:
    records = small_run()
    without = [r for r in records if not (r["kind"] == "figure" and r["bench"] == "bench_beta")
               and not (r["kind"] == "end" and r["bench"] == "bench_alpha")]
    table = rows(speed_page.render(without))
    assert table[0][0] == "**`bench_alpha.py`**: did not finish"
    assert table[3][0].startswith("**`bench_beta.py`** **failed (exit status 3)** (no figures")
    never = [r for r in records if r.get("bench") != "bench_beta"]
    assert "**`bench_beta.py`**: not started" in speed_page.render(never)


def test_records_out_of_format_are_refused() -> None:
    with pytest.raises(speed_page.PageError, match="line 2: not JSON"):
        speed_page.read_results('{"kind": "finish", "time": 1, "loadavg": "", "ended": ""}\n{')
    with pytest.raises(speed_page.PageError, match="figure record without goal, met"):
        speed_page.read_results(json.dumps({"kind": "figure", "bench": "b", "figure": "f",
                                            "memfs": "1", "baseline": "", "ratio": None}))
    with pytest.raises(speed_page.PageError, match="no known kind"):
        speed_page.read_results('{"kind": "guess"}')
    with pytest.raises(speed_page.PageError, match="0 run records"):
        speed_page.render(small_run()[1:])
    with pytest.raises(speed_page.PageError, match="not written by scripts/bench"):
        speed_page.parse("# Speed\n\n| figure | memfs |\n")


def test_a_hand_edit_of_a_generated_page_is_seen() -> None:
    page = speed_page.render(small_run())
    edited = page.replace("| 1.25 ms |", "| 0.95 ms |")
    assert edited != page
    assert speed_page.render(speed_page.parse(edited)) != edited


def test_the_page_in_the_repository_is_the_generators() -> None:
    page = PAGE.read_text()
    records = speed_page.parse(page)  # raises if it was not written by scripts/bench
    assert speed_page.render(records) == page, \
        "docs/speed.md differs from what scripts/speed_page.py writes from its own " \
        "records: edited by hand? Run scripts/bench to write it"
    run = next(r for r in records if r["kind"] == "run")
    assert run["benches"], "a page of a run that ran no benchmark"
    table = rows(page)
    for bench in run["benches"] + run["left_out"]:
        assert any(row[0].startswith(f"**`{bench}.py`**") for row in table), bench


def test_record_appends_a_line_only_when_scripts_bench_asks(tmp_path: Path) -> None:
    """A real benchmark-like process: benchlib.record with and without the variable."""
    script = tmp_path / "bench_fake.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(REPO / 'scripts')!r})\n"
        "from benchlib import record\n"
        "record('a figure', '2.00 ms', baseline='base: 1.00 ms', ratio=2.0, goal='<= 1.5')\n"
        "record('another', '5/s', ratio=0.9, goal='>= 0.8x')\n"
        "record('a latency', 'p99 80 ms', goal='p99 <= 100 ms', met=True)\n"
        "record('no goal', '3 MB')\n")
    results = tmp_path / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "MEMFS_BENCH_RESULTS"}
    subprocess.run([sys.executable, str(script)], env=env, check=True)
    assert not results.exists()
    subprocess.run([sys.executable, str(script)], check=True,
                   env={**env, "MEMFS_BENCH_RESULTS": str(results)})
    found = speed_page.read_results(results.read_text())
    assert [(r["bench"], r["figure"], r["ratio"], r["met"]) for r in found] == [
        ("bench_fake", "a figure", 2.0, False), ("bench_fake", "another", 0.9, True),
        ("bench_fake", "a latency", None, True), ("bench_fake", "no goal", None, None)]
    assert found[0]["baseline"] == "base: 1.00 ms" and found[0]["goal"] == "<= 1.5"


def test_the_steps_scripts_bench_calls(tmp_path: Path) -> None:
    """begin, mark (a benchmark that fails), write: the page says so, with this
    machine's figures and this checkout's commit."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the page names the checkout's commit")
    results, page = tmp_path / "results.jsonl", tmp_path / "speed.md"
    step = [sys.executable, str(REPO / "scripts" / "speed_page.py")]
    subprocess.run([*step, "begin", str(results), "bench_one", "--left-out=bench_two",
                    "--options=--only one"], check=True)
    subprocess.run([*step, "mark", str(results), "start", "bench_one"], check=True)
    subprocess.run([*step, "mark", str(results), "end", "bench_one", "2"], check=True)
    subprocess.run([*step, "write", str(results), str(page)], check=True)
    text = page.read_text()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert f"commit `{commit}`" in text
    assert f"{os.cpu_count()} CPUs" in text
    assert "**`bench_one.py`** **failed (exit status 2)** (no figures recorded)" in text
    assert "**`bench_two.py`**: not run (`--only`)" in text
    assert speed_page.render(speed_page.parse(text)) == text
    page.write_text(text + "edited by hand\n")
    subprocess.run([*step, "render", str(page)], check=True)
    assert page.read_text() == text, "render writes the page from its records alone"
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n")
    done = subprocess.run([*step, "write", str(broken), str(tmp_path / "other.md")],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "line 1: not JSON" in done.stderr


def test_a_ratio_just_past_its_goal_is_not_shown_as_within() -> None:
    assert speed_page.ratio_text(1.5047, "<= 1.5") == "1.505x"
    assert speed_page.ratio_text(0.79996, ">= 0.8x") == "0.79996x"
    assert speed_page.ratio_text(1.5, "<= 1.5") == "1.50x"
    assert speed_page.ratio_text(1.5047, "p99 <= 100 ms") == "1.50x"
    assert speed_page.ratio_text(1.234, "") == "1.23x"
