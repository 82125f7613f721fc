"""How a caller names a revision of a store's history, or a time: regular expressions,
free of I/O (the history, memfs/store/history/reader.py, resolves them; the protocol's models
state them as patterns in their JSON schemas, control/protocol/base.py).

A revision is a commit id (4 to 40 hex digits), ``HEAD~N`` or ``main~N``, or a time:
``YYYY-MM-DD[THH:MM[:SS]][Z|+HH:MM]``, only dates and times that exist (months of 28 to
31 days, leap years, 00:00 to 23:59:59, offsets under 24 hours), so that every time the
pattern takes is one (datetime.fromisoformat agrees).
"""

from __future__ import annotations

HEX = r"[0-9a-f]{4,40}"
HEAD = r"(?:HEAD|main)(?:~(\d{1,9}))?"
_YEAR = r"(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d{3})"
_LEAP = r"(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = (rf"(?:{_YEAR}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])|(?:0[13-9]|1[0-2])-"
         rf"(?:29|30)|(?:0[13578]|1[02])-31)|{_LEAP}-02-29)")
_CLOCK = r"[T ](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d)?"
_ZONE = r"(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
TIME = rf"{_DATE}(?:{_CLOCK})?{_ZONE}?"
REV = rf"(?:{HEX}|(?:HEAD|main)(?:~\d{{1,9}})?|{TIME})"
# Whole values, as JSON Schema patterns (^...$): a time, a revision, and a diff's
# REV or REV..REV
TIME_PATTERN = rf"^{TIME}$"
REV_PATTERN = rf"^{REV}$"
RANGE_PATTERN = rf"^{REV}(?:\.\.{REV})?$"
