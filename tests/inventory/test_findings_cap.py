"""A file with more hits than a report can hold: the first findings are kept, one summary per rule counts the rest."""

from __future__ import annotations

from accelport.inventory import scan
from accelport.inventory.base import SourceFile
from accelport.inventory.python import PythonScanner

SYNC, DEVICE = 300, 50  # hits of two rules, one per line


def _generated(tmp_path):
    path = tmp_path / "generated.py"
    path.write_text("import torch\n" + "torch.cuda.synchronize()\n" * SYNC + "d = torch.cuda.current_device()\n" * DEVICE)
    return path


def _by_rule(findings):
    counts = {}
    for finding in findings:
        counts[finding.rule_id] = counts.get(finding.rule_id, 0) + 1
    return counts


def test_the_uncapped_scan_finds_one_finding_per_generated_line(tmp_path):
    report = scan([str(_generated(tmp_path))], jobs=1, max_findings_per_file=10**9)
    assert len(report.findings) == SYNC + DEVICE
    assert sorted(_by_rule(report.findings).values()) == [DEVICE, SYNC]


def test_findings_beyond_the_cap_become_one_summary_per_rule(tmp_path):
    path = _generated(tmp_path)
    everything = scan([str(path)], jobs=1, max_findings_per_file=10**9).findings
    capped = scan([str(path)], jobs=1, max_findings_per_file=100).findings
    summaries = [f for f in capped if " more " in f.message and "not listed" in f.message]
    listed = [f for f in capped if f not in summaries]
    assert len(listed) == 100
    assert listed == sorted(everything, key=lambda f: f.location.line)[:100]  # the first ones, in file order
    # One summary per rule beyond the cap, at the first finding it stands for, counting every one it replaces.
    total = _by_rule(everything)
    assert len(summaries) == len(total)
    for summary in summaries:
        shown = _by_rule(listed).get(summary.rule_id, 0)
        assert summary.message.startswith(f"{total[summary.rule_id] - shown} more {summary.rule_id} findings in this file")
        assert "keeps its first 100 findings" in summary.message
    first_dropped = min(s.location.line for s in summaries)
    assert first_dropped == listed[-1].location.line + 1


def test_the_scanner_itself_never_holds_more_than_the_cap(tmp_path):
    data = _generated(tmp_path).read_bytes()
    source = SourceFile("generated.py", data, finding_limit=25)
    findings = PythonScanner().scan(source)
    assert len(findings) == 25  # memory stays bounded while the file is walked, not only in the report
    assert sum(count for count, _ in source.dropped.values()) == SYNC + DEVICE - 25


def test_a_cuda_source_is_capped_too(tmp_path):
    path = tmp_path / "many.cu"
    path.write_text("void f(float **p) {\n" + "  cudaMalloc(p, 4);\n" * 200 + "}\n")
    capped = scan([str(path)], jobs=1, max_findings_per_file=50).findings
    malloc = [f for f in capped if f.symbol == "cudaMalloc"]
    assert len(malloc) == 50 + 1
    assert any(f.message.startswith("150 more ") for f in malloc)


def test_a_file_scanned_in_windows_gives_the_findings_of_one_whole_scan():
    from accelport.inventory.python import chunks, code_token_lines, scan_in_windows

    # Imports (walked with every window), an alias whose uses hold no CUDA token, statements
    # over several lines (some across a window's edge), a function body, device strings.
    block = (
        "def step_{i}(x):\n"
        "    y = torch.zeros(\n"
        "        3, device='cuda')\n"
        "    sync()\n"
        "    return x.cuda() + y\n"
        "z_{i} = torch.device('cuda:0')\n"
    )
    text = "import torch\nimport pycuda.autoinit\nfrom torch.cuda import synchronize as sync\n" + "".join(block.format(i=i) for i in range(120))
    data = text.encode()
    whole = PythonScanner().scan(SourceFile("w.py", data))
    wanted = sorted(code_token_lines(data, chunks.LazyEdges(data)))
    windowed = scan_in_windows(SourceFile("w.py", data), wanted, 37, chunks.LazyEdges(data))  # 37: edges inside statements

    def key(f):
        return (f.rule_id, f.location.line, f.location.column, f.message)

    assert len(whole) > 4 * 120 and any(f.symbol.endswith("synchronize") for f in whole)  # the alias was followed
    assert sorted(map(key, windowed)) == sorted(map(key, whole))  # nothing lost, nothing twice
