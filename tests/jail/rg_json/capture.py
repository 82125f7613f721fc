"""Capture the fixtures of tests/jail/test_rg_json.py: real ``rg --json`` output of
real runs over the small tree below, one ``NAME.jsonl`` each, and ``NAME.txt`` the
same search's text output (``--line-number --with-filename``), which
``rg_json.render`` must give back. Run it again with another rg to see what changed:
``.venv/bin/python tests/jail/rg_json/capture.py`` (the rg beside the interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RG = Path(sys.executable).parent / "rg"

FILES: dict[bytes, bytes] = {
    b"notes/runbook.md": b"step one\nstep two\nrestart the payments worker\nstep four\n"
                         b"step five\n",
    b"notes/two.md": b"a payments\nb\nc\nd\ne\nf payments\ng\n",
    b"notes/close.md": b"payments 1\nx\npayments 3\ny\nz\n",
    b"notes/caf\xc3\xa9.md": b"Caf\xc3\xa9 \xe2\x82\xac payments \xf0\x9f\x92\xb3 end\n",
    b"notes/latin1.txt": b"bad \xff\xfe byte payments\n",
    b"notes/\xffname.md": b"payments under a name that is not UTF-8\n",
    b"ops/deploy.md": b"deploy payments on friday\n",
    b"ops/nolf.md": b"no newline at the end: payments",
}

# name -> the search's flags (the pattern last); every run adds --sort=path
RUNS: dict[str, list[str]] = {
    "plain": ["payments"],
    "context": ["-C1", "payments"],
    "after": ["-A2", "payments", "notes/close.md", "notes/two.md"],
    "before": ["-B2", "payments", "notes/close.md", "notes/two.md"],
    "multiline": ["-U", "one\\nstep two\\n", "notes/runbook.md"],
    "invert": ["-v", "-C1", "step", "notes/runbook.md"],
    "spans": ["-e", "pay", "-e", "ments", "-e", "\\w*\\x{20ac}\\s", "notes"],
    "bytes": ["-a", "(?-u:\\xA9)", "notes"],
    "none": ["no-such-text"],
}


def main() -> int:
    with tempfile.TemporaryDirectory() as work:
        root = os.fsencode(work)
        for name, data in FILES.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as file:
                file.write(data)
        for name, flags in RUNS.items():
            for suffix, mode in (("jsonl", ["--json"]),
                                 ("txt", ["--line-number", "--with-filename"])):
                done = subprocess.run([str(RG), "--no-config", "--sort=path", *mode, *flags],
                                      cwd=work, capture_output=True, check=False)
                if done.returncode not in (0, 1):
                    print(f"{name}: rg failed: {done.stderr.decode()}", file=sys.stderr)
                    return 1
                (HERE / f"{name}.{suffix}").write_bytes(done.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
