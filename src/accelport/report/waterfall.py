"""Waterfall chart (inline SVG): from a start total, each step's delta, to the end total."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

UP, DOWN, TOTAL = "#cf222e", "#1a7f37", "#0b5cad"


def waterfall_chart(
    start: tuple[str, float],
    steps: Sequence[tuple[str, float]],
    end_label: str,
    title: str = "",
    unit: str = "",
    width: int = 760,
    bar_height: int = 18,
) -> str:
    """Horizontal waterfall: a total bar, floating delta bars (red up, green down), the end total."""
    left, right, top = 260, 90, 28
    running = start[1]
    bars = [(start[0], 0.0, start[1], TOTAL, start[1])]
    for label, delta in steps:
        value = delta if math.isfinite(delta) else 0.0
        bars.append((label, running, running + value, UP if value > 0 else DOWN, delta))
        running += value
    bars.append((end_label, 0.0, running, TOTAL, running))
    low = min(0.0, *(min(a, b) for _, a, b, _, _ in bars))
    high = max(0.0, *(max(a, b) for _, a, b, _, _ in bars))
    if high == low:
        high = low + 1
    plot_w = width - left - right
    height = top + bar_height * len(bars) + 16

    def px(v: float) -> float:
        return left + (v - low) / (high - low) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11" class="waterfall">']
    out.append(f'<text x="8" y="16" font-size="13" font-weight="600">{escape(title)}</text>')
    for i, (label, a, b, color, shown) in enumerate(bars):
        y = top + i * bar_height
        x0, x1 = sorted((px(a), px(b)))
        short = label if len(label) <= 40 else label[:39] + "…"
        sign = "+" if color == UP else ""
        out.append(f'<text x="{left - 6}" y="{y + bar_height - 5}" text-anchor="end">{escape(short)}</text>')
        out.append(f'<rect x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 1):.1f}" height="{bar_height - 4}" fill="{color}"/>')
        out.append(f'<text x="{x1 + 4:.1f}" y="{y + bar_height - 5}">{escape(sign + f"{shown:.4g}")} {escape(unit)}</text>')
    out.append("</svg>")
    return "".join(out)
