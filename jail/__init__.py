"""Run ripgrep and GNU sed for agents under one kernel-enforced sandbox policy.

Public API: :class:`Jail` (``start``, ``search``, ``sed``, ``close``), its settings and
result types, and the exceptions. ``jail.policy`` holds the policy model and ``apply``.
"""

from jail.api import Jail, SearchResult
from jail.errors import BadArguments, JailError, JailLimit, JailUnavailable, ToolFailed
from jail.settings import JailSettings

__all__ = [
    "BadArguments",
    "Jail",
    "JailError",
    "JailLimit",
    "JailSettings",
    "JailUnavailable",
    "SearchResult",
    "ToolFailed",
]
