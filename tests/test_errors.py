"""The one error table (memfs/errors.py) and its views, without a daemon.

The expectations come from docs/reference/ (the user contract), not from the table: the control
protocol's list of error codes, HTTP's statuses, the CLI's exit codes, the classes the
engine, the memory model and the jail raise. The real socket, HTTP and MCP answers are
checked by the suites that start a daemon (tests/store, tests/control/http, tests/control/mcp).
"""

from __future__ import annotations

import json
import re

import pytest

import memfs.jail.errors
import memfs.memory.errors
import memfs.store.errors
import memfs.store.history.mirror
import memfs.store.history.repo
import memfs.store.history.restore
from memfs import cli
from memfs.control import protocol as p
from memfs.control.client import client as c
from memfs.control.http.openapi import document
from memfs.control.http.problems import STATUS, TITLES, problem
from memfs.control.mcp.storage import Connection, StorageTools, ToolOutcome
from memfs.control.ops.dispatcher import describe
from memfs.errors import ERRORS, EXIT_ERROR, MemfsError, Unavailable
from memfs.jail.errors import (
    BadArguments,
    JailBusy,
    JailError,
    JailLimit,
    JailUnavailable,
    KernelLacks,
    ToolFailed,
)
from memfs.memory.errors import AlreadyExists, Closed, LeaseHeld, LeaseLost
from memfs.store.errors import (
    AgentRequired,
    ConditionFailed,
    Conflict,
    InvalidInput,
    LastWrite,
    NoSpace,
    NotAFolder,
    NotFound,
    PathTaken,
    PermissionDenied,
    TooLarge,
)
from memfs.store.history.mirror import MirrorFailed
from memfs.store.history.repo import HistoryError, HistoryFull
from memfs.store.history.restore import RestoreError
from tests.support import REPO

REFERENCE = REPO / "docs" / "reference"


def _doc_span(doc: str, start: str, end: str) -> str:
    """The text (whitespace joined) of docs/reference/``doc`` from ``start`` to the first
    ``end`` after it."""
    text = " ".join((REFERENCE / doc).read_text().split())
    head = text.index(start)
    return text[head:text.index(end, head) + len(end)]


# protocol.md: "Error codes: `conflict`, ..., `internal`"
PROTOCOL_CODES = re.findall(r"`([a-z_]+)`",
                            _doc_span("protocol.md", "Error codes: `", "`internal`"))
# http.md: "Errors are RFC 9457 problem details ...: 400 `invalid`, 401 ..., 500 `internal`"
HTTP_STATUS = {
    code: int(status)
    for status, codes in re.findall(r"(\d{3}) ((?:`[a-z_]+`(?: / )?)+)",
                                    _doc_span("http.md", "Errors are RFC 9457", "`internal`"))
    for code in re.findall(r"`([a-z_]+)`", codes)
}
# the client's own code: no reply came (errors.md: "1 other error (e.g. daemon unreachable")
CLIENT_CODES = [*PROTOCOL_CODES, "connection"]


def _documented_exit_codes() -> dict[str, int]:
    """errors.md: "**Exit codes**: 0 ok, 1 other error (...), 2 ..., 7 mirror failed (...)." A
    code named in an item (as `code` or in words) exits with its number; a code named
    in none is an "other error" (1)."""
    items = re.split(r", (?=\**\d )", _doc_span("errors.md", "**Exit codes**:", "unchanged).")
                     .removeprefix("**Exit codes**: "))
    exits: dict[str, int] = {}
    for item in items:
        number = int(item.strip("*")[0])
        for code in CLIENT_CODES:
            if f"`{code}`" in item or re.search(rf"\b{code.replace('_', ' ')}\b", item):
                assert code not in exits, f"errors.md gives {code} two exit codes"
                exits[code] = number
    return {code: exits.get(code, 1) for code in CLIENT_CODES}


DOCUMENTED_EXIT = _documented_exit_codes()


