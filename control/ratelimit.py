"""A line logged at most once per interval: for conditions that clients can repeat as
fast as they like (refused connections, clients that go away, a full disk), so the log
stays readable."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("memfs.control")


class RateLimitedLog:
    """Logs one kind of line (a warning unless ``level`` says otherwise) at most once
    per ``interval`` seconds, counting the rest."""

    def __init__(self, logger: logging.Logger = log, interval: float = 10.0,
                 level: int = logging.WARNING) -> None:
        self.logger = logger
        self.interval = interval
        self.level = level
        self._next = 0.0
        self._suppressed = 0

    def log(self, message: str, *args: object, exc_info: BaseException | None = None) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        if self._suppressed:
            message += f" ({self._suppressed} more like it since the last one)"
        self.logger.log(self.level, message, *args, exc_info=exc_info)
        self._next = now + self.interval
        self._suppressed = 0
