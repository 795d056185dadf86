"""Inline `# accelport: APxxxx: ...` markers: how `migrate` writes them and how the scanner recognises them.

A marker sits at the end of the physical line where a finding starts and says what
to do by hand. A finding whose line carries a marker for its rule is reported as
acknowledged: it is still there (it still needs the manual work), but it is known.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import replace

from accelport.findings import Finding

MARKER_WORD = b"accelport:"
_RULE_IN_COMMENT = re.compile(r"#\s*accelport:\s*(AP\d{4})\b")


def format_marker(rule_id: str, text: str) -> str:
    """The comment `migrate` appends to a line: `# accelport: AP1403: <what to do>`."""
    return f"# accelport: {rule_id}: {text}"


def comment_of(line: str) -> str:
    """The `#` comment at the end of one physical line ('' when there is none).

    Tokenizes just this line, so a `#` inside a string is not mistaken for a comment.
    A line that continues an open bracket tokenizes fine up to its end.
    """
    if "#" not in line:
        return ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return token.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass  # an open bracket or string at the end of the line: tokens before it were seen
    return ""


def marked_rules(line: str) -> set[str]:
    """Rule IDs with a marker in this line's comment."""
    comment = comment_of(line)
    return set(_RULE_IN_COMMENT.findall(comment)) if comment else set()


def acknowledge(findings: Iterable[Finding], lines: list[str]) -> list[Finding]:
    """Findings with `acknowledged` set where their first line carries a marker for their rule."""
    cache: dict[int, set[str]] = {}
    out = []
    for finding in findings:
        line = finding.location.line
        if line not in cache:
            text = lines[line - 1] if 1 <= line <= len(lines) else ""
            cache[line] = marked_rules(text) if "accelport:" in text else set()
        if finding.rule_id in cache[line]:
            finding = replace(finding, acknowledged=True)
        out.append(finding)
    return out