def test_readme_names_what_these_tests_read() -> None:
    """Guards the parsing above: each list the docs give was found, and whole."""
    assert PROTOCOL_CODES[0] == "conflict" and len(PROTOCOL_CODES) == 13
    assert HTTP_STATUS["conflict"] == HTTP_STATUS["lease_lost"] == 409
    assert HTTP_STATUS["unauthenticated"] == 401 and HTTP_STATUS["internal"] == 500
    assert DOCUMENTED_EXIT["lease_held"] == 3 and DOCUMENTED_EXIT["no_space"] == 6
    assert DOCUMENTED_EXIT["mirror_failed"] == 7
    assert DOCUMENTED_EXIT["busy"] == DOCUMENTED_EXIT["connection"] == 1


# -- the table ---------------------------------------------------------------------------


def test_every_code_has_a_row_for_each_edge_it_reaches() -> None:
    """A daemon's code reaches every edge; an HTTP listener's own code only HTTP; the
    client's own code only the CLI and the MCP tools."""
    assert {kind.raised_by for kind in ERRORS.values()} == {"daemon", "http", "client"}
    for code, kind in ERRORS.items():
        assert kind.code == code
        over_http = kind.raised_by in ("daemon", "http")
        in_client = kind.raised_by in ("daemon", "client")
        assert (kind.status is not None, bool(kind.title)) == (over_http, over_http), code
        assert (kind.exit_code is not None, bool(kind.for_model)) == (in_client, in_client), code
        if kind.for_model:
            assert kind.for_model.count("{message}") == 1, code
            assert "<x>" in kind.model_text("<x>")


def test_the_table_is_the_docs() -> None:
    assert [code for code, kind in ERRORS.items() if kind.raised_by == "daemon"] \
        == PROTOCOL_CODES
    assert {code: kind.status for code, kind in ERRORS.items() if kind.status is not None} \
        == HTTP_STATUS
    assert {code: kind.exit_code for code, kind in ERRORS.items()
            if kind.exit_code is not None} == DOCUMENTED_EXIT


# -- exception class -> code --------------------------------------------------------------

LAST = LastWrite("bob", 1_700_000_000.0)
# Each exception class the engine, the memory model and the jail define, an instance,
# and the code the docs give it (None: an internal failure, logged and answered internal).
RAISED: list[tuple[BaseException, str | None]] = [
    (MemfsError("the jail is not running"), None),
    # search or a sed edit where the kernel lacks what the jail needs
    (Unavailable("this kernel lacks Landlock; enable it"), "unavailable"),
    (InvalidInput("bad path"), "invalid"),  # "2 bad usage or invalid input (bad path"
    (TooLarge("over the limit"), "too_large"),
    (PermissionDenied("read-only"), "permission_denied"),
    # "without it: `permission_denied` with `details` `{"agent_required": true}`"
    (AgentRequired(), "permission_denied"),
    (NotFound("no such file"), "not_found"),
    # a component is a file: nothing is below it (a change that would make it: taken)
    (NotAFolder("'a.md' is a file, not a folder"), "not_found"),
    (PathTaken("notes/a.md/x cannot be made"), "conflict"),
    (NoSpace("the disk is full"), "no_space"),
    (Conflict("notes/a.md", "ab" * 32, "cd" * 32, LAST, "alice"), "conflict"),
    # a failed If-Match / If-None-Match: a conflict, which HTTP answers 412
    (ConditionFailed("notes/a.md", "ab" * 32, "cd" * 32, LAST, "alice"), "conflict"),
    (LeaseHeld("t1", "bob", "2026-01-01T00:00:00Z"), "lease_held"),
    (LeaseLost("t1", "lost it", "bob"), "lease_lost"),
    (AlreadyExists("task t1 exists"), "conflict"),  # a taken name, as a file created first
    (Closed("task t1 is done"), "closed"),  # "3 conflict (also ... `closed`)"
    (HistoryError("the repository is corrupt"), None),  # rebuilt at start: internal
    (HistoryFull("no space for history"), "no_space"),
    (JailError("the launcher died"), None),
    (JailUnavailable("no sed root"), "internal"),
    # at start only: the daemon serves on, refusing search and sed edits as unavailable
    (KernelLacks("no Landlock"), "internal"),
    (BadArguments("rg flag --pre refused"), "invalid"),  # "refused rg flag or sed script"
    (JailLimit("timed out"), "invalid"),
    (JailBusy("4 runs at once"), "busy"),  # "a limit ... (jailed tool runs) is reached"
    (ToolFailed("rg exited 2", 2, "oops"), "invalid"),
    (MirrorFailed("store notes: mirror /srv/notes.git is down", []), "mirror_failed"),
    (RestoreError("cannot write a.md"), None),  # at start only: the daemon does not start
]


