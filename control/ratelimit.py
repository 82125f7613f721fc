"""A warning logged at most once per interval: for conditions that clients can repeat
as fast as they like (refused connections, a full disk), so the log stays readable."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("memfs.control")


class RateLimitedLog:
    """Logs a warning at most once per ``interval`` seconds, counting the rest."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._next = 0.0
        self._suppressed = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        if self._suppressed:
            message += f" ({self._suppressed} more like it since the last warning)"
        log.warning(message, *args)
        self._next = now + self.interval
        self._suppressed = 0
