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

# C0 controls except tab and newline (and a carriage return that ends a CRLF line), DEL,
# the C1 controls (U+0080-U+009F: 8-bit CSI and OSC), the bidi embeddings, overrides and
# isolates, and the line and paragraph separators.
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]|\r(?!\n)")
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# Colour and weight (SGR: ESC [ digits m) are what accelport's own styling writes, and all it writes.
_STYLED = re.compile("(\x1b\\[[0-9;]*m)|" + _UNSAFE_KEEP_LINES.pattern)
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named:
        return named
    code = ord(char)
    # DEL and above as \uXXXX: in a JSON string printed raw (ensure_ascii=False) that is the
    # character's own JSON escape, so the sanitized text still parses to the same value.
    return f"\\x{code:02x}" if code < 0x7F else f"\\u{code:04x}"


def _visible_unless_style(match: re.Match[str]) -> str:
    return match.group() if match.group(1) else _visible(match)


def terminal(text: object, styled: bool = False) -> str:
    """`text` safe to print: control characters shown as escapes; newlines and tabs kept (a whole report).

    With `styled`, colour sequences (SGR, which accelport's own styling writes) are kept too.
    """
    value = "" if text is None else str(text)
    if styled:
        return _STYLED.sub(_visible_unless_style, value)
    if not _UNSAFE_KEEP_LINES.search(value):
        return value  # the common case, checked in C
    return _UNSAFE_KEEP_LINES.sub(_visible, value)


class Styled(str):
    """Text accelport styled itself (colour around its own words): kept as is by the sanitizers."""

    __slots__ = ()


def one_line(text: object) -> str:
    """`text` safe to print as one line or one table cell: newlines and tabs are escaped too."""
    if isinstance(text, Styled):
        return text
    value = "" if text is None else str(text)
    if value.isascii() and value.isprintable():
        return value
    return _UNSAFE_ONE_LINE.sub(_visible, value)


_GIT_NAMED = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r",
              '"': '\\"', "\\": "\\\\"}  # fmt: skip
_GIT_UNSAFE = re.compile('["\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]')


def _git_escape(match: re.Match[str]) -> str:
    char = match.group()
    return _GIT_NAMED.get(char) or "".join(f"\\{byte:03o}" for byte in char.encode("utf-8"))


def diff_path(path: str) -> str:
    """A path for a diff header (`--- a/PATH`), quoted the way git writes and `git apply` reads it
    ("a/in\\033[31m.py") when it holds control characters, quotes or backslashes; as is otherwise."""
    if not _GIT_UNSAFE.search(path):
        return path
    return '"' + _GIT_UNSAFE.sub(_git_escape, path) + '"'