def test_every_exception_raised_on_purpose_is_sampled_above() -> None:
    defined = {
        value for module in (memfs.store.errors, memfs.memory.errors, memfs.store.history.repo,
                             memfs.store.history.mirror, memfs.store.history.restore,
                             memfs.jail.errors)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    }
    assert defined | {MemfsError, Unavailable} == {type(error) for error, _ in RAISED}


@pytest.mark.parametrize(("error", "code"), RAISED, ids=lambda v: type(v).__name__)
def test_each_exception_maps_to_its_code(error: BaseException, code: str | None) -> None:
    described = describe(error)
    if code is None:
        assert described is None
        return
    assert described is not None
    assert described[:2] == (code, str(error))


def test_the_details_of_a_conflict_a_lease_and_a_missing_agent() -> None:
    conflict = describe(Conflict("notes/a.md", "ab" * 32, "absent", LAST, "alice"))
    assert conflict is not None and conflict[2] == {
        "path": "notes/a.md", "current_digest": "ab" * 32, "seen_digest": None,
        "seen_absent": True, "last_writer": "bob", "last_written_at": LAST.at}
    held = describe(LeaseHeld("t1", "bob", "2026-01-01T00:00:00Z"))
    assert held is not None and held[2] == {"task": "t1", "holder": "bob",
                                            "expires_at": "2026-01-01T00:00:00Z"}
    named = describe(AgentRequired())
    assert named is not None and named[2] == {"agent_required": True}


def test_a_protocol_error_keeps_its_own_code() -> None:
    assert describe(p.ProtocolError("too_large", "line too long")) == (
        "too_large", "line too long", {})


# -- the views ---------------------------------------------------------------------------


def test_the_wire_knows_readmes_codes_and_no_other() -> None:
    assert tuple(PROTOCOL_CODES) == p.ERROR_CODES
    for code in PROTOCOL_CODES:
        assert json.loads(p.encode_error(1, code, "m"))["error"]["code"] == code
    with pytest.raises(p.EncodeError):
        p.encode_error(1, "unauthenticated", "HTTP's own code")


@pytest.mark.parametrize(("code", "status"), sorted(HTTP_STATUS.items()))
def test_problem_details_carry_readmes_status(code: str, status: int) -> None:
    response = problem(code, "the detail", {"k": 1})
    body = json.loads(bytes(response.body))
    assert response.status_code == status == STATUS[code]
    assert response.media_type == "application/problem+json"
    assert body == {"type": f"urn:memfs:problem:{code}", "title": TITLES[code],
                    "status": status, "detail": "the detail", "code": code,
                    "details": {"k": 1}}
    assert ("Retry-After" in response.headers) == (code == "busy")
    if code == "no_space":
        assert body["title"] == "Insufficient storage"  # "507 `no_space` (Insufficient Storage)"


def test_a_failed_precondition_is_412() -> None:
    response = problem("conflict", "changed", status=412)
    assert json.loads(bytes(response.body))["title"] == "Precondition failed"


def test_openapi_names_every_code_http_answers() -> None:
    schema = document()["components"]["schemas"]["Problem"]
    assert set(schema["properties"]["code"]["enum"]) == set(HTTP_STATUS)


def test_every_operation_documents_each_error_with_its_problem_types() -> None:
    """431 (head_too_large) on every operation; each error status with the codes of
    its rows; a HEAD's errors without a body; 502 where a mirror push may fail."""
    for path, operations in document()["paths"].items():
        for method, operation in operations.items():
            errors = {status: answer for status, answer in operation["responses"].items()
                      if int(status) >= 400}
            assert {"400", "401", "404", "431", "500", "503"} <= set(errors), (path, method)
            assert ("502" in errors) == (path == "/v1/mirrors/push")
            for status, answer in errors.items():
                if method == "head":
                    assert "content" not in answer, (path, status)
                    continue
                schema = answer["content"]["application/problem+json"]["schema"]
                codes = schema["allOf"][1]["properties"]["code"]["enum"]
                expected = ["conflict"] if status == "412" else \
                    [code for code, number in HTTP_STATUS.items() if number == int(status)]
                assert sorted(codes) == sorted(expected), (path, method, status)


