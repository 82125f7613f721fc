"""sed scripts: a table of accepted scripts with their output, refused ones with their
error, and runaway scripts that hit the limits."""

from __future__ import annotations

import subprocess
import time

import pytest

from memfs.jail import BadArguments, Jail, JailLimit
from memfs.jail.sed_script import check
from tests.support import scaled

TEXT = b"alpha\nbeta\ngamma\ndelta\n"

# scripts -> expected output on TEXT
ALLOWED: list[tuple[list[str], bytes]] = [
    (["s/a/A/g"], b"AlphA\nbetA\ngAmmA\ndeltA\n"),
    (["s/a/A/"], b"Alpha\nbetA\ngAmma\ndeltA\n"),
    (["s/a/A/2"], b"alphA\nbeta\ngamMa\ndelta\n".replace(b"gamMa", b"gammA")),
    (["s/beta/BETA/", "s/gamma/GAMMA/"], b"alpha\nBETA\nGAMMA\ndelta\n"),
    (["/beta/d"], b"alpha\ngamma\ndelta\n"),
    (["2,3d"], b"alpha\ndelta\n"),
    (["1d;$d"], b"beta\ngamma\n"),
    (["y/abc/ABC/"], b"AlphA\nBetA\ngAmmA\ndeltA\n"),
    (["-n", "2p"][1:], b"alpha\nbeta\nbeta\ngamma\ndelta\n"),
    (["1~2d"], b"beta\ndelta\n"),
    (["/^b/,/^g/s/^/> /"], b"alpha\n> beta\n> gamma\ndelta\n"),
    (["2i\\", "inserted"], b"alpha\ninserted\nbeta\ngamma\ndelta\n"),
    (["$a the end"], b"alpha\nbeta\ngamma\ndelta\nthe end\n"),
    (["2c changed"], b"alpha\nchanged\ngamma\ndelta\n"),
    (["s|a|/|g"], b"/lph/\nbet/\ng/mm/\ndelt/\n"),
    (["s/[aeiou]//g"], b"lph\nbt\ngmm\ndlt\n"),
    (["s/\\(al\\)\\(pha\\)/\\2\\1/"], b"phaal\nbeta\ngamma\ndelta\n"),
    (["/alpha/{s/a/1/;s/p/2/}"], b"1l2ha\nbeta\ngamma\ndelta\n"),
    (["3q"], b"alpha\nbeta\ngamma\n"),
    (["# a comment with w and e in it", "s/delta/DELTA/"], b"alpha\nbeta\ngamma\nDELTA\n"),
    (["s/a/[w]/"], b"[w]lpha\nbet[w]\ng[w]mma\ndelt[w]\n"),
    (["s/[/]/x/"], TEXT),
    ([":a;s/^a//;ta"], b"lpha\nbeta\ngamma\ndelta\n"),
    (["s/x/y/;b end;:end"], TEXT),
    (["G"], b"alpha\n\nbeta\n\ngamma\n\ndelta\n\n"),
    (["s/./X/"], b"Xlpha\nXeta\nXamma\nXelta\n"),
]


@pytest.mark.parametrize(("scripts", "expected"), ALLOWED)
def test_allowed(jail: Jail, scripts: list[str], expected: bytes) -> None:
    assert jail.sed(scripts, TEXT) == expected


def test_utf8_locale_inside_the_chroot(jail: Jail) -> None:
    # "." matches the two-byte "é" only in a UTF-8 locale.
    assert jail.sed(["s/h.l/X/"], "héllo\n".encode()) == b"Xlo\n"
    assert jail.sed(["y/é/e/"], "café\n".encode()) == b"cafe\n"


