"""The web view in a real browser: Debian's headless Chromium, driven by Selenium through
Debian's chromedriver, against a real daemon on 127.0.0.1. Every page visited is
saved as a screenshot under ARTIFACTS (tests/control/http/web/conftest.py; printed at the end)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.control.http.web.conftest import screenshot
from tests.support import UID_A, UID_B, Daemon, connect_as, memfs_as, scaled

WAIT = 30.0


def until(driver: Any, condition: Any, what: str) -> Any:
    """Poll CONDITION until it holds. A live page swaps its #live part in place, so an
    element found in one poll can be gone by the next WebDriver call: that poll counts
    as not yet (StaleElementReferenceException is ignored), never as a failure."""
    return WebDriverWait(driver, scaled(WAIT), poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: condition(d), message=f"waited {scaled(WAIT)}s for {what}")


def live_text(driver: Any, css: str) -> str:
    """The text of the first element matching CSS, read in one script call so that a
    live swap between finding and reading cannot interleave."""
    return str(driver.execute_script(
        "var e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css))


def sign_in(driver: Any, daemon: Daemon, token: str) -> None:
    driver.get(f"{daemon.http_url}/ui/login")
    driver.delete_all_cookies()
    driver.get(f"{daemon.http_url}/ui/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "sign-in").click()
    until(driver, lambda d: d.find_elements(By.ID, "agent"), "the signed-in page")


def visit(driver: Any, daemon: Daemon, path: str) -> None:
    driver.get(f"{daemon.http_url}{path}")


def stores_listed(driver: Any) -> set[str]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#stores tr.store-row")
    return {row.get_attribute("data-store") for row in rows}


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The console entries since the last call that are errors or warnings (a CSP
    violation, a failed load, a script error, an alert's trace...)."""
    return [entry for entry in driver.get_log("browser")
            if entry["level"] in ("SEVERE", "WARNING")]


def wait_live(driver: Any) -> None:
    """Until the page's event stream is connected (the daemon said hello)."""
    until(driver, lambda d: "on" in (d.find_element(By.ID, "live-status")
                                     .get_attribute("class") or "").split(),
          "the live event stream")


def test_sign_in_shows_the_agents_stores_and_no_others(browser: Any, daemon: Daemon,
                                                        tokens: dict[str, str]) -> None:
    visit(browser, daemon, "/ui/stores/notes/history")
    assert "/ui/login" in browser.current_url  # not signed in: the form
    screenshot(browser, "login")
    sign_in(browser, daemon, tokens["alice"])
    assert browser.find_element(By.ID, "agent").text == "alice"
    assert stores_listed(browser) == {"notes", "ops", "team", "team2"}
    screenshot(browser, "overview-alice")
    cookie = browser.get_cookie("memfs_ui")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["value"] not in tokens["alice"]
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script sees it
    browser.find_element(By.CSS_SELECTOR, "form.logout button").click()
    until(browser, lambda d: "/ui/login" in d.current_url, "the sign-in page after sign-out")
    visit(browser, daemon, "/ui/")
    assert "/ui/login" in browser.current_url
    sign_in(browser, daemon, tokens["carol"])
    assert stores_listed(browser) == {"notes", "team"}
    assert "secret" not in browser.find_element(By.ID, "stores").text
    screenshot(browser, "overview-carol")
    visit(browser, daemon, "/ui/stores/ops/")  # not carol's: it does not exist for her
    assert "404" in browser.find_element(By.TAG_NAME, "h1").text
    screenshot(browser, "forbidden-store")


def test_history_and_overview_update_live(browser: Any, daemon: Daemon,
                                          tokens: dict[str, str]) -> None:
    sign_in(browser, daemon, tokens["alice"])
    visit(browser, daemon, "/ui/stores/notes/history")
    wait_live(browser)
    browser.execute_script("window.memfsMarker = 'no reload';")
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("notes/live/incident.md", "# Incident\n\nlag rising\n")
    until(browser, lambda d: "notes/live/incident.md" in live_text(d, "#history"),
          "the new commit on the history page")
    first = live_text(browser, "#history tbody tr")
    assert "bob" in first and "notes/live/incident.md" in first  # newest first
    assert browser.execute_script("return window.memfsMarker") == "no reload"
    screenshot(browser, "history-live")

    visit(browser, daemon, "/ui/")
    wait_live(browser)
    browser.execute_script("window.memfsMarker = 'no reload';")
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/live/followup.md", "- check the consumers\n")
    until(browser, lambda d: "notes/live/followup.md" in live_text(d, "#recent"),
          "the new commit on the overview")
    assert browser.execute_script("return window.memfsMarker") == "no reload"
    screenshot(browser, "overview-live")


