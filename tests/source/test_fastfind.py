"""The compiled token search gives exactly what one `bytes.find` loop per token gives, and the scan is the same without it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelport.native
from accelport.inventory import scan
from accelport.inventory.python import _NEEDLES, code_token_lines, wants
from accelport.source import fastfind

HAVE_CC = accelport.native.compiler() is not None


def by_regex(data: bytes, needles: tuple[bytes, ...], stop: int = 0) -> list[int]:
    """An independent reference: overlapping regex matches per needle, thinned to what repeated find returns."""
    marks = []
    for index, needle in enumerate(needles):
        last_end = -1
        for match in re.finditer(b"(?=" + re.escape(needle) + b")", data):
            if match.start() >= last_end:
                marks.append(match.start() << 5 | index)
                last_end = match.start() + len(needle)
    marks.sort()
    for position, mark in enumerate(marks):
        if stop >> (mark & 31) & 1:
            return marks[: position + 1]
    return marks


@pytest.fixture
def compiled(tmp_path, monkeypatch):
    if not HAVE_CC:
        pytest.skip("no C compiler on this machine: the pure-Python search is the one in use (tested below)")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(accelport.native.ENV_VAR, raising=False)
    fastfind.reset()
    assert fastfind.prepare()
    yield fastfind._native()
    fastfind.reset()


alphabet = st.sampled_from([b"a", b"b", b"c", b"ab", b"aa", b"cud", b"CUDA", b"\n", b"import", b"nccl", b"\x00", b"\xff"])
needle_sets = st.lists(
    st.lists(st.sampled_from(b"abc\n\x00\xff"), min_size=2, max_size=5).map(bytes), min_size=1, max_size=32, unique=True
).map(tuple)


@settings(max_examples=300, deadline=None)
@given(data=st.lists(alphabet, max_size=80).map(b"".join), needles=needle_sets, stop_bits=st.integers(0, 2**32 - 1))
def test_python_twin_matches_an_independent_reference(data, needles, stop_bits):
    stop = stop_bits & ((1 << len(needles)) - 1)
    assert fastfind.find_all_python(data, needles, stop) == by_regex(data, needles, stop)


def test_compiled_search_equals_the_python_twin_on_random_input(compiled):
    # Self-overlapping needles (aa, aba) and needles that are prefixes of others (ab, abc)
    # are where a one-pass search most easily differs from one find loop per needle.
    @settings(max_examples=400, deadline=None)
    @given(data=st.lists(alphabet, max_size=120).map(b"".join), needles=needle_sets, stop_bits=st.integers(0, 2**32 - 1))
    def check(data, needles, stop_bits):
        stop = stop_bits & ((1 << len(needles)) - 1)
        assert compiled.find_all(data, needles, stop) == fastfind.find_all_python(data, needles, stop)

    check()
    for needles in [(b"aa", b"aba", b"ab", b"abc"), _NEEDLES]:
        data = b"aaaabacababcaba cuda CUDA nccl import torch.cuda.nvtx NVIDIA_TF32 ProfilerActivity" * 50
        assert compiled.find_all(data, needles, 0) == fastfind.find_all_python(data, needles)


def test_more_occurrences_than_the_buffer_holds_fall_back_to_python(compiled):
    data = b"cud" * (fastfind._CAP + 10)
    assert compiled.find_all(data, _NEEDLES, 0) is None  # the helper says it ran out of room
    marks = fastfind.find_all(data, _NEEDLES)
    assert len(marks) == fastfind._CAP + 10 and marks == fastfind.find_all_python(data, _NEEDLES)


def test_the_helper_is_built_once_and_then_loaded(compiled, monkeypatch):
    path = compiled.path
    assert path.parent.name == "native" and path.exists()
    fastfind.reset()
    monkeypatch.setattr(accelport.native, "build_library", lambda *a: pytest.fail("built a second time"))
    assert fastfind.prepare() and fastfind._native().path == path


def test_no_compiler_or_turned_off_means_the_python_search(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    fastfind.reset()
    try:
        assert not fastfind.prepare()
        monkeypatch.delenv("CC")
        fastfind.reset()
        monkeypatch.setenv(accelport.native.ENV_VAR, "0")
        assert not fastfind.prepare()
        data = b"import os\nx = torch.cuda.synchronize()\n"
        assert wants(data) and code_token_lines(data) == {2}
    finally:
        fastfind.reset()


def test_a_tree_scans_the_same_with_and_without_the_helper(compiled, tmp_path, monkeypatch):
    # Near misses and hits side by side: the pre-filter and the token lines decide what is parsed.
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text(
        "import os\nimport apex\n# torch.cuda in a comment\nx = 'ckpt/cuda_resnet50.pt'\n"
        "cuda_graphs = 1\nmodel.cuda()\nscaler = torch.cuda.amp.GradScaler()\n"
        'dist.init_process_group(backend="nccl")\n'
    )
    (tree / "b.py").write_text('"""torch.cuda in a docstring"""\nimport os\n')
    (tree / "c.py").write_text("from flash_attn import flash_attn_func\n")
    (tree / "d.py").write_text("print('nothing here')\n")
    with_helper = scan([str(tree)], jobs=1)
    fastfind.reset()
    monkeypatch.setenv(accelport.native.ENV_VAR, "0")
    without = scan([str(tree)], jobs=1)
    assert {Path(f.location.path).name for f in with_helper.findings} == {"a.py", "c.py"}
    assert [f.to_dict() for f in with_helper.findings] == [f.to_dict() for f in without.findings]


# Pieces of Python-like text where the three scanner loops make their decisions: quotes
# of both kinds (single and triple), comments, continuations, CR/LF line ends, tokens
# that are or are not whole words, paths, environment variables, import lines.
PIECES = [
    b"\n", b"\r\n", b"\r", b" ", b"\t", b"#", b"\\", b'"', b"'", b'"""', b"'''", b"x", b"_", b".", b"/", b"@",
    b"cuda", b"CUDA", b"cuda_graphs", b"is_cuda", b"nccl", b"NCCL_DEBUG", b"CUDA_VISIBLE_DEVICES", b"CUDA_",
    b"TORCH_CUDA_ARCH_LIST", b"CUBLASLT_X", b"nvtx", b"GradScaler", b"pin_memory", b"cud",
    b"import ", b"from ", b"import", b"apex", b"flash_attn", b"torch", b"def ", b"class ", b"async ", b"else",
    b"elif", b"except:", b"finally", b"@deco", b"(", b")", b"=", b"1",
]  # fmt: skip
python_like = st.lists(st.sampled_from(PIECES), max_size=60).map(b"".join)


