"""The start-up-friendly JSON codec agrees with the stdlib json module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memfs.control.client import jsonlite as jsonlite

VALUES = [
    {"op": "read", "id": 1, "path": "notes/é/ü.md", "limit": None, "force": False},
    {"nested": [1, 2.5, -3, True, None, {"a": [], "b": {}}], "big": 2**70},
    "line\nbreak \"quoted\" \\ tab\t nul\x00 emoji 😀",
    [],
    0,
    -1.25e-7,
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_matches_stdlib(value: object) -> None:
    assert jsonlite.dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("value", VALUES)
def test_loads_round_trips(value: object) -> None:
    text = json.dumps(value)
    assert jsonlite.loads(text) == json.loads(text)
    assert jsonlite.loads(text + "\n") == value


@pytest.mark.parametrize("bad", ["", "{", "[1,]", "{'a': 1}", "NaN", "1 2", '"\\x"', "tru"])
def test_loads_rejects_what_stdlib_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        json.loads(bad, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    with pytest.raises(ValueError):
        jsonlite.loads(bad)


def test_dumps_refuses_unknown_types() -> None:
    with pytest.raises(TypeError):
        jsonlite.dumps({"x": object()})


def test_cli_client_path_imports_neither_json_nor_re_nor_argparse() -> None:
    code = ("import sys, memfs.cli; sys.exit(sorted({'json', 're', 'argparse', 'enum'}"
            " & set(sys.modules)) or 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "text", ["", "plain", "line\nbreak \"q\" \\ tab\t nul\x00 \x1b", "caf\u00e9 \U0001f600"])
def test_string_length_is_that_of_the_dumped_string(text: str) -> None:
    assert jsonlite.string_length(text) == len(json.dumps(text, ensure_ascii=False))