def test_task_board_shows_an_expired_lease_as_a_hazard(browser: Any, daemon: Daemon,
                                                       tokens: dict[str, str]) -> None:
    with connect_as(UID_B, daemon.socket) as bob:
        bob.call("task_add", store="team", task="drain-retry-queue",
                 title="Drain the retry queue")
        bob.call("task_claim", store="team", task="drain-retry-queue", ttl="1s")
        bob.call("task_add", store="team", task="rate-limits", title="Add rate limiting")
        bob.call("task_claim", store="team", task="rate-limits", ttl="2h")
        deadline = time.monotonic() + scaled(WAIT)
        while bob.call("task_show", store="team", task="drain-retry-queue")["status"] \
                != "expired":
            assert time.monotonic() < deadline, "the 1 s lease never expired"
            time.sleep(0.2)
    sign_in(browser, daemon, tokens["alice"])
    visit(browser, daemon, "/ui/stores/team/tasks")
    card = browser.find_element(By.CSS_SELECTOR, "#col-expired #task-drain-retry-queue")
    assert "abandoned by bob" in card.text and "hazard" in card.text
    held = browser.find_element(By.CSS_SELECTOR, "#col-claimed #task-rate-limits")
    assert "held by bob" in held.text and "left" in held.text
    screenshot(browser, "tasks")
    visit(browser, daemon, "/ui/")
    hazards = browser.find_element(By.ID, "hazards").text
    assert "drain-retry-queue" in hazards and "bob abandoned it" in hazards
    screenshot(browser, "overview-hazard")


def test_diff_page_shows_the_changed_line(browser: Any, daemon: Daemon,
                                          tokens: dict[str, str]) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/runbooks/retry-queue.md",
                    "# Retry queue\n\nConsumers: 8\nOwner: payments\n")
        alice.read("notes/runbooks/retry-queue.md")
        rev = alice.write("notes/runbooks/retry-queue.md",
                          "# Retry queue\n\nConsumers: 12\nOwner: payments\n")["commit"]
    sign_in(browser, daemon, tokens["alice"])
    visit(browser, daemon, f"/ui/stores/notes/commits/{rev}")
    removed = browser.find_element(By.CSS_SELECTOR, ".diff-unified tr.del")
    added = browser.find_element(By.CSS_SELECTOR, ".diff-unified tr.add")
    assert removed.text.endswith("Consumers: 8") and added.text.endswith("Consumers: 12")
    context = browser.find_element(By.CSS_SELECTOR, ".diff-unified tr.ctx td.code")
    colour = added.find_element(By.CSS_SELECTOR, "td.code").value_of_css_property
    assert colour("background-color") != context.value_of_css_property("background-color")
    assert not browser.find_element(By.CSS_SELECTOR, ".diff-split").is_displayed()
    screenshot(browser, "commit")
    browser.set_window_size(1600, 900)
    try:
        until(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".diff-split").is_displayed(),
              "the side-by-side diff on a wide screen")
        row = browser.find_element(By.CSS_SELECTOR, ".diff-split td.code.del").find_element(
            By.XPATH, "..")
        assert "Consumers: 8" in row.text and "Consumers: 12" in row.text  # side by side
        assert not browser.find_element(By.CSS_SELECTOR, ".diff-unified").is_displayed()
        screenshot(browser, "commit-wide")
    finally:
        browser.set_window_size(1280, 900)


HOSTILE = """---
title: <script>window.__pwned = 'front matter'</script>
---
# Hostile note <script>window.__pwned = 'heading'; alert('heading')</script>

<script>window.__pwned = 'block'; alert('block')</script>
<img src=x onerror="window.__pwned = 'img'">
<div id="injected">raw HTML</div>
<iframe src="javascript:alert('frame')"></iframe>

[click me](javascript:window.__pwned='link') [data](data:text/html,<script>alert(1)</script>)
![pixel](javascript:alert('image'))
"""


