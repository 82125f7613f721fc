"""The web view shows delegation and forcing in its history rows: a change a delegate
uid made for an agent reads "AGENT (via uid N)", on the history page, the file page
and the commit page; a forced one carries the "forced" badge."""

from __future__ import annotations

import re

import httpx

from tests.support import Daemon, connect_as


def test_history_rows_name_the_delegate_and_say_forced(daemon: Daemon,
                                                       alice_web: httpx.Client) -> None:
    with connect_as(0, daemon.socket, as_agent="bob") as for_bob:  # root: a delegate
        for_bob.write("notes/web/delegated.md", "by root for bob\n")
        done = for_bob.write("notes/web/delegated.md", "forced\n", force=True)
    history = alice_web.get("/ui/stores/notes/history?path=web/delegated.md")
    assert history.status_code == 200, history.text
    rows = re.findall(r'<tr class="entry[^"]*">.*?</tr>', history.text, re.S)
    assert len(rows) == 2, history.text
    assert all("bob <span class=\"via\"" in row and "(via uid 0)" in row for row in rows)
    assert 'class="entry forced"' in rows[0] and "forced</span>" in rows[0]
    assert "forced" not in rows[1]
    page = alice_web.get("/ui/stores/notes/files/web/delegated.md")
    assert page.text.count("(via uid 0)") == 2 and "forced</span>" in page.text
    commit = alice_web.get(f"/ui/stores/notes/commits/{done['commit']}")
    assert "(via uid 0)" in commit.text and "forced: the version check was skipped" in commit.text
