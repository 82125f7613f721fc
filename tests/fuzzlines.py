"""A seeded generator of hostile control-protocol lines, for the fuzz tests.

Each line is bytes without its newline (the server splits on newlines, so a line
never holds one). Categories, mixed at random: valid ops with fields of the wrong
type, extreme numbers (also as raw literals past Python's int-parsing limit), unicode
edge cases (lone surrogates as JSON escapes, NUL, BOM, non-characters, astral), deep
nesting, binary garbage (invalid UTF-8, encoded surrogates), truncated lines and
byte-level mutations of valid requests. Same seed, same lines.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator

OPS = ["list", "read", "stat", "write", "delete", "search", "whoami", "log", "show", "diff",
       "restore", "session_start", "session_checkpoint", "session_handoff", "session_list",
       "brief", "task_add", "task_list", "task_claim", "task_complete", "decision_record",
       "decision_list"]
FIELDS = ["id", "op", "as_agent", "path", "patterns", "offset", "limit", "encoding",
          "content", "content_b64", "sed", "append", "force", "expect", "args", "rev",
          "since", "author", "patch", "store", "session", "note", "goal", "task", "title",
          "ttl", "decision", "reason", "max_bytes"]
REVS = ["HEAD", "HEAD~1", "main", "0" * 40, "nope", "HEAD..main", "-p", "1970-01-01"]
PATHS = ["notes/fuzz.md", "notes/a/b.md", "ops/x", "secret/s.txt", "notes", "/memory/notes/f",
         "notes/../ops/x", "notes/a\u0000b", "notes/" + "d/" * 70 + "x", "", "/", "notes/é ü",
         "notes/" + "x" * 300, "nope/x", "notes/.", "notes//x", "notes/\u202e.md"]
# Pieces spliced verbatim into JSON text: not all of them are valid JSON on their own.
RAW_VALUES = [
    "9" * 5000, "-" + "9" * 5000, "1" * 4301, "1e999999", "-1e-999999", "1." + "5" * 3000,
    "NaN", "Infinity", "-Infinity", "0", "-0", "1E+400", "18446744073709551616",
    "9223372036854775808", "-9223372036854775809", "123456789012345678901",
    '"\\ud800"', '"\\udcff"', '"\\udfff\\ud800"', '"a\\ud83d"', '"\\ud83d\\ude00"',
    '"\\u0000"', '"\\ufeff"', '"\\uffff"', '"\\ufffe"', '"\\\\"', '"\\"', "tru", "nul",
    "[", "{", "]", "}", '"', "''", "01", "+1", ".5", "0x10", "1_000",
]
SURROGATE_ESCAPES = ["\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ud83d"]
UNICODE = ["\u0000", "\u0001", "\u007f", "\u0085", "\u00a0", "\u200b", "\u202e", "\ufeff",
           "\uffff", "\U0001f600", "\U0010ffff", "é", "\u0301", "日本", "\n", "\r", "\t"]
GLOBS = ["**", "notes/**/*.md", "*/a.md", "[!a]*", "[z-a]", "[", "]", "**/**/**/**",
         "notes/" + "*a" * 12 + "*b", "*" * 1000, "?" * 300, "x" * 5000]
RG_ARGS = ["-i", "--pre=sh", "-e", "x", "--files", "-j", "999", "-C", "2", "/etc",
           "notes", "/memory", "../x", "--", "-", "-u", "--glob=**/x", "a\u0000b"]


def _text(rng: random.Random, limit: int = 40) -> str:
    parts = []
    for _ in range(rng.randint(0, 6)):
        roll = rng.random()
        if roll < 0.4:
            parts.append(rng.choice(UNICODE))
        elif roll < 0.7:
            parts.append("".join(rng.choice("abc/*?[]!-.") for _ in range(rng.randint(1, 8))))
        else:
            parts.append(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0xd7ff),
                                         rng.randint(0xe000, 0x10ffff)])))
    return "".join(parts)[:limit]


def _value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if roll < 0.12:
        return rng.choice([0, 1, -1, 2**31, 2**63, -(2**63), 10**19, 10**30, 3])
    if roll < 0.2:
        return rng.choice([0.0, -0.0, 1.5, 1e308, -1e-308, 3.0])
    if roll < 0.28:
        return rng.choice([True, False, None])
    if roll < 0.55:
        return _text(rng)
    if roll < 0.65:
        return rng.choice(PATHS)
    if roll < 0.72:
        return rng.choice(GLOBS)
    if roll < 0.85 and depth < 4:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 4:
        return {_text(rng, 8): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return "leaf"


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _valid(rng: random.Random) -> dict[str, object]:
    """A request that the models accept (most of the time)."""
    op = rng.choice(OPS)
    request: dict[str, object] = {"op": op, "id": rng.randint(0, 10**6)}
    path = rng.choice(["notes/fuzz.md", "notes/f2.md", "ops/f.md", "notes/a/b.md"])
    if op == "list":
        request["patterns"] = rng.sample(["notes/**", "*/f*.md", "ops", "**/*.md"], 2)
    elif op in ("read", "stat", "delete"):
        request["path"] = path
        if op == "read" and rng.random() < 0.5:
            request.update(offset=rng.randint(1, 5), limit=rng.randint(1, 5))
    elif op == "write":
        request["path"] = path
        roll = rng.random()
        if roll < 0.6:
            request["content"] = _text(rng)
        elif roll < 0.8:
            request["content_b64"] = rng.choice(["AAE=", "aGk=", "", "!!"])
        else:
            request["sed"] = [rng.choice(["s/a/b/", "p", "$a x", "w /tmp/x", "e id"])]
        request["force"] = rng.random() < 0.5
        request["append"] = "sed" not in request and rng.random() < 0.3
    elif op == "search":
        request["args"] = [rng.choice(["-i", "-l", "-c"]), rng.choice(["fuzz", "a.b", "("])]
    elif op == "log":
        request.update(path=rng.choice([path, "notes", None]), limit=rng.randint(1, 5),
                       patch=rng.random() < 0.3)
    elif op in ("show", "diff", "restore"):
        request.update(path=path, rev=rng.choice(REVS))
        if op == "restore":
            request["force"] = rng.random() < 0.5
    elif op.startswith(("session", "task", "decision", "brief")):
        fields = {"session_start": {"goal": _text(rng)},
                  "session_checkpoint": {"session": _text(rng, 12) or "s", "note": _text(rng)},
                  "session_handoff": {"session": "s1", "summary": "x", "next": _text(rng)},
                  "task_add": {"task": rng.choice(["t1", "t2", _text(rng, 12) or "t"]),
                               "title": _text(rng) or "title"},
                  "task_claim": {"task": "t1", "ttl": rng.choice(["45s", "2h", "0s", "99d"])},
                  "task_complete": {"task": "t1"},
                  "decision_record": {"title": "d", "decision": _text(rng), "reason": "r"}}
        request.update(fields.get(op, {}))
        if rng.random() < 0.5:
            request["store"] = rng.choice(["team", "notes", "nope"])
    if op in ("write", "delete", "restore") and rng.random() < 0.2:
        request["expect"] = rng.choice(["absent", "0" * 64, "xyz"])
    if rng.random() < 0.1:
        request["as_agent"] = rng.choice(["alice", "bob", "nobody", _text(rng, 10)])
    return request


def wrong_types(rng: random.Random) -> bytes:
    request = _valid(rng)
    for _ in range(rng.randint(1, 3)):
        request[rng.choice(FIELDS)] = _value(rng)
    if rng.random() < 0.2:
        request[_text(rng, 12)] = _value(rng)
    return _dumps(request).encode("utf-8", "surrogatepass")


def raw_splice(rng: random.Random) -> bytes:
    """A request with one field's value replaced by a raw literal (extreme numbers,
    lone-surrogate escapes, broken tokens)."""
    request = _valid(rng)
    field = rng.choice(FIELDS)
    request[field] = "@@RAW@@"
    text = _dumps(request).replace('"@@RAW@@"', rng.choice(RAW_VALUES))
    return text.encode("utf-8", "surrogatepass")


def surrogate_strings(rng: random.Random) -> bytes:
    request = _valid(rng)
    field = rng.choice(["id", "path", "content", "as_agent", "op", "expect", "@key"])
    escaped = "x" + rng.choice(SURROGATE_ESCAPES) + "y"
    if field == "@key":
        text = _dumps(request)[:-1] + f', "{escaped}": 1}}'
    else:
        request[field] = "@@S@@"
        text = _dumps(request).replace("@@S@@", escaped)
    return text.encode()


def deep(rng: random.Random) -> bytes:
    depth = rng.choice([5, 31, 32, 33, 100, 999, 1000, 5000, 100_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    nested = opener * depth + "1" + closer * depth
    if rng.random() < 0.5:
        return nested.encode()
    request = _valid(rng)
    request[rng.choice(FIELDS)] = "@@D@@"
    return _dumps(request).replace('"@@D@@"', nested).encode()


def garbage(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.4:
        data = rng.randbytes(rng.randint(1, 300))
    elif roll < 0.6:  # invalid UTF-8 inside otherwise fine JSON
        bad = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"])
        data = b'{"op": "write", "path": "notes/g", "content": "a' + bad + b'b"}'
    elif roll < 0.8:
        data = bytes(rng.choice(b"{}[]\":,0123456789.eE+-tfn\\u ") for _ in range(64))
    else:
        data = rng.choice([b"\x00" * 50, b"{}", b"[]", b"null", b'"x"', b"1", b"\xef\xbb\xbf{}",
                           b'{"op": "whoami"} trailing', b'{"op": "whoami"}{"op": "whoami"}'])
    return data.replace(b"\n", b" ")


def truncated(rng: random.Random) -> bytes:
    line = _dumps(_valid(rng)).encode()
    return line[: rng.randint(0, max(0, len(line) - 1))]


def mutated(rng: random.Random) -> bytes:
    data = bytearray(_dumps(_valid(rng)).encode())
    for _ in range(rng.randint(1, 4)):
        if not data:
            break
        at = rng.randrange(len(data))
        roll = rng.random()
        if roll < 0.4:
            data[at] = rng.randrange(256)
        elif roll < 0.7:
            del data[at]
        else:
            data.insert(at, rng.choice(b'{}[]",:\\0'))
    return bytes(data).replace(b"\n", b" ")


def valid(rng: random.Random) -> bytes:
    return _dumps(_valid(rng)).encode()


KINDS: list[Callable[[random.Random], bytes]] = [  # valid twice: more reach the engine
    wrong_types, raw_splice, surrogate_strings, deep, garbage, truncated, mutated, valid, valid,
]


def lines(seed: int, count: int) -> Iterator[bytes]:
    """``count`` hostile lines (no newline in any), reproducible from ``seed``."""
    rng = random.Random(seed)
    for _ in range(count):
        yield rng.choice(KINDS)(rng)
