"""migrate's guarantees: output parses, a second run changes nothing, nothing but findings is touched,
unparsable files are reported and left alone, and what inventory finds afterwards is exactly the markers."""

from __future__ import annotations

import ast
import difflib
import io
import json
import re
import tokenize
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelport.errors import UserError
from accelport.inventory import scan
from accelport.migrate import Options, migrate, migrate_source, parse_select
from accelport.migrate.writing import write_files
from accelport.source.markers import marked_rules

GOLDEN = Path(__file__).parent / "data" / "golden"
INPUTS = sorted(GOLDEN.glob("*.input.py"))
DEVICE_STRINGS = {"cuda", "nccl", "CUDA_VISIBLE_DEVICES"}


def tokens(text: str, kind: int) -> list[str]:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == kind]


def docstrings(text: str) -> list[str]:
    tree = ast.parse(text)
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return [d for d in (ast.get_docstring(n, clean=False) for n in nodes) if d]


_QUOTED_DEVICE = re.compile(r"""['"](?:cuda(?::\d+)?|nccl|CUDA_VISIBLE_DEVICES)['"]""")


def is_device_literal(token: str) -> bool:
    """A string migrate may rewrite: a device name itself, or an f-string with one inside."""
    if token.lower().startswith(("f", "rf", "fr")):
        return token.lower().lstrip("rf")[1:].startswith("cuda:") or _QUOTED_DEVICE.search(token[2:-1]) is not None
    value = ast.literal_eval(token)
    return isinstance(value, str) and (value in DEVICE_STRINGS or value.startswith("cuda:"))


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_comments_docstrings_and_other_strings_survive(path):
    source = path.read_text()
    migrated = migrate_source(source, path.name).migrated
    for comment in tokens(source, tokenize.COMMENT):
        assert migrated.count(comment) >= source.count(comment), comment
    assert docstrings(migrated) == docstrings(source)
    kept = [t for t in tokens(source, tokenize.STRING) if not is_device_literal(t)]
    for literal in kept:
        assert migrated.count(literal) >= source.count(literal), literal


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_only_lines_with_findings_change(path, findings_in):
    """Formatting elsewhere is untouched: every changed or removed line held a finding."""
    source = path.read_text()
    finding_lines = {line for f in findings_in(source) for line in range(f.location.line, f.location.end_line + 1)}
    before, after = source.splitlines(), migrate_source(source, path.name).migrated.splitlines()
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            changed = set(range(i1 + 1, i2 + 1))
            assert changed <= finding_lines, (tag, [before[i - 1] for i in sorted(changed - finding_lines)])


