"""The history tools for models: storage_history and storage_restore.

`HistoryTools` extends `StorageTools` (control/mcp/storage.py) with them; like the storage
tools each method never raises and returns a ToolOutcome. The descriptions below are
what the model reads.
"""

from __future__ import annotations

from typing import Any

from memfs.control.mcp.storage import (
    MAX_OUTPUT_CHARS,
    StorageTools,
    ToolOutcome,
    commit_meta,
    cut_text,
    format_read,
)
from memfs.memory.records import literal


class HistoryTools(StorageTools):
    """The storage tools plus storage_history and storage_restore."""

    def history(self, path: str | None = None, action: str = "log", rev: str | None = None,
                offset: int | None = None, limit: int | None = None) -> ToolOutcome:
        if action == "log":
            return self._guard(lambda: self._log(path, limit or 20), verb="read")
        if path is None:
            return ToolOutcome(f"Invalid request: action={action!r} needs a file `path`.", True)
        if action == "diff":
            return self._guard(lambda: self._diff(path, rev), path=path, verb="read")
        if action == "show":
            if rev is None:
                return ToolOutcome("Invalid request: action=\"show\" needs `rev` (from "
                                   "storage_history(action=\"log\")).", True)
            return self._guard(lambda: self._show(path, rev, offset or 1, limit or 2000),
                               path=path, verb="read")
        return ToolOutcome(f"Invalid request: action must be log, diff or show, not "
                           f"{action!r}.", True)

    def _log(self, path: str | None, limit: int) -> ToolOutcome:
        entries = self.conn.run(lambda c: c.log(path, limit=limit), idempotent=True)
        if not entries:
            return ToolOutcome(f"No changes recorded for "
                               f"{literal(path) if path else 'your stores'}.")
        lines = [f"{e['short']}  {e['time']}  {literal(e['author'])}"
                 + ("" if e.get("delegate") is None else f" (via uid {e['delegate']})")
                 + f"  {literal(e['summary'])}" + ("  (forced)" if e["forced"] else "")
                 for e in entries]
        text, _ = cut_text("\n".join(lines), MAX_OUTPUT_CHARS)
        if len(entries) == limit:
            text += f"\n[{limit} most recent shown; pass a larger limit for more.]"
        return ToolOutcome(text, meta={"entries": [e["rev"] for e in entries]})

    def _diff(self, path: str, rev: str | None) -> ToolOutcome:
        result: dict[str, Any] = self.conn.run(lambda c: c.diff(path, rev), idempotent=True)
        if not result["diff"]:
            return ToolOutcome(f"No difference in {literal(path)} between {result['old']} and "
                               f"{result['new']}.")
        text, cut = cut_text(result["diff"], MAX_OUTPUT_CHARS)
        if cut:
            text += "\n[Diff truncated: compare narrower revisions.]"
        return ToolOutcome(f"{literal(path)}: {result['old']} -> {result['new']}\n{text}")

    def _show(self, path: str, rev: str, offset: int, limit: int) -> ToolOutcome:
        result = self.conn.run(lambda c: c.show(path, rev, offset=offset, limit=limit),
                               idempotent=True)
        outcome = format_read(path, offset, result)
        outcome.text = f"[{literal(path)} as of {result['short']}]\n" + outcome.text.replace(
            "storage_read(path=", f"storage_history(action=\"show\", rev={literal(rev)}, path=")
        return outcome

    def restore(self, path: str, rev: str, force: bool = False) -> ToolOutcome:
        def body() -> ToolOutcome:
            result = self.conn.run(lambda c: c.restore(path, rev, force=force),
                                   idempotent=False)
            shown, size = literal(result["path"]), result["size"]
            if result.get("unchanged"):
                text = (f"{shown} already held its content as of {literal(rev)} ({size} "
                        "bytes): nothing was changed.")
            else:
                verb = "Recreated" if result["created"] else "Restored"
                text = f"{verb} {shown} as of {literal(rev)} ({size} bytes)."
            return ToolOutcome(text, meta=commit_meta(result))

        return self._guard(body, path=path, verb="restore")
