"""The reference pages written by hand (docs/reference/config.md, cli.md, protocol.md,
http.md) are checked against the code they describe, both ways: what the code takes
is on the page, and what the page names is in the code. Each check is a function of
the page's text returning its problems, one line each naming the key, command, op or
route, so that a planted mistake (the tests at the end) shows it can fail.

* config.md: its TOML example against memfs/config.py's pydantic models. Every key of
  every model is in the example (a commented-out line counts: ``# owner = 1000``);
  the example, as TOML, is a valid config, its commented alternatives too; an
  uncommented value is the key's default unless the key is in ``ILLUSTRATIVE``.
* cli.md: its table against memfs/cli's argparse parser: every command, action and
  option (global ones in the prose after the table), and nothing the parser lacks.
* protocol.md: every op of the registry is named; a field the page lists after an op
  (``read`` (``offset``, ...)) is a field of that op's request model.
* http.md: its endpoint table against the OpenAPI document: every path and method,
  no route that neither the document nor the app (app.py's own routes) has, and no
  query parameter (``?n=``) that the document does not give the route.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import re
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from memfs.config import Config, ConfigError, parse_config
from tests.support import REPO

PAGES = REPO / "docs" / "reference"


def page(name: str) -> str:
    return (PAGES / name).read_text()


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def table_rows(text: str) -> list[tuple[str, str]]:
    """The (first cell, rest) of each row of the page's first table, header excluded
    (a cell may hold ``\\|``)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        rows.append((cells[0].strip(), "|".join(cells[1:])))
    return rows[1:]


# -- config.md -------------------------------------------------------------------------

# keys whose value in the example is an illustration, not the default
ILLUSTRATIVE = frozenset({"delegates", "stores.*.description", "stores.*.structured",
                          "stores.*.mirror", "agents.*.stores", "agents.*.email"})