# scripts -> a piece of the error message. Caught by the pre-check (naming the command).
PRECHECKED: list[tuple[list[str], str]] = [
    (["e ls"], "`e`"),
    (["1e"], "`e`"),
    (["r /etc/passwd"], "`r`"),
    (["$r /etc/passwd"], "`r`"),
    (["R /etc/passwd"], "`R`"),
    (["w /tmp/out"], "`w`"),
    (["/alpha/w /tmp/out"], "`w`"),
    (["W /tmp/out"], "`W`"),
    (["s/x/y/e"], "`e` flag"),
    (["s/x/y/w /tmp/out"], "`w` flag"),
    (["s/x/y/gw /tmp/out"], "`w` flag"),
    (["s/a/b/", "w /tmp/out"], "`w`"),
    (["1!{r /etc/passwd", "}"], "`r`"),
    (["s/x\\/y/z/;e"], "`e`"),
    (["s/[/]/x/;w x"], "`w`"),
    (["s/a/\\n/; 2,3 W x"], "`W`"),
    (["s/a\0b/c/"], "NUL"),
    ([], "no sed script"),
    (["x" * 200_000], "exceed"),
]


@pytest.mark.parametrize(("scripts", "message"), PRECHECKED)
def test_prechecked(jail: Jail, scripts: list[str], message: str) -> None:
    with pytest.raises(BadArguments) as caught:
        check(scripts)
    assert message in str(caught.value)
    with pytest.raises(BadArguments):
        jail.sed(scripts, TEXT)


@pytest.mark.parametrize(("scripts", "_message"), PRECHECKED[:16])
def test_sed_sandbox_agrees(scripts: list[str], _message: str) -> None:
    """Every script the pre-check refuses, sed --sandbox refuses too (host sed, no jail)."""
    args = ["sed", "--sandbox"] + [a for s in scripts for a in ("-e", s)]
    run = subprocess.run(args, input=TEXT, capture_output=True, check=False)
    assert run.returncode != 0


# scripts -> a piece of sed's own error, quoted in BadArguments.
SED_ERRORS: list[tuple[list[str], str]] = [
    (["0~0p"], "invalid usage of line address 0"),
    (["s/a/b"], "unterminated `s' command"),
    (["}"], "unexpected `}'"),
    (["k"], "unknown command"),
    (["b nowhere"], "can't find label"),
    (["\\%e%e /tmp/x"], "`e`"),  # an address delimited by "%", then the e command
]


@pytest.mark.parametrize(("scripts", "message"), SED_ERRORS)
def test_sed_errors(jail: Jail, scripts: list[str], message: str) -> None:
    with pytest.raises(BadArguments) as caught:
        jail.sed(scripts, TEXT)
    assert message in str(caught.value)


@pytest.mark.parametrize("script", [":a;ba", ":a;s/x/xx/;ta", ":a;p;ba"])
def test_runaway_scripts_hit_a_limit(quick_jail: Jail, script: str) -> None:
    started = time.monotonic()
    with pytest.raises(JailLimit):
        quick_jail.sed([script], b"x\n")
    assert time.monotonic() - started < quick_jail.settings.timeout_seconds + scaled(3.5)


@pytest.mark.parametrize("script", ["w /tmp/memfs-sed-escape", "1r /etc/passwd", "s/a/id/e"])
def test_sandbox_refuses_without_the_precheck(jail: Jail, script: str) -> None:
    """Bypass the pre-check: sed --sandbox in the jail still refuses, as BadArguments."""
    from memfs.jail.results import sed_output

    argv = ["sed", "--sandbox", "-e", script]
    run = jail._run("sed", argv, (), {}, TEXT, 1 << 20)
    with pytest.raises(BadArguments, match="e/r/w commands disabled in sandbox mode"):
        sed_output(run, 1 << 20, 5)


def test_output_over_the_limit(quick_jail: Jail) -> None:
    # quick_jail allows 64 KiB of sed output; G doubles 64 KiB of input.
    with pytest.raises(JailLimit, match="output exceeds"):
        quick_jail.sed(["G"], b"y\n" * 32 * 1024)


def test_big_input_without_deadlock(jail: Jail) -> None:
    data = b"0123456789abcdef" * (4 << 20 >> 4) + b"\n"  # 4 MiB in one line, plus more
    data += b"line\n" * 200_000
    out = jail.sed(["s/line/LINE/"], data)
    assert len(out) == len(data)
    assert out.endswith(b"LINE\n")


def test_empty_input(jail: Jail) -> None:
    assert jail.sed(["s/a/b/"], b"") == b""