def test_a_hostile_note_runs_no_script(browser: Any, daemon: Daemon,
                                       tokens: dict[str, str]) -> None:
    name = "x<img src=x onerror=alert(7)>.md"
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("notes/xss/note.md", HOSTILE)
        bob.write(f"notes/xss/{name}", "<script>alert(8)</script>\n")
        bob.call("task_add", store="team", task="xss-task",
                 title="<script>alert('task')</script>", body="<img src=x onerror=alert(9)>")
        session = bob.call("session_start", store="team",
                           goal="<script>window.__pwned='goal'</script>")
        bob.call("session_handoff", store="team", session=session["id"],
                 summary="<b onmouseover=alert(1)>x</b>", next="[go](javascript:alert(2))")
    sign_in(browser, daemon, tokens["alice"])
    browser.get_log("browser")  # start the console log afresh
    for page, shot in (("/ui/stores/notes/files/xss/note.md", "xss-note"),
                       ("/ui/stores/notes/?dir=xss", "xss-folder"),
                       ("/ui/stores/team/tasks", None), ("/ui/stores/team/sessions", "sessions"),
                       ("/ui/stores/notes/history?path=xss", None)):
        visit(browser, daemon, page)
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - raises when no alert is open
        assert browser.execute_script("return window.__pwned === undefined"), page
        found = browser.execute_script(
            "return document.querySelectorAll('#injected, iframe, img, object, embed, "
            "[onerror], [onmouseover], a[href^=\"javascript:\" i], a[href^=\"data:\" i]')"
            ".length")
        assert found == 0, page
        scripts = browser.execute_script(
            "return Array.from(document.scripts).map(s => s.getAttribute('src'))")
        assert set(scripts) <= {"/ui/static/live.js"}, (page, scripts)
        assert console_errors(browser) == [], page
        if shot:
            screenshot(browser, shot)
    visit(browser, daemon, "/ui/stores/notes/files/xss/note.md")
    text = browser.find_element(By.TAG_NAME, "main").text
    assert "<script>window.__pwned = 'block'; alert('block')</script>" in text  # as text
    front = browser.find_element(By.ID, "front-matter").text
    assert front == "title: <script>window.__pwned = 'front matter'</script>"
    links = browser.find_elements(By.CSS_SELECTOR, "#rendered a")
    assert links == []  # every link of the note had an unsafe scheme: none kept


def test_bad_and_revoked_tokens_cannot_sign_in(browser: Any, daemon: Daemon) -> None:
    visit(browser, daemon, "/ui/login")
    browser.delete_all_cookies()
    visit(browser, daemon, "/ui/login")
    browser.find_element(By.ID, "token").send_keys("memfs_000000000000_not-a-token")
    browser.find_element(By.ID, "sign-in").click()
    message = until(browser, lambda d: d.find_elements(By.ID, "login-error"), "the refusal")
    assert "unknown, revoked or expired" in message[0].text
    assert browser.get_cookie("memfs_ui") is None
    screenshot(browser, "login-refused")
    token = daemon.token("dave", "--label", "browser, to revoke")
    sign_in(browser, daemon, token)
    visit(browser, daemon, "/ui/stores/team/tasks")
    assert browser.find_element(By.ID, "agent").text == "dave"
    done = memfs_as(0, daemon.socket, "token", "revoke", token.split("_")[1])
    assert done.returncode == 0, done.stderr
    browser.refresh()
    assert "/ui/login" in browser.current_url  # the session ended with its token
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "sign-in").click()
    message = until(browser, lambda d: d.find_elements(By.ID, "login-error"), "the refusal")
    assert "unknown, revoked or expired" in message[0].text