def _submodel(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field's annotation holds (a table), and whether it is keyed by a
    name (``dict[str, Model]``: ``stores.NAME``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and args:
        model, _ = _submodel(args[1])
        return model, model is not None
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            model, keyed = _submodel(arg)
            if model is not None:
                return model, keyed
    return None, False


def code_keys(model: type[BaseModel] = Config, prefix: str = "") -> set[str]:
    """Every key the config accepts, ``stores.*.history`` for a named table's."""
    keys = set()
    for name, field in model.model_fields.items():
        keys.add(prefix + name)
        sub, keyed = _submodel(field.annotation)
        if sub is not None:
            keys |= code_keys(sub, f"{prefix}{name}.{'*.' if keyed else ''}")
    return keys


def page_keys(data: Mapping[str, Any], model: type[BaseModel] = Config,
              prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(key, value, the model's field or None) for every key of a TOML document,
    named tables' keys as ``stores.*.history``."""
    for name, value in data.items():
        field = model.model_fields.get(name)
        yield prefix + name, value, field
        sub, keyed = _submodel(field.annotation) if field is not None else (None, False)
        if sub is None or not isinstance(value, Mapping):
            continue
        if keyed:
            for table in value.values():
                if isinstance(table, Mapping):
                    yield from page_keys(table, sub, f"{prefix}{name}.*.")
        else:
            yield from page_keys(value, sub, f"{prefix}{name}.")


def config_example(text: str) -> tuple[dict[str, Any], list[tuple[list[str], dict[str, Any]]]]:
    """The page's TOML example: the document its uncommented lines make, and each
    commented-out line that is TOML (``# key = value``) with the table it sits in
    (a commented ``# [table]`` header counts). A comment that is not TOML is prose."""
    found = re.search(r"```toml\n(.*?)```", text, re.S)
    assert found, "config.md: no ```toml example"
    block = found.group(1)
    commented: list[tuple[list[str], dict[str, Any]]] = []
    table: list[str] = []
    for line in block.splitlines():
        header = re.match(r"^(?:#\s*)?\[([\w.-]+)\]\s*(?:#.*)?$", line)
        if header:
            table = header.group(1).split(".")
            continue
        if re.match(r"^#\s*[\w-]+\s*=", line):
            with contextlib.suppress(tomllib.TOMLDecodeError):
                commented.append((table, tomllib.loads(line.lstrip("# "))))
    return tomllib.loads(block), commented


def _set(document: dict[str, Any], table: list[str], values: Mapping[str, Any]) -> None:
    for name in table:
        document = document.setdefault(name, {})
    document.update(values)


def _default(field: Any) -> Any:
    value = field.get_default(call_default_factory=True)
    return str(value) if isinstance(value, Path) else value


def config_problems(text: str) -> list[str]:
    document, commented = config_example(text)
    problems = []
    documented = set()
    for key, value, field in page_keys(document):
        documented.add(key)
        if field is None:
            problems.append(f"config.md documents {key}, which config.py does not take")
        elif (key not in ILLUSTRATIVE and not field.is_required()
              and _submodel(field.annotation)[0] is None and value != _default(field)):
            problems.append(f"config.md gives {key} = {value!r}, config.py's default is "
                            f"{_default(field)!r}")
    alternatives = copy.deepcopy(document)
    for table, values in commented:
        nested: dict[str, Any] = {}
        _set(nested, table, values)
        for key, _value, field in page_keys(nested):
            documented.add(key)
            if field is None:
                problems.append(f"config.md documents {key} (commented out), which "
                                "config.py does not take")
        _set(alternatives, table, values)
    problems += [f"config.md does not document {key}" for key in
                 sorted(code_keys() - documented)]
    # the example is a config; its commented alternatives are too (model_validate: its
    # checks across keys would refuse personal mode beside [agents], both shown)
    try:
        parse_config(document, "config.md's example")
    except ConfigError as error:
        problems.append(f"config.md's example is not a valid config: {error}")
    try:
        Config.model_validate(alternatives)
    except ValidationError as error:
        problems.append(f"config.md's commented alternatives are not valid: {error}")
    return problems


def test_config_page_documents_every_key_and_no_other() -> None:
    assert config_problems(page("config.md")) == []


def test_config_check_finds_a_missing_key_a_stray_one_and_a_wrong_default() -> None:
    text = page("config.md")
    assert "max_jail_runs = 4 " in text and "# sed_root = " in text
    missing = text.replace("max_jail_runs = 4 ", "", 1)
    assert "config.md does not document limits.max_jail_runs" in config_problems(missing)
    commented = text.replace("# sed_root = ", "# sed_rot = ", 1)
    assert config_problems(commented)[:2] == [
        "config.md documents jail.sed_rot (commented out), which config.py does not take",
        "config.md does not document jail.sed_root"]
    default = text.replace("max_jail_runs = 4 ", "max_jail_runs = 5 ", 1)
    assert config_problems(default) == [
        "config.md gives limits.max_jail_runs = 5, config.py's default is 4"]
    invalid = text.replace('listen = "127.0.0.1:7800"', 'listen = "0.0.0.0:7800"', 1)
    assert any("not a loopback address" in problem for problem in config_problems(invalid))


# -- cli.md ----------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions if action.help != argparse.SUPPRESS
            for option in action.option_strings} - {"-h", "--help"}


def _option_actions(*parsers: argparse.ArgumentParser) -> set[tuple[str, ...]]:
    """Each option of ``parsers`` as its spellings (``("-p", "--patch")``)."""
    return {tuple(action.option_strings) for parser in parsers for action in parser._actions
            if action.option_strings and action.help != argparse.SUPPRESS
            and "-h" not in action.option_strings}


def cli_problems(text: str) -> list[str]:
    from memfs.cli import _parser

    root = _parser()
    commands = _subparsers(root)
    global_options = _options(root)
    table, _, prose = text.partition("\n\n")[2].partition("\n\n")
    rows = table_rows(table)
    problems = []
    for option in sorted(global_options - {"--version"}):
        if f"`{option}" not in prose:
            problems.append(f"cli.md's global options do not name {option}")
    for name, command in commands.items():
        mine = [(first, rest) for first, rest in rows
                if re.search(rf"`memfs {re.escape(name)}\b", first)]
        if not mine:
            problems.append(f"cli.md has no row for memfs {name}")
            continue
        text_of = " ".join(first + " " + rest for first, rest in mine)
        actions = _subparsers(command)
        for action in actions:
            if not any(re.search(rf"`(memfs {name} )?{action}\b", first) for first, _ in mine):
                problems.append(f"cli.md does not name memfs {name} {action}")
        for spellings in sorted(_option_actions(command, *actions.values())):
            if set(spellings) & global_options:
                continue  # said once, after the table
            if not any(re.search(rf"{re.escape(option)}(?![\w-])", text_of)
                       for option in spellings):  # -p or --patch: either will do
                problems.append(f"cli.md does not name memfs {name} {spellings[-1]}")
    for first, _ in rows:  # what the table names exists
        name = ""
        for span in code_spans(first):
            words = span.split()
            if words[0] == "memfs":
                name, words = words[1], words[2:]
                if name not in commands:
                    problems.append(f"cli.md names memfs {name}, which is no command")
                    break
            if name not in commands:
                continue
            command = commands[name]
            actions = _subparsers(command)
            if actions and words and re.fullmatch(r"[a-z]+", words[0]):
                if words[0] not in actions:
                    problems.append(f"cli.md names memfs {name} {words[0]}, which is no "
                                    "action of it")
                    continue
                command = actions[words[0]]
            known = _options(command) | global_options | {
                option for sub in actions.values() for option in _options(sub)}
            for word in words:
                found = re.match(r"^\[?(--?[A-Za-z][\w-]*)", word)
                if found and found.group(1) not in known:
                    problems.append(f"cli.md names memfs {name} {found.group(1)}, which "
                                    "it does not take")
    return problems


def test_cli_page_names_every_command_and_option_and_no_other() -> None:
    assert cli_problems(page("cli.md")) == []


def test_cli_check_finds_a_missing_command_option_and_a_stray_one() -> None:
    text = page("cli.md")
    row = next(line for line in text.splitlines() if line.startswith("| `memfs summary"))
    assert "cli.md has no row for memfs summary" in cli_problems(text.replace(row + "\n", ""))
    assert cli_problems(text.replace("--append", "--apend")) == [
        "cli.md does not name memfs write --append",
        "cli.md names memfs write --apend, which it does not take"]
    assert cli_problems(text.replace("`memfs brief [STORE]", "`memfs brief [--all]", 1)) == [
        "cli.md names memfs brief --all, which it does not take"]
    assert cli_problems(text.replace("`memfs reindex [STORE]", "`memfs reindx [STORE]", 1)
                        )[-1] == "cli.md names memfs reindx, which is no command"


# -- protocol.md -----------------------------------------------------------------------


def protocol_problems(text: str) -> list[str]:
    from memfs.control.ops.registry import ops

    declared = ops()
    named = set(code_spans(text))
    problems = [f"protocol.md does not name the op {name}" for name in declared
                if name not in named]
    for name, fields in re.findall(r"`(\w+)`\s*\(([^()]*)\)", text):
        if name not in declared:
            continue
        model = declared[name].request.model_fields
        for field in re.findall(r"`([a-z_0-9]+)`", fields):  # `REV`: a placeholder
            if field not in declared and field not in model:
                problems.append(f"protocol.md lists {field} for the op {name}, whose "
                                "request has no such field")
    return problems


def test_protocol_page_names_every_op_with_its_fields() -> None:
    assert protocol_problems(page("protocol.md")) == []


def test_protocol_check_finds_a_missing_op_and_a_stray_field() -> None:
    text = page("protocol.md")
    assert protocol_problems(text.replace("`task_release`", "task_release")) == [
        "protocol.md does not name the op task_release"]
    assert protocol_problems(text.replace("`query`, `store`", "`query`, `shop`", 1)) == [
        "protocol.md lists shop for the op recall, whose request has no such field"]


# -- http.md ---------------------------------------------------------------------------

METHODS = ("get", "put", "post", "patch", "delete")


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def page_endpoints(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(method, path shape, query parameters) of each endpoint the table names:
    ``GET\\|POST`` for two methods, ``.../x`` for a path under /v1/stores/{store},
    ``a\\|b`` in the last segment for several, ``{}`` for any path parameter, the names
    of ``?a=A&b=`` (``[&b=B]`` too) as its query parameters."""
    endpoints = []
    for first, _ in table_rows(text):
        for span in code_spans(first):
            found = re.match(r"^([A-Z\\|]+) (\S+)$", span)
            if not found:
                continue
            methods = found.group(1).split("\\|")
            path, _, query = found.group(2).partition("?")
            names = tuple(re.findall(r"(?:^|[&\[])(\w+)=", query))
            path = path.replace("...", "/v1/stores/{store}", 1)
            head, _, last = path.rpartition("/")
            for method in methods:
                for segment in last.split("\\|"):
                    endpoints.append((method.lower(), _shape(f"{head}/{segment}"), names))
    return endpoints


def _query_names(spec: Mapping[str, Any]) -> set[str]:
    """The query parameters of an OpenAPI operation (an object one's properties)."""
    names = set()
    for parameter in spec.get("parameters", []):
        if parameter.get("in") == "query":
            names.add(parameter["name"])
            names |= set(parameter.get("schema", {}).get("properties", {}))
    return names


def http_problems(text: str) -> list[str]:
    from memfs.control.http.app import MCP, PUBLIC
    from memfs.control.http.openapi import document

    query = {(method, _shape(path)): _query_names(spec)
             for path, operations in document()["paths"].items()
             for method, spec in operations.items() if method in METHODS}
    own = {("get", path) for path in PUBLIC | {"/metrics"}} | {
        (method, MCP) for method in ("get", "post", "delete")}
    named = page_endpoints(text)
    problems = [f"http.md does not name {method.upper()} {path}" for method, path
                in sorted(set(query) - {(method, path) for method, path, _ in named})]
    for method, path, names in named:
        if (method, path) not in set(query) | own:
            problems.append(f"http.md names {method.upper()} {path}, which the daemon "
                            "does not serve")
        problems += [f"http.md names ?{name}= for {method.upper()} {path}, which takes no "
                     "such query parameter" for name in names
                     if name not in query.get((method, path), set())]
    return problems


def test_http_page_names_every_route_and_no_other() -> None:
    assert http_problems(page("http.md")) == []


def test_http_check_finds_a_missing_route_and_a_stray_one() -> None:
    text = page("http.md")
    row = next(line for line in text.splitlines() if line.startswith("| `GET .../brief`"))
    assert http_problems(text.replace(row + "\n", "")) == [
        "http.md does not name GET /v1/stores/{}/brief"]
    assert http_problems(text.replace("complete\\|release`", "complete\\|drop`", 1)) == [
        "http.md does not name POST /v1/stores/{}/tasks/{}/release",
        "http.md names POST /v1/stores/{}/tasks/{}/drop, which the daemon does not serve"]
    assert http_problems(text.replace("&author=&patch=", "&by=&patch=", 1)) == [
        "http.md names ?by= for GET /v1/stores/{}/history, which takes no such query "
        "parameter"]