@pytest.mark.parametrize("code", CLIENT_CODES)
def test_the_client_raises_one_class_per_code(code: str) -> None:
    cls = c._BY_CODE[code]
    assert cls.code == code and issubclass(cls, c.MemfsClientError)
    assert cls is not c.MemfsClientError


def test_the_client_knows_no_code_but_these() -> None:
    # and the HTTP listener's refusal of a token, met with --url (an "other error", 1)
    assert set(c._BY_CODE) == {*CLIENT_CODES, "unauthenticated"}
    assert cli.EXIT_BY_CODE.get("unauthenticated", EXIT_ERROR) == EXIT_ERROR


@pytest.mark.parametrize("code", CLIENT_CODES)
def test_cli_exit_code_is_readmes(code: str) -> None:
    assert cli.EXIT_BY_CODE.get(code, EXIT_ERROR) == DOCUMENTED_EXIT[code]


# What a model reads for each code: these texts are what the MCP tools said before the
# table (docs/reference/mcp.md: "lease errors read LEASE HELD / LEASE LOST").
MODEL_TEXT = {
    "lease_held": "LEASE HELD: M. Nothing was changed.",
    "lease_lost": "LEASE LOST: M. Stop working on this task; task_list shows who holds it now.",
    "permission_denied": "Permission denied: M. Your stores and their access are listed in "
                         "this server's instructions; storage_list shows what you can read.",
    "not_found": "Not found: M. Paths are STORE/PATH (e.g. notes/todo.md); use storage_list "
                 "to see existing files.",
    "invalid": "Invalid request: M",
    "too_large": "Invalid request: M",
    "busy": "memfs is busy: M. Nothing was done; wait a moment and retry the same call.",
    "no_space": "The memory's disk is full; nothing was changed; free space or ask the "
                "operator, then retry. (M)",
    "internal": "memfs internal error: M",
    "connection": "memfs is unreachable: M",
    "mirror_failed": "A mirror push failed: M. The memory itself is unchanged; tell the "
                     "operator.",
}


def _outcome(error: c.MemfsClientError, verb: str) -> ToolOutcome:
    def body() -> ToolOutcome:
        raise error

    return StorageTools(Connection("/nonexistent"))._guard(body, path="notes/a.md", verb=verb)


@pytest.mark.parametrize("code", sorted(MODEL_TEXT))
def test_the_model_reads_each_codes_text(code: str) -> None:
    outcome = _outcome(c._BY_CODE[code]("M", {"task": "t1"}), "read")
    assert outcome.is_error and outcome.text == MODEL_TEXT[code]
    assert outcome.meta == ({"lease": {"task": "t1"}} if code.startswith("lease") else {})


def test_the_model_reads_a_conflict_with_who_and_what_next() -> None:
    details = {"path": "notes/a.md", "current_digest": "ab" * 32, "seen_digest": "cd" * 32,
               "seen_absent": False, "last_writer": "bob", "last_written_at": LAST.at}
    outcome = _outcome(c.ConflictError("changed", details), "write")
    assert outcome.is_error and outcome.meta == {"conflict": details}
    assert outcome.text == (
        'CONFLICT: your write was NOT applied: "notes/a.md" was changed by "bob" at '
        "2023-11-14 22:13:20 UTC, after you last read it. To keep both changes: read it "
        "again (storage_read), redo your change on the current content, then retry. Use "
        "force=true only if you deliberately want to overwrite the other agent's changes.")


def test_a_broken_write_tells_the_model_to_check_before_retrying() -> None:
    text = _outcome(c.ConnectionFailed("the daemon closed the connection"), "upload").text
    assert text == ("memfs is unreachable: the daemon closed the connection. If the "
                    "connection broke during the call the change may or may not have been "
                    "applied: storage_read the file to check before retrying.")


def test_a_message_is_escaped_for_the_model() -> None:
    assert _outcome(c.NotFoundError("no\nline"), "read").text.startswith(
        "Not found: no\\nline.")