def seed_tour(daemon: Daemon) -> dict[str, Any]:
    """Memory that looks like a team's: notes, runbooks, tasks (one lease abandoned),
    decisions (one superseded), a session handed off."""
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/incidents/checkout-timeouts.md",
                    "---\ntitle: Checkout timeouts\n---\n# Checkout timeouts\n\n"
                    "Seen on **2026-11-28** after the deploy.\n\n- retry queue lag above "
                    "5,000\n- consumers: 8\n\n| time | what |\n|---|---|\n| 10:02 | alert |\n"
                    "| 10:30 | consumers raised to 12 |\n\nSee [the runbook]"
                    "(../runbooks/retry-queue.md).\n")
        alice.write("notes/runbooks/retry-queue.md", "# Retry queue\n\nConsumers: 8\n")
        alice.write("notes/runbooks/retry-queue.md", "# Retry queue\n\nConsumers: 12\n"
                    "Alert when lag > 2,000\n")
        alice.write("ops/oncall/rotation.md", "# On-call\n\n- week 48: alice\n- week 49: bob\n")
        first = alice.call("decision_record", store="team", title="Alert on retry lag above "
                           "5,000", decision="Page on-call when lag > 5,000", reason="noise")
        alice.call("decision_record", store="team", title="Alert on retry lag above 2,000",
                   decision="Lower the lag alert to 2,000", reason="5,000 fired too late",
                   supersedes=first["id"])
        session = alice.call("session_start", store="team", goal="drain the retry queue")
        alice.call("session_checkpoint", store="team", session=session["id"],
                   note="consumers at 8, lag falling")
        alice.call("session_handoff", store="team", session=session["id"],
                   summary="queue drained", next="watch the new alert for a week")
    with connect_as(UID_B, daemon.socket) as bob:
        bob.call("task_add", store="team", task="document-alerts", title="Document the alerts")
        bob.call("task_add", store="team", task="rate-limits", title="Add rate limiting")
        bob.call("task_claim", store="team", task="rate-limits", ttl="2h")
        bob.call("task_add", store="team", task="replay-dead-letters",
                 title="Replay the dead letters")
        bob.call("task_claim", store="team", task="replay-dead-letters", ttl="1s")
        deadline = time.monotonic() + scaled(WAIT)
        while bob.call("task_show", store="team", task="replay-dead-letters")["status"] \
                != "expired":
            assert time.monotonic() < deadline, "the 1 s lease never expired"
            time.sleep(0.2)
    return first


def test_a_tour_of_every_page(browser: Any) -> None:
    """Every page renders in the browser without a console error (no CSP violation,
    no failed load); each is saved as a screenshot (docs/reference/web-view.md's comes
    from here)."""
    from tests.control.http.conftest import http_config

    with Daemon(http_config("memfs-web-tour-")) as daemon:
        first = seed_tour(daemon)
        sign_in(browser, daemon, daemon.token("alice"))
        browser.get_log("browser")
        pages = [("/ui/", "overview"), ("/ui/stores/notes/", "store"),
                 ("/ui/stores/notes/files/incidents/checkout-timeouts.md", "file"),
                 ("/ui/stores/notes/history", "history"),
                 ("/ui/stores/team/decisions", "decisions"),
                 ("/ui/stores/team/sessions", "sessions"), ("/ui/stores/team/tasks", "tasks"),
                 ("/ui/changes?since=1h", "changes"), ("/ui/stores/notes/commits/HEAD", "commit")]
        for path, name in pages:
            visit(browser, daemon, path)
            assert browser.find_element(By.ID, "agent").text == "alice", path
            assert "error-message" not in browser.page_source, path
            screenshot(browser, f"page-{name}")
            assert console_errors(browser) == [], path
        visit(browser, daemon, "/ui/stores/team/decisions")
        superseded = browser.find_element(By.CSS_SELECTOR,
                                          ".decision.superseded .superseded-by a")
        newer = superseded.get_attribute("href").rsplit("#", 1)[1]
        assert browser.find_element(By.ID, newer).find_element(
            By.CSS_SELECTOR, ".supersedes a").get_attribute("href").endswith(
            f"#d-{first['id']}")  # linked both ways
        visit(browser, daemon, "/ui/stores/team/sessions")
        nexts = browser.find_elements(By.CSS_SELECTOR, ".handoff .next")
        assert any("watch the new alert for a week" in n.text for n in nexts)
        assert nexts[0].value_of_css_property("background-color") != \
            browser.find_element(By.CSS_SELECTOR, ".session").value_of_css_property(
                "background-color")  # highlighted


