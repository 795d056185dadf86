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


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab \n\r\x0c\u2028é", max_size=120))
def test_line_starts_are_where_each_line_break_ends(text):
    # Python's parser counts \r\n, \r and \n as line breaks (not \x0c or \u2028): the
    # index must agree with it whichever way it is built.
    from accelport.migrate.source import SourceIndex

    expected = [0] + [m.end() for m in re.finditer(r"\r\n|\n|\r", text)]
    assert SourceIndex.from_tree(text, None).line_starts == expected


def test_unused_import_check_sees_torch_cuda_imports_with_or_without_the_quick_test():
    from accelport.migrate.codemods.imports import unused_import_edits

    before = "from torch.cuda import amp\nx = amp.autocast()\n"
    after = "from torch.cuda import amp\nx = torch.amp.autocast('cuda')\n"
    edits = unused_import_edits(before, after)
    assert [after[e.start : e.end].strip() for e in edits] == ["from torch.cuda import amp"]
    assert unused_import_edits(before, "import torch\nx = torch.amp.autocast('xpu')\n") == []
