"""The mirrors over HTTP: their state in /metrics, the REST endpoints of the ops
(``GET /v1/mirrors``, ``POST /v1/mirrors/push``: 502 ``mirror_failed``), and the
store's page of the web view."""

from __future__ import annotations

from pathlib import Path

from tests.control.http.conftest import client, problem
from tests.control.http.test_metrics import scrape, value
from tests.control.http.web.conftest import sign_in
from tests.store.mirror.remotes import (
    bare_repository,
    converged,
    mirrored,
    wait_for,
    write_many,
)
from tests.support import Daemon


def test_metrics_rest_and_the_web_view_show_each_mirror(base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    url = f"file://{remote}"
    config = mirrored(base, url, http={"listen": "127.0.0.1:0"})
    with Daemon(config) as daemon:
        token = daemon.token("alice")
        write_many(daemon, 3, "a")
        wait_for(lambda: converged(daemon.socket, "notes"), "the mirror to catch up")
        with client(daemon, token) as http:
            samples = scrape(http)
            where = {"store": "notes", "mirror": url}
            assert value(samples, "memfs_mirror_commits_behind", **where) == 0
            assert value(samples, "memfs_mirror_state", state="ok", **where) == 1
            assert value(samples, "memfs_mirror_state", state="down", **where) == 0
            assert value(samples, "memfs_mirror_last_success_timestamp_seconds", **where) > 0
            assert value(samples, "memfs_mirror_pushes_total", outcome="ok", **where) >= 1

            listed = http.get("/v1/mirrors", params={"store": "notes"})
            assert listed.status_code == 200, listed.text
            assert [(m["url"], m["state"]) for m in listed.json()["mirrors"]] == [(url, "ok")]
            pushed = http.post("/v1/mirrors/push", json={"store": "notes"})
            assert pushed.status_code == 200 and pushed.json()["mirrors"][0]["state"] == "ok"

            web = sign_in(daemon, token)
            page = web.get("/ui/stores/notes/")
            assert page.status_code == 200
            assert f"Mirror {url}: ok, 0 commits behind" in page.text

            aside = remote.with_name("away.git")
            remote.rename(aside)  # down
            write_many(daemon, 2, "b")
            failed = problem(http.post("/v1/mirrors/push", json={"store": "notes"}), 502,
                             "mirror_failed")
            assert failed["details"]["mirrors"][0]["state"] == "down"
            samples = scrape(http)
            assert value(samples, "memfs_mirror_state", state="down", **where) == 1
            assert value(samples, "memfs_mirror_commits_behind", **where) == 2
            assert "Mirror " + url + ": down, 2 commits behind" in web.get(
                "/ui/stores/notes/").text
            web.close()
            aside.rename(remote)
