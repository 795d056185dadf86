"""Small inline SVG charts for HTML reports (no plotting library needed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

PALETTE = ("#0b5cad", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#57606a", "#bc4c00", "#116329")


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if not math.isfinite(low) or not math.isfinite(high):
        return []
    if high <= low:
        return [low]
    step = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(step))
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= step), default=step)
    start = math.ceil(low / step) * step
    ticks, value = [], start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _fmt(value: float) -> str:
    return f"{value:.3g}"


# Width of a character in em, by class, for laying out text without a renderer. Each class is
# at least as wide as its widest member in DejaVu Sans (the usual "sans-serif" on Linux, wider
# than Arial or Helvetica), so text measured here never takes more room than we give it.
_NARROW = frozenset("iljI.,:;|'!` ")
_SLIM = frozenset("()[]{}-ftr/\\\"*")
_WIDE = frozenset("mwMW@%…—")
LEGEND_ROW = 16  # px per legend row
LEGEND_GAP = 18  # px between two entries of a row
SWATCH = 14  # px of the colour square and its space


def text_width(text: str, font_size: float = 11.0) -> float:
    """A generous estimate of the rendered width of `text` in px (see the classes above)."""
    em = 0.0
    for ch in text:
        if ch in _NARROW:
            em += 0.3
        elif ch in _SLIM:
            em += 0.42
        elif ch in _WIDE:
            em += 1.1
        elif ch.isupper() or not ch.isalnum():  # capitals and the other symbols (+ < = > ? ^ ~ $ # &)
            em += 0.85
        else:
            em += 0.7
    return em * font_size


def _fit(text: str, room: float, font_size: float = 11.0) -> str:
    """`text`, cut with an ellipsis so that it fits in `room` px."""
    if text_width(text, font_size) <= room:
        return text
    while text and text_width(text + "…", font_size) > room:
        text = text[:-1]
    return text + "…"


def legend(names: Sequence[str], left: float, top: float, room: float) -> tuple[list[str], float]:
    """Legend entries flowed left to right into rows no wider than `room` px.

    Returns the SVG elements and the height they take. An entry too long for a row on its
    own is cut with an ellipsis, its full name kept in a <title> tooltip.
    """
    out: list[str] = []
    x, y = left, top
    for index, name in enumerate(names):
        color = PALETTE[index % len(PALETTE)]
        label = _fit(name, room - SWATCH)
        width = SWATCH + text_width(label)
        if x > left and x + width > left + room:
            x, y = left, y + LEGEND_ROW
        tip = f"<title>{escape(name)}</title>" if label != name else ""
        out.append(f'<g class="legend">{tip}<rect x="{x:.1f}" y="{y:.1f}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + SWATCH:.1f}" y="{y + 9:.1f}">{escape(label)}</text></g>')
        x += width + LEGEND_GAP
    return out, (y - top + LEGEND_ROW) if names else 0.0


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    log_y: bool = False,
    width: int = 720,
    height: int = 320,
) -> str:
    """Overlayed line series; points with non-finite y (or y <= 0 on a log axis) are left out.

    The legend sits between the title and the plot, its entries flowed into as many rows as
    their names need, so no name overlaps another or the lines; `height` grows by its rows.
    """
    left, right, top, bottom = 64, 16, 28, 44
    legend_items, legend_height = legend(list(series), left, top, width - left - right)
    top += legend_height + 6 if legend_items else 0
    height += legend_height + 6 if legend_items else 0

    def ty(y: float) -> float:
        return math.log10(y) if log_y else y

    points = {
        name: [(x, ty(y)) for x, y in pts if math.isfinite(y) and (y > 0 or not log_y)] for name, pts in series.items()
    }
    xs = [x for pts in points.values() for x, _ in pts]
    ys = [y for pts in points.values() for _, y in pts]
    if not xs:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40"><text x="8" y="24">{escape(title)}: no data</text></svg>'
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">']
    out.append(f'<text x="{left}" y="16" font-size="13" font-weight="600">{escape(title)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#d9dee3"/>')
    for tick in _ticks(y0, y1):
        y = py(tick)
        label = _fmt(10**tick) if log_y else _fmt(tick)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef1f4"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(label)}</text>')
    for tick in _ticks(x0, x1):
        x = px(tick)
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{escape(_fmt(tick))}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>'
    )
    for index, pts in enumerate(points.values()):
        color = PALETTE[index % len(PALETTE)]
        if pts:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{path}"/>')
    out.extend(legend_items)
    out.append("</svg>")
    return "".join(out)


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    title: str = "",
    value_label: str = "",
    width: int = 720,
    bar_height: int = 18,
    colors: Sequence[str] | None = None,
) -> str:
    """Horizontal bars (negative values extend left of zero): good for per-op deltas and waterfalls."""
    left, right, top = 220, 60, 28
    height = top + bar_height * len(labels) + 24
    finite = [v for v in values if math.isfinite(v)] or [0.0]
    low, high = min(0.0, *finite), max(0.0, *finite)
    if high == low:
        high = low + 1
    plot_w = width - left - right

    def px(v: float) -> float:
        return left + (v - low) / (high - low) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">']
    out.append(f'<text x="8" y="16" font-size="13" font-weight="600">{escape(title)}</text>')
    zero = px(0.0)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + i * bar_height
        v = value if math.isfinite(value) else 0.0
        x_start, x_end = sorted((zero, px(v)))
        color = (colors[i] if colors else None) or (PALETTE[1] if v > 0 else PALETTE[2])
        short = label if len(label) <= 34 else label[:33] + "…"
        out.append(f'<text x="{left - 6}" y="{y + bar_height - 5}" text-anchor="end">{escape(short)}</text>')
        out.append(f'<rect x="{x_start:.1f}" y="{y + 2}" width="{max(x_end - x_start, 1):.1f}" height="{bar_height - 4}" fill="{color}"/>')
        out.append(f'<text x="{x_end + 4:.1f}" y="{y + bar_height - 5}">{escape(_fmt(value))} {escape(value_label)}</text>')
    out.append(f'<line x1="{zero:.1f}" x2="{zero:.1f}" y1="{top}" y2="{height - 24}" stroke="#57606a"/>')
    out.append("</svg>")
    return "".join(out)
