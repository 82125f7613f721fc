"""scripts/rename_imports.py, the mechanical rename of control/jail to memfs.control and
memfs.jail: what it rewrites, what it leaves alone, and that a second pass changes
nothing. (The samples below use the old names on purpose: hence the marker line that
makes the script skip this file.)"""
# rename_imports: skip

from __future__ import annotations

import importlib.util
import sys

from tests.support import REPO

_spec = importlib.util.spec_from_file_location("rename_imports",
                                               REPO / "scripts" / "rename_imports.py")
assert _spec is not None and _spec.loader is not None
rename = importlib.util.module_from_spec(_spec)
sys.modules["rename_imports"] = rename
_spec.loader.exec_module(rename)

KNOWN = {"control": {"ops", "http", "client"}, "jail": {"launcher", "errors", "settings"}}

BEFORE = '''"""Docstring: see ``jail.launcher`` and control.ops (prose stays)."""
from __future__ import annotations

import jail.errors
import control.http as web, os
from control.ops.registry import ops
from jail import Jail
from .sibling import x
from memfs.control.client import Client
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from control.client import Client  # control.client: the Python client
try: import control.ops
except ImportError: pass

MODULES = ("control.ops.storage", "jail.launcher")
PATCH = "control.http.app.time"
CODE = "from jail import Jail; from jail.launcher import main"
KEEP = ("control.sock", "jail.uid is no longer used", "tests.control.x", "control/http/app.py",
        "memfs.jail.spawn", "controls.ops")


def f(jail: Jail) -> object:
    """jail.settings is the jail's settings."""
    print(f"{os.sep} in jail.launcher")
    return jail.settings.uid, jail.errors.JailError, os.sep
'''

AFTER = '''"""Docstring: see ``jail.launcher`` and control.ops (prose stays)."""
from __future__ import annotations

import memfs.jail.errors
import memfs.control.http as web, os
from memfs.control.ops.registry import ops
from memfs.jail import Jail
from .sibling import x
from memfs.control.client import Client
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memfs.control.client import Client  # control.client: the Python client
try: import memfs.control.ops
except ImportError: pass

MODULES = ("memfs.control.ops.storage", "memfs.jail.launcher")
PATCH = "memfs.control.http.app.time"
CODE = "from memfs.jail import Jail; from memfs.jail.launcher import main"
KEEP = ("control.sock", "jail.uid is no longer used", "tests.control.x", "control/http/app.py",
        "memfs.jail.spawn", "controls.ops")


def f(jail: Jail) -> object:
    """jail.settings is the jail's settings."""
    print(f"{os.sep} in memfs.jail.launcher")
    return memfs.jail.settings.uid, memfs.jail.errors.JailError, os.sep
'''


def test_rewrites_imports_and_module_paths_only() -> None:
    # (`import jail.errors` binds the bare `jail`: its dotted uses in code follow it,
    # parameter or not; real code does not shadow an imported package)
    assert rename.rewrite_python(BEFORE, KNOWN) == AFTER


def test_a_second_pass_changes_nothing() -> None:
    assert rename.rewrite_python(AFTER, KNOWN) == AFTER


def test_without_a_bare_import_code_is_left_alone() -> None:
    source = ('from jail import Jail\n\n\ndef f(jail: Jail) -> str:\n'
              '    return f"{jail.settings.uid} {jail.errors}" + jail.launcher\n')
    assert rename.rewrite_python(source, KNOWN) == source.replace("from jail", "from memfs.jail")


def test_knows_the_modules_of_the_folders() -> None:
    known = rename.known_children()
    assert {"ops", "http", "client", "protocol", "socket", "mcp", "lazy"} <= known["control"]
    assert {"api", "launcher", "spawn", "errors"} <= known["jail"]
    assert "sock" not in known["control"]
