"""The binary scanner on ELF files gcc builds at test time (no CUDA needed), and the example's full report."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import jsonschema
import pytest

from accelport.findings import BackendStatus, Category, Route, report_schema
from accelport.inventory import scan
from accelport.inventory.base import ScanSkipped, SourceFile
from accelport.inventory.binary import BinaryScanner, parse_fatbin

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy_cuda_app"
GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed: the ELF fixtures are compiled at test time")


def fatbin_blob() -> bytes:
    """A fat-binary container as nvcc lays it out: one SASS entry for sm_80, one PTX entry for compute_90."""
    entries = b""
    for kind, arch, payload in ((2, 80, b"\x7fELF" + b"\0" * 12), (1, 90, b".version 8.0\0\0\0\0")):
        header = struct.pack("<HHIQIIHHI", kind, 0x0101, 64, len(payload), 0, 0, 0, 8, arch).ljust(64, b"\0")
        entries += header + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entries)) + entries


def c_bytes(blob: bytes) -> str:
    return ", ".join(str(b) for b in blob)


@pytest.fixture(scope="module")
def elf_dir(tmp_path_factory) -> Path:
    """libcudart.so.12 (a stub defining cudaMalloc) and libfastnorm.so, which needs it and embeds a fatbin."""
    if GCC is None:
        pytest.skip("gcc is not installed: the ELF fixtures are compiled at test time")
    out = tmp_path_factory.mktemp("elf")
    (out / "stub.c").write_text("int cudaMalloc(void **p, unsigned long n) { (void)p; (void)n; return 0; }\n")
    (out / "user.c").write_text(
        "extern int cudaMalloc(void **p, unsigned long n);\n"
        "extern int cudaFree(void *p);\n"
        f'__attribute__((section(".nv_fatbin"), used)) static const unsigned char fatbin[] = {{{c_bytes(fatbin_blob())}}};\n'
        "int fast_norm_alloc(void **p) { return cudaMalloc(p, 16) + cudaFree(*p); }\n"
    )
    def gcc(*args: str) -> None:
        subprocess.run([GCC, *args], cwd=out, check=True, capture_output=True, timeout=60)

    gcc("-shared", "-fPIC", "-o", "libcudart.so.12", "-Wl,-soname,libcudart.so.12", "stub.c")
    gcc("-shared", "-fPIC", "-o", "libfastnorm.so", "user.c", "-L.", "-l:libcudart.so.12", "-Wl,--allow-shlib-undefined")
    return out


def scan_bytes(name: str, data: bytes):
    return BinaryScanner().scan(SourceFile(name, data))


@needs_gcc
def test_needed_library_undefined_symbols_and_fatbin_architectures(elf_dir):
    findings = {f.rule_id: f for f in scan_bytes("libfastnorm.so", (elf_dir / "libfastnorm.so").read_bytes())}
    assert set(findings) == {"AP7001", "AP7002", "AP7003"}
    assert findings["AP7001"].symbol == "libcudart.so.12"
    assert "cudaFree" in findings["AP7002"].message and "cudaMalloc" in findings["AP7002"].message
    assert findings["AP7003"].symbol == "compute_90 sm_80"
    for finding in findings.values():
        assert finding.category is Category.BINARY
        assert finding.route is Route.C
        assert finding.backends["cuda"] is BackendStatus.OK
        assert finding.backends["npu"] is BackendStatus.UNSUPPORTED


@needs_gcc
def test_a_library_that_only_defines_cuda_names_needs_nothing(elf_dir):
    # The stub exports cudaMalloc; it neither needs CUDA libraries nor imports CUDA symbols.
    assert scan_bytes("libcudart.so.12", (elf_dir / "libcudart.so.12").read_bytes()) == []


@needs_gcc
def test_elf_inside_a_wheel_names_the_member(elf_dir, tmp_path):
    wheel = tmp_path / "fastnorm-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(elf_dir / "libfastnorm.so", "fastnorm/libfastnorm.so")
        archive.writestr("fastnorm/__init__.py", "")
        archive.writestr("fastnorm-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fastnorm\nRequires-Dist: numpy\nRequires-Dist: nvidia-cuda-runtime-cu12==12.4.127\n")
    findings = scan_bytes(wheel.name, wheel.read_bytes())
    assert {f.rule_id for f in findings} == {"AP7001", "AP7002", "AP7003", "AP8101"}
    assert all("fastnorm/libfastnorm.so" in f.message for f in findings if f.rule_id.startswith("AP7"))
    [dependency] = [f for f in findings if f.rule_id == "AP8101"]
    assert dependency.symbol == "nvidia-cuda-runtime-cu12"
    assert dependency.snippet.startswith("fastnorm-1.0.dist-info/METADATA:4:")


def _wheel_with(tmp_path: Path, members: dict[str, bytes]) -> Path:
    wheel = tmp_path / "parts-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, blob in members.items():
            archive.writestr(name, blob)
    return wheel


@needs_gcc
def test_wheel_member_over_the_cap_is_a_skipped_part_and_the_rest_is_scanned(elf_dir, tmp_path):
    lib = (elf_dir / "libfastnorm.so").read_bytes()
    wheel = _wheel_with(tmp_path, {"a/libfastnorm.so": lib, "b/libbig.so": lib + b"\0" * 4096})
    scanner = BinaryScanner()
    scanner.max_member_bytes = len(lib) + 1024  # a small cap: the padded copy is over it
    source = SourceFile(wheel.name, wheel.read_bytes())
    findings = scanner.scan(source)
    assert {f.rule_id for f in findings} == {"AP7001", "AP7002", "AP7003"}
    assert all("a/libfastnorm.so" in f.message for f in findings)
    [(part, reason)] = source.skipped_parts
    assert part == "b/libbig.so"
    assert f"{len(lib) + 4096} bytes is over the {len(lib) + 1024} bytes limit" in reason


@needs_gcc
def test_truncated_and_corrupt_wheel_members_are_skipped_parts_with_reasons(elf_dir, tmp_path):
    lib = (elf_dir / "libfastnorm.so").read_bytes()
    corrupt = lib[:-1] + b"\x5a"  # marks the member so its bytes can be found and damaged below
    wheel = _wheel_with(tmp_path, {"a/libfastnorm.so": lib, "c/libcut.so": lib[: len(lib) // 3], "d/libcrc.so": corrupt})
    data = bytearray(wheel.read_bytes())
    at = data.find(corrupt)
    data[at + 100] ^= 0xFF  # the stored bytes no longer match the CRC in the directory
    source = SourceFile(wheel.name, bytes(data))
    findings = BinaryScanner().scan(source)
    assert {f.rule_id for f in findings} == {"AP7001", "AP7002", "AP7003"}
    reasons = dict(source.skipped_parts)
    assert set(reasons) == {"c/libcut.so", "d/libcrc.so"}
    assert "ELF" in reasons["c/libcut.so"] and "truncated" in reasons["c/libcut.so"]
    assert "cannot be read" in reasons["d/libcrc.so"] and "CRC" in reasons["d/libcrc.so"]


@needs_gcc
def test_skipped_wheel_members_reach_the_report_and_the_exit_code(elf_dir, tmp_path, cli):
    lib = (elf_dir / "libfastnorm.so").read_bytes()
    wheel = _wheel_with(tmp_path, {"a/libfastnorm.so": lib, "c/libcut.so": lib[: len(lib) // 3]})
    report = scan([str(wheel)], jobs=1)
    assert report.files_scanned == 1
    assert {f.rule_id for f in report.findings} == {"AP7001", "AP7002", "AP7003"}
    assert [s.path for s in report.skipped] == [f"{wheel}!c/libcut.so"]
    result = cli("inventory", wheel)
    assert result.code == 1
    assert f"{wheel}!c/libcut.so:" in result.out
    assert cli("inventory", wheel, "--allow-skipped").code == 0


def test_fatbin_member_of_a_wheel_is_read(tmp_path):
    wheel = _wheel_with(tmp_path, {"k/kernels.fatbin": fatbin_blob(), "k/notes.fatbin": b"not a fatbin"})
    [finding] = scan_bytes(wheel.name, wheel.read_bytes())
    assert (finding.rule_id, finding.symbol) == ("AP7003", "compute_90 sm_80")
    assert "k/kernels.fatbin" in finding.message


def test_fatbin_parser_reads_every_entry_and_stops_at_garbage():
    entries = parse_fatbin(fatbin_blob() + b"\0" * 8 + fatbin_blob())
    assert [e.label for e in entries] == ["sm_80", "compute_90", "sm_80", "compute_90"]
    assert parse_fatbin(fatbin_blob()[:40]) == []  # truncated inside the first entry header
    assert parse_fatbin(b"\x50\xed\x55\xba" + b"\xff" * 12) == []


def test_non_elf_files_named_like_libraries_are_skipped_with_a_reason():
    with pytest.raises(ScanSkipped, match="linker script"):
        scan_bytes("libc.so", b"/* GNU ld script */\nGROUP ( /lib/libc.so.6 )\n")
    with pytest.raises(ScanSkipped, match="not an ELF"):
        scan_bytes("libx.so.1", b"\x00\x01\x02garbage")
    with pytest.raises(ScanSkipped, match="not a"):
        scan_bytes("broken.whl", b"PK\x03\x04" + b"\0" * 40)


@needs_gcc
def test_truncated_elf_is_skipped_not_crashed(elf_dir):
    data = (elf_dir / "libfastnorm.so").read_bytes()
    for cut in (8, 40, 64, 200, len(data) // 2, len(data) - 10):
        try:
            scan_bytes("libfastnorm.so", data[:cut])
        except ScanSkipped as exc:
            assert "ELF" in str(exc)


@needs_gcc
def test_example_report_has_every_category(elf_dir, tmp_path):
    """The example app plus a prebuilt vendor library: all nine categories in one inventory."""
    app = tmp_path / "legacy_cuda_app"
    shutil.copytree(EXAMPLE, app)
    (app / "prebuilt").mkdir()
    shutil.copy(elf_dir / "libfastnorm.so", app / "prebuilt" / "libfastnorm.so")
    report = scan([str(app)], jobs=1)
    assert report.skipped == []
    by_category = report.summary()["by_category"]
    assert all(by_category[c.value] > 0 for c in Category), by_category
    # The kernel carries its route-B signal; the prebuilt binary pushes the project to route C.
    [kernel] = [f for f in report.findings if f.rule_id == "AP5001"]
    assert kernel.symbol == "rms_norm_forward_kernel"
    assert kernel.replacement == "accelport.kernels rms_norm"
    assert "launched 1×" in kernel.message
    assert report.route.route is Route.C
    assert any("prebuilt binaries" in reason for reason in report.route.reasons)
    jsonschema.validate(json.loads(report.to_json()), report_schema())
