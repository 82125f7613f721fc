"""Argument types and the result wrapper shared by the MCP tool signatures
(control/mcp/server.py, control/mcp/memory_signatures.py)."""

from typing import TYPE_CHECKING, Annotated, Any, Required

from pydantic import Field, ValidationInfo, ValidatorFunctionWrapHandler, WrapValidator
from typing_extensions import TypedDict  # pydantic reads it (see jail/rg_json.py)

from control.mcp.storage import ToolOutcome
from jail.rg_json import Match

if TYPE_CHECKING:
    from mcp_types import CallToolResult


def _null_is_absent(value: Any, handler: ValidatorFunctionWrapHandler,
                    info: ValidationInfo) -> Any:
    """Models often send ``null`` for an optional argument: treat it as not given."""
    return None if value is None else handler(value)


def _null_is_false(value: Any, handler: ValidatorFunctionWrapHandler,
                   info: ValidationInfo) -> Any:
    return False if value is None else handler(value)


# Optional text is annotated as plain ``str`` (default None) rather than ``str | None``:
# the SDK JSON-decodes string arguments whose annotation is not exactly ``str``, which
# would turn file content such as '{"a": 1}' or '[1, 2]' into a dict or a list.
OptionalText = Annotated[str, WrapValidator(_null_is_absent)]
OptionalFlag = Annotated[bool, WrapValidator(_null_is_false)]

PathArg = Annotated[str, Field(
    description="File path as STORE/PATH, e.g. notes/oncall.md (a /memory/ prefix is fine).",
    min_length=1, max_length=4096)]


class SearchOutput(TypedDict, total=False):
    """What storage_search's text shows, as data: the matches (path, line, text, the
    matched spans in characters of text, the context lines before and after), or rg's
    own text as output when the flags print something else (-l, -c, -o...); rg's exit
    code (0 matches, 1 none, 2 errors); truncated: some was left out."""

    matches: list[Match]
    output: str
    exit_code: Required[int]
    truncated: Required[bool]


def result_of(outcome: ToolOutcome) -> "CallToolResult":
    from mcp_types import CallToolResult, TextContent

    meta = {"memfs": outcome.meta} if outcome.meta else None
    return CallToolResult(content=[TextContent(type="text", text=outcome.text)],
                          structured_content=outcome.structured,
                          is_error=outcome.is_error, _meta=meta)