def test_waiting_on_a_live_part_survives_its_swap(browser: Any, daemon: Daemon,
                                                  tokens: dict[str, str]) -> None:
    """The live tests above wait on parts that the page swaps in place (live.js). A swap
    between finding an element and reading it made CI fail once (stale element); here a
    swap is forced at exactly that point, and the wait goes on to the next poll."""
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/live/swap.md", "swap\n")
    sign_in(browser, daemon, tokens["alice"])
    visit(browser, daemon, "/ui/")
    polls = []

    def swapped_under_the_reader(driver: Any) -> bool:
        polls.append(1)
        if len(polls) > 3:
            return "notes/live/swap.md" in live_text(driver, "#recent")
        recent = driver.find_element(By.ID, "recent")
        driver.execute_script(
            "var part = document.getElementById('live');"
            "part.replaceWith(part.cloneNode(true));")
        return "notes/live/swap.md" in recent.text  # stale: the part was swapped

    assert until(browser, swapped_under_the_reader, "a read after three forced swaps")
    assert len(polls) == 4


SANE_HEIGHT = 20_000  # px: a few screens (a 10 MB file's page was 257,000 px)


def page_height(driver: Any) -> int:
    return int(driver.execute_script("return document.documentElement.scrollHeight"))


def test_a_10_mb_file_is_shown_a_page_at_a_time(browser: Any, daemon: Daemon,
                                                tokens: dict[str, str]) -> None:
    """Each page of a 10 MB file, of short lines or of one long line, as text or as
    markdown, is a sane height, and the next page is a click away."""
    line = " lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod\n"
    count = 10 * 1024 * 1024 // (len(line) + 7)
    short = "".join(f"{n:07d}{line}" for n in range(1, count + 1))
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/big/ten.log", short)
        alice.write("notes/big/ten.md", short)
        alice.write("notes/big/one-line.txt", "y" * (10 * 1024 * 1024))
    sign_in(browser, daemon, tokens["alice"])
    for name in ("ten.log", "ten.md", "one-line.txt"):
        visit(browser, daemon, f"/ui/stores/notes/files/big/{name}")
        assert browser.find_element(By.ID, "facts").text, name
        height = page_height(browser)
        screenshot(browser, f"file-10mb-{name.replace('.', '-')}")
        assert height < SANE_HEIGHT, f"{name}: {height} px"
    visit(browser, daemon, "/ui/stores/notes/files/big/ten.log")
    pager = browser.find_element(By.ID, "pager-top")
    assert f"page 1 of {-(-count // 500)}" in pager.text
    pager.find_element(By.CSS_SELECTOR, "a[rel=next]").click()
    until(browser, lambda d: "page=2" in d.current_url, "the second page")
    assert browser.find_element(By.ID, "raw").text.startswith(f"{501:07d} lorem")
    assert page_height(browser) < SANE_HEIGHT


def test_times_are_never_broken_across_lines(browser: Any, daemon: Daemon,
                                             tokens: dict[str, str]) -> None:
    """On the task board's narrow columns, too."""
    with connect_as(UID_B, daemon.socket) as bob:
        bob.call("task_add", store="team", task="narrow", title="A task in a narrow column")
        bob.call("task_claim", store="team", task="narrow", ttl="1h")
        bob.call("task_checkpoint", store="team", task="narrow", note="half way there")
        session = bob.call("session_start", store="team", goal="narrow columns")["id"]
        bob.call("session_checkpoint", store="team", session=session, note="looked")
    sign_in(browser, daemon, tokens["alice"])
    browser.set_window_size(900, 900)
    try:
        for path in ("/ui/stores/team/tasks", "/ui/stores/team/sessions", "/ui/"):
            visit(browser, daemon, path)
            lines = browser.execute_script(
                "return Array.from(document.querySelectorAll('time'), "
                "t => t.getClientRects().length);")
            assert lines and all(n == 1 for n in lines), (path, lines)
        screenshot(browser, "tasks-narrow")
    finally:
        browser.set_window_size(1280, 900)
