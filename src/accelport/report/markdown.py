"""Markdown building blocks, and the one sanitizer for text put into Markdown.

Text from user files (file names, source lines, module names) goes through
`escape` (plain text) or `code` (a code span); either way it cannot end the table
cell, start a link, or become live HTML: `<img src=x onerror=...>` is written as
`&lt;img ...&gt;` outside a code span, and is inert inside one (a code span shows
HTML as text). Control characters are shown as escapes (`accelport.textsafe`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from accelport.textsafe import one_line

# Characters that Markdown (CommonMark, GFM tables) or the HTML it may hold would act on.
_SPECIAL = re.compile(r"[\\`*_\[\]<>&|#~]")
_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_BACKTICKS = re.compile("`+")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _ENTITIES.get(char) or "\\" + char


def escape(text: object) -> str:
    """A value as plain text in a Markdown table cell or list item: nothing in it is markup."""
    return _SPECIAL.sub(_escape_char, one_line(text))


def code(text: object) -> str:
    """A value as an inline code span in a table cell: shown exactly, whatever backticks or HTML it holds."""
    value = one_line(text)
    if not value:
        return ""
    longest = max((len(run) for run in _BACKTICKS.findall(value)), default=0)
    fence = "`" * (longest + 1)
    # A span's content loses one space at each end when it has both, or starts or ends with a backtick.
    edge = value.startswith("`") or value.endswith("`") or (value[0] == " " and value[-1] == " " and value.strip())
    pad = " " if edge else ""
    # GFM splits table rows at `|` before it reads code spans: `\|` keeps the pipe in the span.
    return f"{fence}{pad}{value}{pad}{fence}".replace("|", "\\|")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], raw_columns: Sequence[int] = ()) -> str:
    """A GitHub-flavoured Markdown table; columns in `raw_columns` are inserted as already-formatted Markdown."""
    out = ["| " + " | ".join(escape(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [str(v) if i in raw_columns else escape(v) for i, v in enumerate(row)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
