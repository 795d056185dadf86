"""Chart legends: no entry overlaps another, the lines or the edge, measured with a real font's metrics."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from accelport.report import svg

NS = {"s": "http://www.w3.org/2000/svg"}
LONG = [
    "reference run, seed 0 (EMA-smoothed) on the H100 baseline",
    "test run, seed 0 (EMA-smoothed) on Ascend 910B",
    "WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW",  # wider than the plot
    "loss",
    "grad-norm / mean over ranks",
    "MMMM%@ — wide glyphs",
    "seed band",
    "x",
]


@pytest.fixture(scope="module")
def measure():
    """Width in px of text at 11 px in DejaVu Sans, from FreeType (the oracle: not svg.text_width)."""
    font_manager = pytest.importorskip("matplotlib.font_manager", reason="the font oracle is matplotlib's FreeType binding")
    from matplotlib.ft2font import FT2Font

    font = FT2Font(font_manager.findfont("DejaVu Sans"))
    font.set_size(11, 72)  # 72 dpi: points are pixels

    def width(text: str) -> float:
        font.set_text(text, 0.0)
        return font.get_width_height()[0] / 64

    return width


def _legend_boxes(markup: str, measure) -> list[tuple[float, float, float, float, str]]:
    root = ET.fromstring(markup)
    boxes = []
    for group in root.iter("{http://www.w3.org/2000/svg}g"):
        if group.get("class") != "legend":
            continue
        rect, text = group.find("s:rect", NS), group.find("s:text", NS)
        x0, y0 = float(rect.get("x")), float(rect.get("y"))
        x1 = float(text.get("x")) + measure(text.text)
        boxes.append((x0, y0, x1, y0 + 10, text.text))
    return boxes


@pytest.mark.parametrize("names", [LONG, LONG[:2], ["a", "b"], [f"series {i} with a longish name" for i in range(8)]])
def test_legend_entries_do_not_overlap_each_other_the_plot_or_the_edge(names, measure):
    series = {name: [(0, 1.0 + i), (10, 2.0 + i)] for i, name in enumerate(names)}
    markup = svg.line_chart(series, title="loss per step", x_label="step", y_label="loss")
    root = ET.fromstring(markup)
    width = float(root.get("width"))
    plot = root.find("s:rect", NS)  # the plot frame comes first
    plot_top = float(plot.get("y"))
    boxes = _legend_boxes(markup, measure)
    assert len(boxes) == len(names)
    for i, (x0, y0, x1, y1, label) in enumerate(boxes):
        assert x0 >= 0 and x1 <= width, (label, x1, width)
        assert y0 >= 18 and y1 <= plot_top, label  # below the title, above the plot
        for ox0, oy0, ox1, oy1, other in boxes[i + 1:]:
            apart = x1 <= ox0 or ox1 <= x0 or y1 <= oy0 or oy1 <= y0
            assert apart, (label, other)


def test_a_name_too_long_for_a_row_is_cut_and_kept_whole_in_a_tooltip(measure):
    name = LONG[2]
    markup = svg.line_chart({name: [(0, 1.0), (1, 2.0)]})
    root = ET.fromstring(markup)
    group = next(g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "legend")
    assert group.find("s:title", NS).text == name
    shown = group.find("s:text", NS).text
    assert shown.endswith("…") and name.startswith(shown[:-1])


def test_the_estimate_is_never_narrower_than_the_font(measure):
    import string

    for text in [*LONG, string.ascii_letters, string.digits, string.punctuation, "ß é ü ñ"]:
        assert svg.text_width(text) >= measure(text), text
