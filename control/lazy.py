"""Public names re-exported by a package and imported on first use (PEP 562): for the
packages whose modules pull in heavy libraries (control.http, control.mcp, control.ops),
so that a process using one sibling module alone does not pay for the others."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: each name of ``where`` taken from the
    module it names, imported then."""

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return getattr_
