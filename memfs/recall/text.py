"""Words: what a file is indexed as, what a query asks for, and which lines of a file
match best. One analyzer for all three (tantivy's: split on what is not a letter or
digit, lowercase, fold accents to ASCII, English Snowball stemming), so "rate-limited",
"Rate limiting" and "limits" all meet as ``rate`` and ``limit``.

A file is four fields: its path's words, its title (front matter ``title:``, else the
first ``# `` heading, else a JSON ``"title"``), its markdown headings and its whole
text. A decision record that another supersedes (front matter ``status: superseded``
or a ``superseded_by``) is marked, so that it ranks below its replacement: similarity
is not truth.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memfs.memory.records import split_front_matter

if TYPE_CHECKING:
    import tantivy

ANALYZER = "memfs_en"  # the name the indexes register the analyzer under
MAX_QUERY_CHARS = 1000
MAX_QUERY_WORDS = 32
MAX_TITLE_CHARS = 500

# Words that say how a question is asked, not what it is about. Dropped from queries
# (not from the index), unless nothing else is left.
_STOPWORDS = """
a about after again all also am an and any are as at be been before being but by can
could did do does doing done during each ever for from had has have having he her here
him his how i if in into is it its itself just me more most my no nor not now of on once
only or other our ours out over own same she should so some such than that the their
theirs them then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours
"""
STOPWORDS = frozenset(_STOPWORDS.split())

_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


@functools.cache
def analyzer() -> tantivy.TextAnalyzer:
    """The tantivy analyzer shared by every index and query (built once)."""
    import tantivy

    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(64))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def stems(text: str) -> list[str]:
    """The index terms of ``text``, in order (repeats kept)."""
    return analyzer().analyze(text)


@dataclass(frozen=True)
class Fields:
    """What one file is indexed as."""

    path: str
    title: str
    headings: str
    body: str
    superseded: bool


def fields_of(rel: str, data: bytes) -> Fields:
    """The indexed fields of the file ``rel`` (its path below the store) holding
    ``data`` (bytes that are not UTF-8 are replaced)."""
    text = data.decode("utf-8", "replace")
    front, rest = split_front_matter(text)
    title = front.get("title")
    if not isinstance(title, str):
        heading = _HEADING.search(rest)
        title = heading.group(1) if heading else _json_title(rel, text)
    superseded = front.get("status") == "superseded" or bool(front.get("superseded_by"))
    headings = "\n".join(_HEADING.findall(rest))[:MAX_TITLE_CHARS * 8]
    return Fields(rel, (title or "")[:MAX_TITLE_CHARS], headings, text, superseded)


def _json_title(rel: str, text: str) -> str:
    if not rel.endswith(".json"):
        return ""
    try:
        value = json.loads(text)
    except ValueError:
        return ""
    title = value.get("title") if isinstance(value, dict) else None
    return title if isinstance(title, str) else ""


def query_terms(query: str) -> list[str]:
    """The distinct index terms a query asks for, in order: its words less the
    stopwords (all of them when only stopwords are given); none when it has no word
    (only punctuation: nothing matches it). Raises ValueError when the query has too
    many characters or words."""
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"the query is {len(query)} characters long; at most "
                         f"{MAX_QUERY_CHARS}")
    words = [word.lower() for word in re.findall(r"\w+", query)]
    if len(words) > MAX_QUERY_WORDS:
        raise ValueError(f"the query has {len(words)} words; at most {MAX_QUERY_WORDS}")
    kept = [word for word in words if word not in STOPWORDS] or words
    terms: list[str] = []
    for word in kept:
        for term in stems(word):
            if term not in terms:
                terms.append(term)
    return terms


def acronyms(query: str) -> list[str]:
    """The acronyms a query may spell out: the initials of each run of three or four
    words in a row, none of them a stopword ("content delivery network" -> "cdn"), less
    those that are stopwords themselves; in order, distinct. (Recall asks for the ones
    the index holds: notes write "CDN" where a question says what it stands for.)"""
    words = [word.lower() for word in re.findall(r"[^\W\d_]+", query)]
    found: list[str] = []
    for length in (3, 4):
        for start in range(len(words) - length + 1):
            run = words[start:start + length]
            if any(word in STOPWORDS for word in run):
                continue
            spelled = "".join(word[0] for word in run)
            if spelled not in STOPWORDS and spelled not in found:
                found.append(spelled)
    return found


def best_lines(text: str, terms: list[str], count: int = 3) -> list[tuple[int, str]]:
    """The ``count`` lines of ``text`` holding the most distinct ``terms`` (ties: the
    earlier line), as (1-based line number, line without its "\r"), in file order;
    none when no line holds any."""
    wanted = set(terms)
    # A stem's first letters are in the line's lowercase text, accents dropped ("retri":
    # "retr"): only such lines are analyzed.
    cheap = [term[:4] for term in wanted]
    scored = []
    # lines end with "\n" only, as memfs counts them everywhere (read's offsets)
    for number, line in enumerate(text.split("\n"), start=1):
        lowered = line.lower() if line.isascii() else _folded(line.lower())
        if not any(prefix in lowered for prefix in cheap):
            continue
        found = wanted.intersection(stems(line))
        if found:
            scored.append((-len(found), number, line.removesuffix("\r")))
    scored.sort()
    return sorted((number, line) for _, number, line in scored[:count])


def first_lines(text: str, count: int) -> list[tuple[int, str]]:
    """The first ``count`` lines of ``text`` that hold a letter or digit, as
    (1-based line number, line), front matter's fence and keys included."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if len(found) == count:
            break
        if any(char.isalnum() for char in line):
            found.append((number, line.removesuffix("\r")))
    return found


def _folded(text: str) -> str:
    """``text`` without its accents (é -> e), as the analyzer folds them."""
    return "".join(c for c in unicodedata.normalize("NFKD", text)
                   if not unicodedata.combining(c))
