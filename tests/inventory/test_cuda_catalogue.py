"""The CUDA API catalogue: generated from HIPIFY's tables with provenance, plus the families they lack."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accelport import knowledge
from accelport.errors import UserError
from accelport.findings import BackendStatus, Category
from accelport.inventory.cuda_api import Catalogue, catalogue

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_cuda_catalogue.py"
TABLES = ROOT / "data" / "upstream" / "hipify-tables"
GENERATED = ROOT / "src/accelport/knowledge/cuda_api/hipify_catalogue.json"

TABLE = """\
# CUDA Runtime API supported by HIP

## **11. Memory Management**

|**CUDA**|**A**|**D**|**C**|**R**|**HIP**|**A**|**D**|**C**|**R**|**E**|
|:--|:-:|:-:|:-:|:-:|:--|:-:|:-:|:-:|:-:|:-:|
|`cudaMalloc`| | | | |`hipMalloc`|1.5.0| | | | |
|`cudaMallocAsync`|11.2| | | |`hipMallocAsync`|5.2.0| | | |6.2.0|

## **35. Data types used by CUDA Runtime**

|**CUDA**|**A**|**D**|**C**|**R**|**HIP**|**A**|**D**|**C**|**R**|**E**|
|:--|:-:|:-:|:-:|:-:|:--|:-:|:-:|:-:|:-:|:-:|
|`cudaThreadSynchronize`| |10.0| |12.0| | | | | | |
"""


def test_generator_parses_rows_sections_versions_and_experimental_flags(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gen_cuda_catalogue as gen
    finally:
        sys.path.pop(0)
    path = tmp_path / "CUDA_Runtime_API_functions_supported_by_HIP.md"
    path.write_text(TABLE)
    sections, rows = gen.parse_table(path, "runtime")
    assert sections == ["Memory Management", "Data types used by CUDA Runtime"]
    columns = {name: i for i, name in enumerate(gen.COLUMNS)}
    malloc_async = rows["cudaMallocAsync"]
    assert malloc_async[columns["cuda_added"]] == "11.2"
    assert malloc_async[columns["hip"]] == "hipMallocAsync"
    assert malloc_async[columns["hip_experimental"]] is True
    removed = rows["cudaThreadSynchronize"]
    assert (removed[columns["kind"]], removed[columns["cuda_deprecated"]], removed[columns["cuda_removed"]], removed[columns["hip"]]) == ("type", "10.0", "12.0", "")


def test_generated_file_records_source_commit_and_licence():
    data = json.loads(GENERATED.read_text())
    source = data["source"]
    assert source["project"] == "ROCm/HIPIFY"
    assert source["commit"] == "014177bc2e434ce3e834aa4f3d0e2abb1efa9796"
    assert source["licence"] == "MIT"
    assert "Permission is hereby granted" in source["licence_text"]
    assert source["generator"] == "scripts/gen_cuda_catalogue.py"
    assert len(data["symbols"]) > 8000


def test_committed_catalogue_is_what_the_script_generates(tmp_path):
    out = tmp_path / "catalogue.json"
    subprocess.run([sys.executable, str(SCRIPT), str(TABLES), "-o", str(out)], check=True, capture_output=True, timeout=120)
    assert out.read_text() == GENERATED.read_text(), "regenerate with `python scripts/gen_cuda_catalogue.py`"


def test_lookups_across_table_and_extra_families():
    cat = catalogue()
    malloc = cat.lookup("cudaMalloc")
    assert (malloc.family.key, malloc.category, malloc.rocm, malloc.section) == ("runtime", Category.RUNTIME_API, "hipMalloc", "Memory Management")
    assert cat.lookup("cublasSgemm").rocm == "hipblasSgemm"
    assert cat.lookup("cuInit").category is Category.DRIVER_API
    assert cat.lookup("cudaBindTexture").cuda_removed == "12.0"
    shfl = cat.lookup("__shfl_down_sync")
    assert shfl.family.key == "device" and shfl.rocm == ""
    assert shfl.backends()["rocm"] is BackendStatus.UNSUPPORTED
    nccl = cat.lookup("ncclAllReduce")
    assert nccl.family.key == "nccl" and nccl.vendor_names == {"npu": "HcclAllReduce"}
    assert nccl.backends()["rocm"] is BackendStatus.PORTABLE and nccl.backends()["xpu"] is BackendStatus.ALTERNATIVE
    assert nccl.backends()["mps"] is BackendStatus.UNKNOWN  # nothing sourced: unknown, not guessed
    assert cat.lookup("ncclCommInitRankScalable").family.key == "nccl"  # by prefix, not listed
    assert cat.lookup("thrust::sort").family.key == "thrust"
    assert cat.lookup("nvcuda::wmma::mma_sync").family.key == "wmma"
    assert cat.lookup("at::cuda::getCurrentCUDAStream").category is Category.FRAMEWORK_API
    assert cat.lookup("cutensorCreate").family.key == "cutensor"
    assert cat.lookup("nvtxRangePop").vendor_names == {"rocm": "roctxRangePop"}
    for not_cuda in ("cursor", "cuda", "ncclish", "thrustworthy", "std::sort", "cub"):
        assert cat.lookup(not_cuda) is None, not_cuda


def test_headers_and_libraries_by_family():
    cat = catalogue()
    assert cat.header_family("cublas_v2.h").key == "cublas"
    assert cat.header_family("thrust/device_vector.h").key == "thrust"
    assert cat.header_family("ATen/cuda/CUDAContext.h").key == "aten"
    assert cat.header_family("cuda/std/atomic").key == "device"
    assert cat.header_family("vector") is None
    assert cat.library_family("libcudart.so.12").key == "runtime"
    assert cat.library_family("libnccl.so.2").key == "nccl"
    assert cat.library_family("libc10_cuda.so").key == "aten"
    assert cat.library_family("libm.so.6") is None


def test_site_entries_add_symbols():
    cat = Catalogue(
        knowledge.read_json("cuda_api/hipify_catalogue.json"),
        knowledge.read_toml("cuda_api/families.toml"),
        [{"symbol": "myCudaHelper", "family": "runtime", "rocm": "myHipHelper"}],
    )
    assert cat.lookup("myCudaHelper").rocm == "myHipHelper"
    with pytest.raises(UserError, match="unknown family"):
        Catalogue(knowledge.read_json("cuda_api/hipify_catalogue.json"), knowledge.read_toml("cuda_api/families.toml"), [{"symbol": "x", "family": "nope"}])


@pytest.fixture
def _site_files_reset():
    yield
    knowledge.set_user_files([])


@pytest.mark.usefixtures("_site_files_reset")
@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('family = "runtime"\nrocm = "hipThing"', r"entry 2 lacks `symbol`"),
        ('symbol = "myCudaThing"', r"entry 2 lacks `family`"),
        ('symbol = ""\nfamily = "runtime"', r"`symbol` must be a non-empty string"),
        ('symbol = "myCudaThing"\nfamily = "nope"', r"unknown family 'nope'"),
        ('symbol = "myCudaThing"\nfamily = "runtime"\nkind = "macro"', r"`kind` must be"),
        ('symbol = "myCudaThing"\nfamily = "runtime"\nrocm = 3', r"`rocm` must be a string"),
    ],
)
def test_bad_site_cuda_api_entry_is_one_line_exit_2(cli, tmp_path, entry, message):
    site = tmp_path / "site.toml"
    # A good first entry, so the error must name the second one.
    site.write_text(f'[[cuda_api]]\nsymbol = "okCudaThing"\nfamily = "runtime"\n\n[[cuda_api]]\n{entry}\n')
    source = tmp_path / "app.cu"
    source.write_text("void f() { cudaMalloc(0, 0); }\n")
    result = cli("--knowledge", site, "inventory", source)
    assert result.code == 2
    assert "Traceback" not in result.err and "KeyError" not in result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert str(site) in lines[0]
    assert re.search(message, lines[0]), lines[0]


@pytest.mark.usefixtures("_site_files_reset")
def test_bad_site_cuda_api_entry_is_caught_for_a_python_only_tree(cli, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[cuda_api]\nsymbol = "x"\nfamily = "runtime"\n')
    source = tmp_path / "train.py"
    source.write_text("import torch\ntorch.cuda.synchronize()\n")
    result = cli("--knowledge", site, "inventory", source)
    assert result.code == 2
    assert f"{site}: `cuda_api` must be an array of tables" in result.err


@pytest.mark.usefixtures("_site_files_reset")
def test_good_site_cuda_api_entry_is_reported(cli, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[[cuda_api]]\nsymbol = "myCudaHelper"\nfamily = "runtime"\nrocm = "myHipHelper"\n')
    source = tmp_path / "app.cu"
    source.write_text("void f() { myCudaHelper(); }\n// myCudaHelper() in a comment\n")
    result = cli("--knowledge", site, "inventory", source, "--format", "json")
    assert result.code == 0, result.err
    found = [f for f in json.loads(result.out)["findings"] if f["symbol"] == "myCudaHelper"]
    assert [f["location"]["line"] for f in found] == [1]


@pytest.mark.usefixtures("_site_files_reset")
def test_a_site_family_produces_findings_with_no_code_change(tmp_path):
    from accelport.inventory import scan

    site = tmp_path / "site.toml"
    site.write_text(
        '[family.fastcomm]\ntitle = "FastComm (our collectives over NCCL)"\ncategory = "library-call"\n'
        'headers = ["fastcomm.h"]\nprefixes = ["fastcomm"]\nrule = "AP4109"\n'
        'vendors.rocm = "alternative: rebuild FastComm on RCCL"\n'
    )
    tree = tmp_path / "src"
    tree.mkdir()
    # No CUDA word anywhere: only the site family's names can make the scanner read the file.
    (tree / "comm.cpp").write_text('#include "fastcomm.h"\nvoid go(int n) { fastcommAllReduce(n); }\n')
    knowledge.set_user_files([])
    assert scan([str(tree)]).findings == []
    knowledge.set_user_files([site])
    findings = scan([str(tree)]).findings
    assert {(f.rule_id, f.symbol) for f in findings} >= {("AP4109", "fastcommAllReduce")}
    assert any("FastComm" in f.message for f in findings)


@pytest.mark.usefixtures("_site_files_reset")
@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[family.x]\ncategory = "library-call"\nrule = "AP4109"\n', r"\[family.x\] lacks `title`"),
        ('[family.x]\ntitle = "X"\ncategory = "gpu-stuff"\nrule = "AP4109"\n', r"unknown category 'gpu-stuff'"),
        ('[family.x]\ntitle = "X"\ncategory = "library-call"\n', r"\[family.x\] has no rule"),
        ('[family.x]\ntitle = "X"\ncategory = "library-call"\nrule = "AP0000"\n', r"rule 'AP0000' is not a known rule ID"),
        ('[family.cublas]\ntitle = "X"\ncategory = "library-call"\n', r"a shipped family"),
        ('[family.x]\ntitle = "X"\ncategory = "library-call"\nrule = "AP4109"\nprefixes = "x"\n', r"`prefixes` must be a list"),
        ('[family.x]\ntitle = "X"\ncategory = "library-call"\nrule = "AP4109"\nprefilter = "x"\n', r"`prefilter` must be a list"),
        ('[family.x]\ntitle = "X"\ncategory = "library-call"\nrule = "AP4109"\nwrapped = "yes"\n', r"`wrapped` must be true or false"),
    ],
)
def test_a_bad_site_family_is_one_error_naming_the_file(tmp_path, table, message):
    site = tmp_path / "site.toml"
    site.write_text(table)
    knowledge.set_user_files([site])
    with pytest.raises(UserError, match=message):
        catalogue()


def test_every_shipped_library_family_has_a_rule():
    from accelport.inventory.cuda_api import rule_for_family

    families = catalogue().families.values()
    library = [f for f in families if f.category.value == "library-call"]
    assert len(library) >= 16
    assert all(rule_for_family(f) in knowledge.rules() for f in library)