def test_unparsable_file_is_reported_and_left_alone(tmp_path, cli):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nx = torch.cuda.synchronize(\n")
    good = tmp_path / "good.py"
    good.write_text("import torch\ntorch.cuda.synchronize()\n")
    result = migrate([str(tmp_path)], jobs=1)
    assert [s.path for s in result.skipped] == [str(broken)]
    assert "does not parse" in result.skipped[0].reason
    outcome = cli("migrate", tmp_path, "--write", "--force", "--changes", "-")
    assert outcome.code == 1  # something was left alone: never a silent success
    assert "broken.py" in outcome.out and "does not parse" in outcome.out
    assert broken.read_text() == "import torch\nx = torch.cuda.synchronize(\n"
    assert "torch.accelerator.synchronize()" in good.read_text()


def test_write_leaves_alone_a_file_broken_away_from_its_findings(tmp_path, cli):
    broken = tmp_path / "elsewhere.py"
    text = "import torch\n\n\ndef ok():\n    torch.cuda.synchronize()\n\n\ndef broken(:\n    pass\n"
    broken.write_text(text)
    outcome = cli("migrate", tmp_path, "--write", "--force", "--changes", "-")
    assert outcome.code == 1 and "elsewhere.py: does not parse" in outcome.out
    assert broken.read_text() == text


def test_migrated_example_has_only_markers_left(migrated_app):
    findings = [f for f in scan([str(migrated_app)], jobs=1).findings if f.location.path.endswith(".py")]
    assert findings, "the example keeps some manual work"
    assert [f for f in findings if f.autofix] == []
    found = {(Path(f.location.path).name, f.location.line, f.rule_id) for f in findings}
    markers = {
        (path.name, number, rule)
        for path in migrated_app.glob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for rule in marked_rules(line)
    }
    assert found == markers
    assert all(f.acknowledged for f in findings)


def test_second_run_on_the_example_changes_nothing(migrated_app):
    again = migrate([str(migrated_app)], jobs=1)
    assert again.changed_files == []
    assert again.files == []  # every finding left is acknowledged by its marker
    # The CUDA extension and the pinned requirements are route-B work: counted, never rewritten.
    assert {Path(n.path).name for n in again.not_python} == {"CMakeLists.txt", "rms_norm_kernel.cu", "requirements-cuda.txt"}


def test_line_breaks_indentation_and_bom_are_kept(tmp_path):
    crlf = "import torch\r\n\r\ndef f(x):\r\n\tif x:\r\n\t\ttorch.cuda.synchronize()\r\n\treturn x.cuda()\r\n"
    result = migrate_source(crlf, "crlf.py")
    expected = (
        "import torch\r\n\r\nDEVICE = torch.accelerator.current_accelerator() or torch.device(\"cpu\")\r\n\r\n"
        "def f(x):\r\n\tif x:\r\n\t\tif torch.accelerator.is_available():\r\n\t\t\ttorch.accelerator.synchronize()\r\n"
        "\treturn x.to(DEVICE)\r\n"
    )
    assert result.migrated == expected
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbfimport torch\ntorch.cuda.empty_cache()\n")
    write_files(migrate([str(path)], jobs=1).files)
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbfimport torch\n") and b"torch.accelerator.empty_cache()" in data


def test_device_name_already_taken_is_not_shadowed():
    source = 'import torch\nDEVICE = "tpu"\n\n\ndef f(x):\n    return x.cuda()\n'
    migrated = migrate_source(source, "taken.py").migrated
    assert 'DEVICE = "tpu"' in migrated
    assert "ACCEL_DEVICE = torch.accelerator.current_accelerator()" in migrated
    assert "return x.to(ACCEL_DEVICE)" in migrated
    assert migrate_source(migrated, "taken.py").migrated == migrated


def test_module_without_torch_import_gets_one():
    source = '"""Helpers."""\nfrom torch.cuda import synchronize\n\n\ndef wait():\n    synchronize()\n'
    expected = (
        '"""Helpers."""\nimport torch\n\n\n'
        "def wait():\n    if torch.accelerator.is_available():\n        torch.accelerator.synchronize()\n"
    )
    assert migrate_source(source, "helpers.py").migrated == expected


def test_module_level_use_before_imports_end_gets_its_device_first():
    source = 'import torch\nx = torch.zeros(2, device="cuda")\nimport os\n'
    migrated = migrate_source(source, "early.py").migrated
    assert migrated == (
        'import torch\n\nDEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")\n'
        'x = torch.zeros(2, device=DEVICE)\nimport os\n'
    )


def test_target_npu_adds_a_guarded_adapter_import_only():
    from accelport.migrate import Options

    source = "import torch\n\n\ndef f(x):\n    return x.cuda()\n"
    migrated = migrate_source(source, "npu.py", options=Options(target="npu")).migrated
    assert "try:\n    import torch_npu  # noqa: F401\nexcept ImportError:\n    pass\n" in migrated
    assert '"npu"' not in migrated and "x.to(DEVICE)" in migrated
    ast.parse(migrated)


# A pool of statements: CUDA API uses, near misses, and plain code, combined at random.
STATEMENTS = [
    "x = x.cuda()",
    'y = y.to("cuda", non_blocking=True)',
    "torch.cuda.synchronize()",
    "n = torch.cuda.device_count() + 1",
    "assert x.is_cuda, 'on the GPU'",
    'path = "/ckpt/cuda_resnet50.pt"',
    "cuda_graphs = False  # torch.cuda graphs later",
    "torch.backends.cudnn.benchmark = True",
    "peak = torch.cuda.max_memory_allocated() / 2**20",
    'if x.device.type == "cuda":\n        pass',
    "with torch.cuda.amp.autocast():\n        x = x * 2",
    'os.environ["CUDA_VISIBLE_DEVICES"] = "0"',
    'dist.init_process_group(backend="nccl")',
    "value = (1 +\n             2)",
    "s = torch.cuda.Stream(); e = torch.cuda.Event()",
    'print(f"{torch.version.cuda}")',
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=8))
def test_random_programs_parse_are_idempotent_and_keep_other_lines(statements):
    body = "\n".join(f"    {s}" for s in statements)
    source = f"import os\n\nimport torch\nimport torch.distributed as dist\n\n\ndef step(x, y):\n{body}\n    return x\n"
    migrated = migrate_source(source, "random.py").migrated
    ast.parse(migrated)
    assert migrate_source(migrated, "random.py").migrated == migrated
    for line in source.splitlines():
        if "cuda" not in line.lower() and "nccl" not in line:
            assert line in migrated