def test_compiled_scanner_loops_equal_their_python_twins_on_random_input(compiled):
    from accelport.inventory.python import chunks, code_token_lines

    def both(function, *args):
        """The function's answer with the compiled helper, and with the pure-Python twin."""
        fast = function(*args)
        fastfind._state["native"] = None
        try:
            slow = function(*args)
        finally:
            fastfind._state["native"] = compiled
        return fast, slow

    @settings(max_examples=600, deadline=None)
    @given(data=python_like)
    def check(data):
        fast, slow = both(chunks.string_edges, data)
        assert fast == slow
        fast_starts, slow_starts = both(chunks.statement_starts, data, slow)
        assert fast_starts == slow_starts
        for edges in (None, slow):
            fast, slow_lines = both(code_token_lines, data, edges)
            assert fast == slow_lines
        fast, slow_lines = both(lambda d: code_token_lines(d, chunks.LazyEdges(d)), data)
        assert fast == slow_lines

    check()
    # Corners random text seldom builds: a path segment on either side, a whole-word
    # token on an import line that the anchor rule alone would drop, comments and strings.
    corners = [b"x = a/cuda\n", b"x = cuda/b\n", b"import a/cuda\n", b"import a/CUDA\n", b"from\tapex import amp\n",
               b"  import flash_attn # cuda\n", b"s = '#'; y.cuda()\n", b'"""\nx.cuda()\n"""\ny.cuda()\n',
               b"CUDA_VISIBLE_DEVICES_=1\nTORCH_CUDA_ARCH_LIST\nCUDA_\n", b"#!\\\ncuda\r\n@x\ndef f(): pass\n"]  # fmt: skip
    for data in corners:
        for edges in (None, chunks.string_edges_python(data)):
            assert both(code_token_lines, data, edges)[0] == both(code_token_lines, data, edges)[1], data
        fast, slow = both(chunks.string_edges, data)
        assert fast == slow
        if slow is not None:
            assert both(chunks.statement_starts, data, slow)[0] == both(chunks.statement_starts, data, slow)[1]
