"""Run ripgrep and GNU sed for agents under one kernel-enforced sandbox policy.

Public API: :class:`Jail` (``start``, ``search``, ``sed``, ``close``), its settings and
result types, and the exceptions. ``jail.policy`` holds the policy model and ``apply``.

The names are imported lazily: the launcher process (``jail.launcher``) imports this
package too, and must not load pydantic, which would make each of its forks slower.

Installed as `memfs.jail` (memfs/jail is a symlink to this folder); it imports nothing
else of memfs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memfs.jail.api import Jail
    from memfs.jail.errors import (
        BadArguments,
        JailBusy,
        JailError,
        JailLimit,
        JailUnavailable,
        KernelLacks,
        ToolFailed,
    )
    from memfs.jail.results import SearchResult
    from memfs.jail.settings import JailSettings

__all__ = [
    "BadArguments",
    "Jail",
    "JailBusy",
    "JailError",
    "JailLimit",
    "JailSettings",
    "JailUnavailable",
    "KernelLacks",
    "SearchResult",
    "ToolFailed",
]

_WHERE = {
    "Jail": "memfs.jail.api",
    "SearchResult": "memfs.jail.results",
    "JailSettings": "memfs.jail.settings",
    "BadArguments": "memfs.jail.errors",
    "JailBusy": "memfs.jail.errors",
    "JailError": "memfs.jail.errors",
    "JailLimit": "memfs.jail.errors",
    "JailUnavailable": "memfs.jail.errors",
    "KernelLacks": "memfs.jail.errors",
    "ToolFailed": "memfs.jail.errors",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
