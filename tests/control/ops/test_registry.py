"""The op registry and the dispatcher without a daemon: every op declared once, and
what derives from the declarations (the codec, in-process requests, REST routes,
operator checks) agrees with them. The dispatcher runs on a real engine over a
temporary root, with no jail and no socket."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.config import parse_config
from memfs.control.http.op_routes import operations
from memfs.control.ops import registry
from memfs.control.ops.dispatcher import Dispatcher
from memfs.control.protocol import ProtocolError
from memfs.store.engine import Engine
from memfs.store.errors import PermissionDenied
from tests.support import REPO, UID_A, UID_B, standard_config

# The list of ops of docs/reference/protocol.md ("The control protocol").
DOCUMENTED = {"list", "read", "stat", "write", "delete", "search", "whoami", "log", "show",
              "diff", "restore", "session_start", "session_checkpoint", "session_handoff",
              "session_list", "session_show", "brief", "task_add", "task_list", "task_show",
              "task_claim", "task_checkpoint", "task_complete", "task_release",
              "decision_record", "decision_list", "decision_show", "summary", "recall",
              "reindex",
              "token_create", "token_list", "token_revoke", "agent_list", "agent_rename",
              "agent_retire", "mirror_status", "mirror_push"}
OPERATOR = {"token_create", "token_list", "token_revoke", "agent_list", "agent_rename",
            "agent_retire"}


def test_every_documented_op_is_declared_once_with_its_own_model() -> None:
    ops = registry.ops()
    assert set(ops) == DOCUMENTED
    for name, declared in ops.items():
        assert declared.name == name
        assert declared.request.model_fields["op"].annotation.__args__ == (name,)
        assert declared.summary
    assert len({declared.request for declared in ops.values()}) == len(ops)
    assert {name for name, d in ops.items() if d.access == "operator"} == OPERATOR
    assert registry.agent_ops() == DOCUMENTED - OPERATOR


def test_the_protocol_page_names_every_op() -> None:
    """docs/reference/protocol.md's "Ops: ..." sentence names each op of the registry."""
    text = " ".join((REPO / "docs" / "reference" / "protocol.md").read_text().split())
    ops = text[text.index("Ops: `"):text.index("Error codes: `")]
    assert set(re.findall(r"`([a-z_]+)`", ops)) >= DOCUMENTED


def test_the_codec_decodes_every_op_and_refuses_others() -> None:
    for name in registry.ops():
        fields = {"task": "t", "session": "2026-11-30-alice-a91f",
                  "decision": "2026-11-30-use-sqlite", "path": "notes/a",
                  "rev": "HEAD", "args": ["x"], "content": "c", "note": "n", "summary": "s",
                  "next": "n", "title": "t", "reason": "r", "agent": "a", "token": "t",
                  "query": "q", "new": "b"}
        model = registry.op(name).request
        given = {k: v for k, v in fields.items() if k in model.model_fields}
        line = json.dumps({"op": name, "id": 1, **given}).encode()
        assert registry.decode_request(line).op == name
    with pytest.raises(ProtocolError, match="unknown op 'nope'"):
        registry.decode_request(b'{"op": "nope"}')
    with pytest.raises(ProtocolError, match="unknown op 'nope'"):
        registry.build_request("nope", {})


def test_build_request_converts_text_only_when_lax() -> None:
    lax = registry.build_request("session_list", {"limit": "3"}, lax=True)
    assert lax.limit == 3  # type: ignore[attr-defined]
    with pytest.raises(ProtocolError, match="limit"):
        registry.build_request("session_list", {"limit": "3"})


def test_rest_routes_are_the_declared_ones_and_their_parameters_are_fields() -> None:
    declared = {name for name, op in registry.ops().items() if op.rest is not None}
    routes = operations()
    assert {route.op for route in routes} == declared
    assert "task_show" in declared and "write" not in declared  # files: shaped by hand
    for route in routes:
        fields = registry.op(route.op).request.model_fields
        for param in route.params():
            assert param in fields or route.adjust is not None, (route.op, param)


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[Dispatcher]:
    config = standard_config(tmp_path)
    config["stores"]["team"] = {"structured": True}
    config["agents"]["alice"]["stores"]["team"] = "read_write"
    config["agents"]["bob"]["stores"]["team"] = "read_write"
    config["delegates"] = [UID_B]
    engine = Engine.of(parse_config(config))
    try:
        yield Dispatcher(engine)
    finally:
        engine.close()


def test_operator_ops_need_a_delegate_uid(dispatcher: Dispatcher) -> None:
    request = registry.build_request("agent_list", {})
    with pytest.raises(PermissionDenied, match=f"uid {UID_A} is not a delegate"):
        dispatcher.execute("", request, uid=UID_A)
    with pytest.raises(PermissionDenied):  # a transport that cannot name the uid
        dispatcher.execute("", request)
    agents = dispatcher.execute("", request, uid=UID_B)["agents"]
    assert {agent["agent"] for agent in agents} == {"alice", "bob", "carol"}


def test_a_forced_release_needs_a_delegate(dispatcher: Dispatcher) -> None:
    add = registry.build_request("task_add", {"task": "t1", "title": "One"})
    dispatcher.execute("alice", add)
    dispatcher.execute("alice", registry.build_request("task_claim", {"task": "t1"}))
    force = registry.build_request("task_release", {"task": "t1", "force": True})
    with pytest.raises(PermissionDenied, match="only a delegate"):
        dispatcher.execute("bob", force)
    released = dispatcher.execute("bob", force, delegate=True)
    assert released["status"] == "open"
    reply = json.loads(dispatcher.handle(UID_A, registry.build_request("whoami", {})))
    assert reply["ok"] and reply["result"]["agent"] == "alice"


def test_bytes_pass_in_process_and_never_on_the_wire() -> None:
    """In process (HTTP, the web view) a file's bytes go to and from the engine as
    they are; a line on the socket carries text or base64 only."""
    write = registry.build_request("write", {"path": "notes/a", "content": b"\xff\x00"})
    assert write.data() == b"\xff\x00"  # type: ignore[attr-defined]
    assert registry.build_request("read", {"path": "notes/a", "encoding": "bytes"})
    for op in ("read", "show"):
        line = json.dumps({"op": op, "path": "notes/a", "rev": "HEAD", "encoding": "bytes"})
        with pytest.raises(ProtocolError, match="encoding bytes is for in-process callers"):
            registry.decode_request(line.encode())
    wired = registry.decode_request(b'{"op": "write", "path": "notes/a", "content": "\\u00ff"}')
    assert wired.data() == "\xff".encode()  # type: ignore[attr-defined]


def test_an_in_process_read_returns_the_exact_bytes(dispatcher: Dispatcher) -> None:
    data = bytes(range(256))
    dispatcher.run("alice", "write", {"path": "notes/bin", "content": data})
    assert dispatcher.run("alice", "read", {"path": "notes/bin", "encoding": "bytes"}
                          )["content"] == data
    shown = dispatcher.run("alice", "read", {"path": "notes/bin", "encoding": "base64"})
    assert "content" not in shown and shown["content_b64"]
