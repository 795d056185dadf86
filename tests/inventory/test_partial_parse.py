"""Parsing only the statements that hold CUDA tokens must give exactly the findings of a full parse."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accelport.inventory import scan
from accelport.source import chunks

TORCH = Path(torch.__file__).parent


def test_statement_starts_handle_decorators_strings_and_continuations():
    source = '''"""Module docstring
starting at column 0 on its second line
"""
import os
@decorator
@other(1)
def f():
    x = """
text at column zero inside a string
"""
    return x
if os.name:
    pass
else:
    pass
value = 1 + \\
2
class C:
    pass
'''
    lines = chunks.split_lines(source)
    starts = [lines[i].split()[0] for i in chunks.statement_starts(source.encode())]
    assert starts == ["import", "@decorator", "if", "value", "class"]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_the_first_line_and_crlf_files_start_statements_too(newline):
    source = newline.join(["import os", "x = f(", "1)", "@deco", "def g():", "    pass", "else_ = 2", ""])
    assert chunks.statement_starts(source.encode()) == [0, 1, 3, 6]


def test_string_layout_that_is_ambiguous_is_not_guessed():
    # A triple quote inside a one-line string: no line may be taken as inside a docstring.
    source = b"x = '\"\"\"'\ny = torch.cuda.synchronize()\nz = 1  # \"\"\"\n"
    assert chunks.string_edges(source) is None
    assert chunks.statement_starts(source) is None


def test_tokens_after_a_docstring_with_the_other_quote_inside_are_kept():
    from accelport.inventory.python import code_token_lines

    source = b'def f():\n    """Use \'\'\' quotes."""\n    torch.cuda.synchronize()\n'
    assert code_token_lines(source, chunks.string_edges(source)) == {3}


def test_split_lines_counts_like_the_parser():
    # str.splitlines would split at the form feed and shift every later line number.
    assert len(chunks.split_lines("a = 1\x0c\nb = 2\r\nc = 3\rd = 4")) == 4


@pytest.mark.parametrize("package", ["cuda", "amp", "distributed", "utils", "profiler", "backends", "nn/parallel"])
def test_partial_parse_equals_full_parse_on_torch_sources(monkeypatch, package):
    # torch's own sources are full of torch.cuda and device strings: a demanding real corpus.
    root = TORCH / package
    partial = scan([str(root)], jobs=1)
    monkeypatch.setattr("accelport.inventory.python._parse_needed", lambda *args, **kwargs: None)
    full = scan([str(root)], jobs=1)
    assert partial.findings, "the corpus should exercise the scanner"
    assert [f.to_dict() for f in partial.findings] == [f.to_dict() for f in full.findings]
    assert partial.skipped == full.skipped
