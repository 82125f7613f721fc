"""Benchmarks of the web view (issue 15), each next to a baseline from the same run and
daemon. Run as root: `scripts/bench` or `.venv/bin/python scripts/bench_web.py`.

One store (``notes``) gets 10,000 files, each written through the socket, so it also
has 10,000 commits. Then, signed in as its agent over one keep-alive connection
(median of several GETs, the whole page rendered):

* the overview ``/ui/`` (it walks every store: counts, sizes, last change, tasks)
  and the store's folder of 10,000 files (first and last page of 200), next to the
  socket's ``list`` of the same store and the CLI's ``memfs ls`` of it;
* the history page (50 entries, newest first), one 9,900 commits deep, and the
  history of one file changed once, next to the socket's ``log -n 50`` and the
  CLI's ``memfs log -n 50``;
* a file page and a commit page, next to a socket ``read`` of the file.

Goal: every page well under a second.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from benchlib import record

from tests.support import UID_A, Daemon, connect_as, public_tmpdir, standard_config

FILES = 10_000
WORKERS = 4
GOAL = 1.0  # seconds


def median(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms"


def fill(daemon: Daemon) -> None:
    # connected one by one: connect_as switches the process's euid
    clients = [connect_as(UID_A, daemon.socket) for _ in range(WORKERS)]

    def worker(index: int) -> None:
        with clients[index] as client:
            for n in range(index, FILES, WORKERS):
                client.write(f"notes/flat/note-{n:05d}.md", f"# note {n}\n\n{'x' * (n % 300)}\n")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"wrote {FILES} files through the socket ({FILES} commits) in "
          f"{time.perf_counter() - start:.0f} s")


def signed_in(daemon: Daemon) -> httpx.Client:
    token = subprocess.run([sys.executable, "-m", "memfs.cli", "--socket", str(daemon.socket),
                            "token", "create", "alice"], capture_output=True, check=True,
                           text=True).stdout.strip()
    web = httpx.Client(base_url=daemon.http_url, timeout=120)
    form = web.get("/ui/login").text
    nonce = re.search(r'name="nonce" value="([^"]+)"', form)
    assert nonce
    done = web.post("/ui/login", data={"token": token, "nonce": nonce.group(1)},
                    headers={"Origin": daemon.http_url}, follow_redirects=True)
    assert done.status_code == 200 and "signed in as" in done.text, done.status_code
    return web


def page(web: httpx.Client, url: str, must: str) -> Callable[[], object]:
    def get() -> None:
        response = web.get(url)
        assert response.status_code == 200 and must in response.text, (url, response.status_code)

    return get


def report(name: str, seconds: float, baselines: list[tuple[str, float]]) -> None:
    verdict = "ok" if seconds < GOAL else "SLOW"
    against = "; ".join(f"{label} {ms(value).strip()}" for label, value in baselines)
    print(f"{name:<44} {ms(seconds)}  [{verdict}: goal < {GOAL:.0f} s]  baseline: {against}")
    record(f"web view: {name}, store of {FILES:,} files and commits (median)",
           ms(seconds).strip(), baseline=against, goal=f"< {GOAL:.0f} s", met=seconds < GOAL)


def main() -> None:
    base = public_tmpdir("memfs-bench-web-")
    config = standard_config(base)
    config["http"] = {"listen": "127.0.0.1:0"}
    memfs = str(Path(sys.executable).parent / "memfs")
    env = {**os.environ, "MEMFS_SOCKET": str(config["socket"])}
    with Daemon(config) as daemon:
        fill(daemon)
        time.sleep(2)  # the daemon's history maintenance (sync, pack) settles
        web = signed_in(daemon)
        with connect_as(UID_A, daemon.socket) as client:
            listing = median(lambda: client.call("list", patterns=["notes/**"]), 10)
            log50 = median(lambda: client.call("log", path="notes", limit=50), 20)
            read = median(lambda: client.read("notes/flat/note-00042.md"), 20)
            deep = client.call("log", path="notes", rev="HEAD~9900", limit=1)["entries"][0]
        cli_ls = median(lambda: subprocess.run([memfs, "--as", "alice", "ls", "notes/**"],
                                               env=env, check=True, capture_output=True), 5)
        cli_log = median(lambda: subprocess.run([memfs, "--as", "alice", "log", "-n", "50",
                                                 "notes"], env=env, check=True,
                                                capture_output=True), 5)
        ls_base = [("socket list", listing), ("`memfs ls`", cli_ls)]
        log_base = [("socket log -n 50", log50), ("`memfs log -n 50`", cli_log)]
        print(f"store notes: {FILES} files, {FILES} commits; medians over one keep-alive "
              "connection, whole pages")
        report("overview /ui/", median(page(web, "/ui/", "notes"), 10), ls_base)
        report("store page, folder of 10,000 (page 1)",
               median(page(web, "/ui/stores/notes/?dir=flat", "note-00000.md"), 10), ls_base)
        report("store page, folder of 10,000 (page 50)",
               median(page(web, "/ui/stores/notes/?dir=flat&page=50", "note-09999.md"), 10),
               ls_base)
        report("history page (50 newest of 10,000)",
               median(page(web, "/ui/stores/notes/history", "older"), 10), log_base)
        report("history page 9,900 commits deep",
               median(page(web, f"/ui/stores/notes/history?rev={deep['rev']}", "older"), 10),
               log_base)
        report("history of one file (1 of 10,000 commits)",
               median(page(web, "/ui/stores/notes/history?path=flat/note-00042.md",
                           "note-00042.md"), 10), log_base)
        report("file page", median(page(web, "/ui/stores/notes/files/flat/note-00042.md",
                                         "note 42"), 10), [("socket read", read)])
        report("commit page", median(page(web, f"/ui/stores/notes/commits/{deep['rev']}",
                                           "diff-unified"), 10), [("socket read", read)])
        web.close()


if __name__ == "__main__":
    main()
