"""Text scans of the migrate context (usual quote, whole words) find exactly what their reference regexes find."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from accelport.migrate.context import usual_quote

# The definition: a short one-line literal not preceded by a word character or a quote.
_REFERENCE = re.compile(r"""(?<![\w'"])(?:'[^'"\\\n]{0,40}'|"[^'"\\\n]{0,40}")""")


def reference(text: str) -> str:
    quotes = [m.group()[0] for m in _REFERENCE.finditer(text, 0, 50_000)]
    return "'" if quotes.count("'") > quotes.count('"') else '"'


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab_ 'x\"\\\n(é1f", max_size=300))
def test_matches_the_reference_pattern(text):
    assert usual_quote(text) == reference(text)


def test_prefixed_and_adjacent_quotes():
    assert usual_quote("x = f'a' + 'b' + \"c\"") == '"'  # a tie: f'a' is not counted (a prefix letter precedes it)
    assert usual_quote("a = 'x' 'y'\nb = \"z\"") == "'"
    assert usual_quote("s = x' a '\" b \"") == reference("s = x' a '\" b \"")


def test_has_word_is_a_whole_word_search():
    from accelport.migrate.context import _has_word

    for text in ("DEVICE = 1", "x=DEVICE", "(DEVICE)", "DEVICE", "MY_DEVICE", "DEVICES", "DEVICE_2", "éDEVICE", "DEVICEé", "a DEVICEx DEVICE", ""):
        assert _has_word(text, "DEVICE") == (re.search(r"\bDEVICE\b", text) is not None), text
