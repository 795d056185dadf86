"""Markdown building blocks."""

from __future__ import annotations

from collections.abc import Sequence


def escape(text: object) -> str:
    """Escape a value for a Markdown table cell: pipes, newlines, backticks stay literal."""
    value = "" if text is None else str(text)
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("`", "\\`")


def code(text: object) -> str:
    """Inline code that survives backticks inside the text."""
    value = "" if text is None else str(text).replace("\n", " ")
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}".replace("|", "\\|")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], raw_columns: Sequence[int] = ()) -> str:
    """A GitHub-flavoured Markdown table; columns in `raw_columns` are inserted as already-formatted Markdown."""
    out = ["| " + " | ".join(escape(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [str(v) if i in raw_columns else escape(v) for i, v in enumerate(row)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
