"""The Jinja2 environment of the web view: templates from control/http/web/templates,
autoescaping on for every template (memory is untrusted text), undefined names an
error, and the filters the pages use. `markdown` output (control/http/web/render.py) is
the only markup that reaches a page unescaped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from memfs.control.http.web import render

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


def _urlpath(value: str) -> str:
    """A path for a URL: each component percent-encoded, slashes kept."""
    return quote(value, safe="/")


def _query(**params: Any) -> str:
    """``?a=1&b=2`` of the given parameters that are not None or empty."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"?{urlencode(kept)}" if kept else ""


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(
        md=lambda text: render.markdown(text or ""), span=render.span, size=render.size,
        urlpath=_urlpath)
    # every time on a page: time_at(epoch seconds or ISO text) (render.time_element)
    env.globals.update(query=_query, time_at=lambda at: render.time_element(at, time.time()),
                       summary_parts=render.summary_parts)
    return env
