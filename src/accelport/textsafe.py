"""The one sanitizer for text that reaches a terminal: file names, source lines and messages from user files.

A file name or a source line can hold ESC sequences (which recolour, move the
cursor, retitle the window or hide what follows), other control characters, or
Unicode bidirectional overrides (which reorder what is shown, "Trojan Source",
CVE-2021-42574). Every renderer that prints such text passes it through here;
each of these characters is shown as a visible escape (`\\x1b`, `\\u202e`) rather
than acted on, so nothing is lost and nothing is hidden. Markdown cells have their
own sanitizer (`accelport.report.markdown`), which calls this one first.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline (those two are handled by the caller's choice),
# DEL, the C1 controls (U+0080-U+009F: 8-bit CSI and OSC), and the bidi embeddings,
# overrides and isolates, plus the line and paragraph separators.
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(text: object) -> str:
    """`text` safe to print: control characters shown as escapes; newlines and tabs kept (a whole report)."""
    value = "" if text is None else str(text)
    if value.isascii() and value.isprintable():
        return value  # the common case, checked in C
    return _UNSAFE_KEEP_LINES.sub(_visible, value)


def one_line(text: object) -> str:
    """`text` safe to print as one line or one table cell: newlines and tabs are escaped too."""
    value = "" if text is None else str(text)
    if value.isascii() and value.isprintable():
        return value
    return _UNSAFE_ONE_LINE.sub(_visible, value)
