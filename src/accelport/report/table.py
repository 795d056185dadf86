"""Plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence

from accelport.textsafe import one_line


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return one_line(value)


def text_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    align: str | None = None,
    max_width: int = 60,
) -> str:
    """A padded table. `align` holds one of 'l'/'r' per column (default: numbers right)."""
    cells = [[_cell(v) for v in row] for row in rows]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in cells]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    if align is None:
        align = "".join(
            "r" if rows and all(isinstance(r[i], int | float) for r in rows if r[i] is not None) else "l"
            for i in range(len(headers))
        )

    def fmt(row: Sequence[str]) -> str:
        parts = [c.rjust(widths[i]) if align[i] == "r" else c.ljust(widths[i]) for i, c in enumerate(row)]
        return "  ".join(parts).rstrip()

    lines = [fmt([one_line(h) for h in headers]), fmt(["-" * w for w in widths])]
    lines.extend(fmt(row) for row in cells)
    return "\n".join(lines) + "\n"
