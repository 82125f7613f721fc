"""Carrying out requests: the `Dispatcher` runs each protocol request against the engine
and the memory model for one agent and turns the outcome into a reply; its op handlers
are grouped in `control.ops.memory`, `control.ops.history` and `control.ops.tokens`."""

from control.ops.dispatcher import (
    Dispatcher,
    describe,
)

__all__ = [
    "Dispatcher",
    "describe",
]