def test_notebooks_and_stubs_with_findings_are_reported_not_rewritten(tmp_path):
    notebook = tmp_path / "explore.ipynb"
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": ["import torch\n", "x = torch.zeros(2).cuda()\n"]}
    notebook.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    stub = tmp_path / "api.pyi"
    stub.write_text("import torch\ndef f(x: torch.cuda.FloatTensor) -> None: ...\n")
    before = notebook.read_bytes(), stub.read_bytes()
    result = migrate([str(tmp_path)], jobs=1)
    reasons = {Path(s.path).name: s.reason for s in result.skipped}
    assert reasons["explore.ipynb"].startswith("notebooks are not rewritten")
    assert reasons["api.pyi"].startswith("type stubs are not rewritten")
    write_files(result.files)
    assert (notebook.read_bytes(), stub.read_bytes()) == before


def test_write_follows_symlinks_and_refuses_files_changed_meanwhile(tmp_path):
    real = tmp_path / "real.py"
    real.write_text("import torch\ntorch.cuda.synchronize()\n")
    link = tmp_path / "link" / "linked.py"
    link.parent.mkdir()
    link.symlink_to(real)
    result = migrate([str(link)], jobs=1)
    write_files(result.files)
    assert link.is_symlink() and "torch.accelerator.synchronize()" in real.read_text()

    other = tmp_path / "other.py"
    other.write_text("import torch\ntorch.cuda.empty_cache()\n")
    pending = migrate([str(other)], jobs=1)
    other.write_text("import torch\ntorch.cuda.empty_cache()\nprint('edited meanwhile')\n")
    with pytest.raises(UserError, match="changed on disk since it was read"):
        write_files(pending.files)
    assert other.read_text().endswith("print('edited meanwhile')\n")


@pytest.mark.parametrize("case", ["torch_cuda", "imports"])
def test_half_migrated_code_gets_no_second_guard(case):
    """`if torch.accelerator.is_available(): torch.cuda.synchronize()` (availability migrated first)
    ends as a whole migration does: the call is already guarded, no nested test is added."""
    source = (GOLDEN / f"{case}.input.py").read_text()
    expected = (GOLDEN / f"{case}.expected.py").read_text()
    availability_first = migrate_source(source, f"{case}.py", options=Options(select=parse_select(["AP1101"]))).migrated
    assert availability_first != source
    assert migrate_source(availability_first, f"{case}.py").migrated == expected


def test_adjacent_seeds_become_one_and_comments_stay():
    source = (
        "import torch\n\n"
        "torch.manual_seed(0)\n"
        "torch.cuda.manual_seed_all(0)\n\n\n"
        "def seed(s):\n"
        "    torch.cuda.manual_seed(s)\n"
        "    torch.cuda.manual_seed_all(s)  # every GPU\n"
        "    torch.cuda.manual_seed_all(s + 1)\n"
    )
    # The CPU generator is left alone, as torch.cuda's seeding left it; adjacent guards are one.
    seed_all = 'getattr(torch.get_device_module(DEVICE), "manual_seed_all", torch.manual_seed)'
    expected = (
        "import torch\n\n"
        'DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")\n\n'
        "torch.manual_seed(0)\n\n\n"
        "def seed(s):\n"
        "    if torch.accelerator.is_available():\n"
        "        torch.get_device_module(DEVICE).manual_seed(s)\n"
        f"        {seed_all}(s)  # every GPU\n"
        f"        {seed_all}(s + 1)\n"
    )
    for whole_file in (False, True):  # --diff/--check parse only what has findings; --write the whole file
        result = migrate_source(source, "seeds.py", options=Options(whole_file=whole_file))
        assert result.migrated == expected
        assert migrate_source(result.migrated, "seeds.py").changes == []
