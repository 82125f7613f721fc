"""The official MCP conformance suite (``@modelcontextprotocol/conformance`` 0.1.16,
under Node 22 in ``.node-conformance``, installed by ``scripts/setup --test``) against
the daemon's ``/mcp``: every server scenario that applies to memfs passes.

The suite's client sends no bearer token (it takes a URL only), so it talks to a small
proxy in this test that adds the token of an agent to each request and passes
everything else through unchanged, streamed both ways (the SSE streams included); a
Host or Origin on the proxy's port is put on the daemon's (the same name), any other is
kept (the dns-rebinding-protection scenario sends bad ones on purpose).

The scenarios that do not apply, each with the reason, are NOT_APPLICABLE: they call
the reference server's own test_* tools, prompts and resources (test_simple_text,
test_prompt_with_arguments, test://static-text ...), which a memory server does not
have; or features memfs does not offer (completions, logging). The suite's client
speaks HTTP only: stdio is covered by the SDK tests (tests/control/mcp).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control.http.conftest import http_config
from tests.support import REPO, UID_A, Daemon, connect_as

NODE_BIN = REPO / ".node-conformance" / "node_modules" / ".bin"
SUITE = "@modelcontextprotocol/conformance 0.1.16"

NOT_APPLICABLE = {
    # the reference server's fixtures: tools memfs does not have
    "tools-call-simple-text": "calls the reference tool test_simple_text",
    "tools-call-image": "calls the reference tool test_image_content",
    "tools-call-audio": "calls the reference tool test_audio_content",
    "tools-call-embedded-resource": "calls the reference tool test_embedded_resource",
    "tools-call-mixed-content": "calls the reference tool test_multiple_content_types",
    "tools-call-with-logging": "calls the reference tool test_tool_with_logging",
    "tools-call-error": "calls the reference tool test_error_handling",
    "tools-call-with-progress": "calls the reference tool test_tool_with_progress",
    "tools-call-sampling": "calls the reference tool test_sampling (memfs never samples)",
    "tools-call-elicitation": "calls the reference tool test_elicitation (memfs never "
                              "elicits)",
    "elicitation-sep1034-defaults": "calls the reference tool "
                                    "test_elicitation_sep1034_defaults",
    "elicitation-sep1330-enums": "calls the reference tool test_elicitation_sep1330_enums",
    "json-schema-2020-12": "lists the reference tool json_schema_2020_12_tool",
    "server-sse-polling": "calls the reference tool test_reconnection",
    "server-sse-multiple-streams": "calls the reference tool test_reconnection",
    # the reference server's fixtures: resources and prompts memfs does not have
    "resources-read-text": "reads the reference resource test://static-text",
    "resources-read-binary": "reads the reference resource test://static-binary",
    "resources-templates-read": "reads the reference template test://template/{id}/data",
    "resources-subscribe": "subscribes to the reference resource test://watched-resource",
    "resources-unsubscribe": "unsubscribes from the reference resource "
                             "test://watched-resource",
    "prompts-get-simple": "gets the reference prompt test_simple_prompt",
    "prompts-get-with-args": "gets the reference prompt test_prompt_with_arguments",
    "prompts-get-embedded-resource": "gets the reference prompt "
                                     "test_prompt_with_embedded_resource",
    "prompts-get-with-image": "gets the reference prompt test_prompt_with_image",
    # features memfs does not offer (and does not advertise)
    "completion-complete": "completions: memfs has no argument to complete",
    "logging-set-level": "logging: memfs sends no log messages to clients",
}


class TokenProxy:
    """A TCP proxy in front of the daemon's HTTP listener that adds ``Authorization:
    Bearer TOKEN`` to each request (HTTP/1.1, keep-alive, bodies by Content-Length or
    chunked) and relays the answers as they come."""

    def __init__(self, upstream: tuple[str, int], token: str) -> None:
        self.upstream = upstream
        self.token = token
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        server = socket.create_connection(self.upstream)
        threading.Thread(target=self._relay, args=(server, client), daemon=True).start()
        reader = client.makefile("rb")
        try:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                server.sendall(self._rewrite(head))
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if length:
                    server.sendall(reader.read(int(length.group(1))))
                elif re.search(rb"(?im)^transfer-encoding:\s*chunked", head):
                    while True:
                        size_line = reader.readline()
                        server.sendall(size_line)
                        size = int(size_line.split(b";")[0], 16)
                        server.sendall(reader.read(size + 2))
                        if size == 0:
                            break
        except (OSError, ValueError):
            pass
        finally:
            for end in (client, server):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def _rewrite(self, head: bytes) -> bytes:
        lines = head.split(b"\r\n")
        kept = [line for line in lines[1:] if line and not line.lower().startswith(
            b"authorization:")]
        fixed = []
        for line in kept:
            name, _, value = line.partition(b":")
            if name.strip().lower() in (b"host", b"origin") and value.strip().endswith(
                    b":%d" % self.port):
                # the same name, on the daemon's port: as if the client came straight
                value = value.strip()[:-len(b"%d" % self.port)] + b"%d" % self.upstream[1]
                line = name + b": " + value
            fixed.append(line)
        auth = b"Authorization: Bearer " + self.token.encode()
        return b"\r\n".join([lines[0], *fixed, auth, b"", b""])

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


def scenarios() -> list[str]:
    """The suite's server scenarios, as it lists them."""
    listed = subprocess.run([str(NODE_BIN / "conformance"), "list", "--server"],
                            capture_output=True, text=True, timeout=120, env=env(),
                            check=True).stdout
    return re.findall(r"^\s*- (\S+)", listed, re.M)


def env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{NODE_BIN}:{os.environ['PATH']}"}


@pytest.fixture(scope="module")
def proxy() -> Iterator[TokenProxy]:
    if not (NODE_BIN / "conformance").exists():
        pytest.fail(f"{SUITE} is not installed: run scripts/setup --test")
    with Daemon(http_config("memfs-conformance-")) as daemon:
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/conformance.md", "a note\n")
        host, _, port = daemon.http_url.removeprefix("http://").rpartition(":")
        running = TokenProxy((host, int(port)), daemon.token("alice", "--label",
                                                             "conformance"))
        yield running
        running.close()
        assert "Traceback" not in daemon.log()


def test_the_not_applicable_scenarios_are_the_suites() -> None:
    """Each scenario left out is one the suite has (none invented, none renamed)."""
    assert set(NOT_APPLICABLE) <= set(scenarios())


APPLICABLE = ("server-initialize", "ping", "tools-list", "resources-list", "prompts-list",
              "dns-rebinding-protection")


@pytest.mark.parametrize("scenario", APPLICABLE)
def test_scenario_passes(proxy: TokenProxy, scenario: str, tmp_path: Path) -> None:
    done = subprocess.run([str(NODE_BIN / "conformance"), "server", "--url", proxy.url,
                           "--scenario", scenario, "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env())
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    checks = [check for path in tmp_path.rglob("checks.json")
              for check in json.loads(path.read_text())]
    statuses = {check["status"] for check in checks}
    assert "SUCCESS" in statuses and "FAILURE" not in statuses, report


def test_every_applicable_scenario_is_run() -> None:
    """A scenario the suite adds is either run above or left out with its reason."""
    assert set(scenarios()) == set(APPLICABLE) | set(NOT_APPLICABLE)
