"""Self-contained HTML pages: inline CSS, no external assets, every value escaped."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape

_CSS = """
:root { --fg:#1d232a; --muted:#5b6670; --line:#d9dee3; --bg:#fff; --ok:#1a7f37; --bad:#cf222e; --warn:#9a6700; --accent:#0b5cad; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
main { max-width: 1200px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: var(--muted); margin-bottom: 16px; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f5f7; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; border-radius: 4px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-weight: 600; font-size: 12px; color: #fff; }
.pass { background: var(--ok); } .fail { background: var(--bad); } .warn { background: var(--warn); } .info { background: var(--accent); }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 8px 0 16px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 140px; }
.card .v { font-size: 20px; font-weight: 600; } .card .k { color: var(--muted); font-size: 12px; }
figure { margin: 8px 0 16px; } figcaption { color: var(--muted); font-size: 12px; }
"""


class HtmlPage:
    """Build a page section by section; `render()` returns one self-contained document."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self._parts: list[str] = []

    def heading(self, text: str, level: int = 2, anchor: str | None = None) -> None:
        ident = f' id="{escape(anchor)}"' if anchor else ""
        self._parts.append(f"<h{level}{ident}>{escape(text)}</h{level}>")

    def paragraph(self, text: str, css_class: str | None = None) -> None:
        cls = f' class="{escape(css_class)}"' if css_class else ""
        self._parts.append(f"<p{cls}>{escape(text)}</p>")

    def badge(self, text: str, kind: str) -> str:
        """Markup for a coloured badge (kind: pass, fail, warn, info) to pass to `raw`."""
        return f'<span class="badge {escape(kind)}">{escape(text)}</span>'

    def cards(self, items: Sequence[tuple[str, object]]) -> None:
        body = "".join(
            f'<div class="card"><div class="v">{escape(str(v))}</div><div class="k">{escape(k)}</div></div>' for k, v in items
        )
        self._parts.append(f'<div class="cards">{body}</div>')

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[object]],
        raw_columns: Sequence[int] = (),
        code_columns: Sequence[int] = (),
    ) -> None:
        """A table; cells are escaped except `raw_columns` (already-safe markup built here)."""
        head = "".join(f"<th>{escape(h)}</th>" for h in headers)
        body = []
        for row in rows:
            cells = []
            for i, value in enumerate(row):
                if i in raw_columns:
                    cells.append(f"<td>{value}</td>")
                elif isinstance(value, int | float) and not isinstance(value, bool):
                    text = f"{value:.4g}" if isinstance(value, float) else str(value)
                    cells.append(f'<td class="num">{text}</td>')
                elif i in code_columns:
                    cells.append(f"<td><code>{escape('' if value is None else str(value))}</code></td>")
                else:
                    cells.append(f"<td>{escape('' if value is None else str(value))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        self._parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    def code_block(self, text: str) -> None:
        self._parts.append(f"<pre>{escape(text)}</pre>")

    def svg(self, markup: str, caption: str = "") -> None:
        """Inline SVG produced by `accelport.report.svg` (which escapes its own labels)."""
        cap = f"<figcaption>{escape(caption)}</figcaption>" if caption else ""
        self._parts.append(f"<figure>{markup}{cap}</figure>")

    def png(self, data: bytes, caption: str = "", width: int | None = None) -> None:
        encoded = base64.b64encode(data).decode("ascii")
        size = f' width="{int(width)}"' if width else ""
        cap = f"<figcaption>{escape(caption)}</figcaption>" if caption else ""
        self._parts.append(f'<figure><img alt="{escape(caption)}"{size} src="data:image/png;base64,{encoded}">{cap}</figure>')

    def raw(self, markup: str) -> None:
        """Markup built by the caller from escaped pieces."""
        self._parts.append(markup)

    def render(self) -> str:
        sub = f'<div class="meta">{escape(self.subtitle)}</div>' if self.subtitle else ""
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(self.title)}</title><style>{_CSS}</style></head>"
            f"<body><main><h1>{escape(self.title)}</h1>{sub}{''.join(self._parts)}</main></body></html>\n"
        )
