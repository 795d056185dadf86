"""The C/C++/CUDA scanner takes its CUDA words from the knowledge files: families, their rules, the pre-filter."""

from __future__ import annotations

import copy

import pytest

from accelport import knowledge
from accelport.inventory.base import SourceFile
from accelport.inventory.cxx import CxxScanner


@pytest.fixture
def site(tmp_path):
    """Write a site knowledge file and load it; the shipped knowledge alone again afterwards."""

    def load(text: str):
        path = tmp_path / "site.toml"
        path.write_text(text)
        knowledge.set_user_files([path])
        return path

    yield load
    knowledge.set_user_files([])


@pytest.fixture
def shipped_data(monkeypatch):
    """Edit a shipped knowledge file as the package reads it: `edit(name, change)`, change(data) in place."""
    real = knowledge.read_toml
    edits = {}

    def read(name):
        data = copy.deepcopy(real(name))
        if name in edits:
            edits[name](data)
        return data

    def edit(name, change):
        edits[name] = change
        knowledge.set_user_files([])  # derived caches (catalogue, pre-filter) are rebuilt from the edited data

    monkeypatch.setattr(knowledge, "read_toml", read)
    yield edit
    monkeypatch.undo()
    knowledge.set_user_files([])


def scan(code: str, name: str = "comm.cpp"):
    return CxxScanner().scan(SourceFile(name, code.encode("utf-8")))


def wants(code: str) -> bool:
    return CxxScanner().wants(code.encode("utf-8"))


QCOMM = """
[family.qcomm]
title = "QComm (our collectives)"
category = "library-call"
rule = "AP4109"
namespaces = ["qc"]
prefilter = ["qc::"]
wrapped = true
"""
QCOMM_CODE = "void allreduce(float* x, int n) { qc::all_reduce(x, n); }\nvoid step(float* x) { allreduce(x, 4); }\n"


def test_a_site_family_is_found_with_no_code_change(site):
    assert not wants(QCOMM_CODE)  # no CUDA word at all: the pre-filter drops the file
    site(QCOMM)
    assert wants(QCOMM_CODE)  # its only CUDA use is a word of the new family
    found = {(f.rule_id, f.symbol, f.family) for f in scan(QCOMM_CODE)}
    assert ("AP4109", "qc::all_reduce", "qcomm") in found
    # `wrapped = true`: the function that calls it is reported as its wrapper, and so is its use.
    wrappers = {(f.symbol, f.location.line) for f in scan(QCOMM_CODE) if f.rule_id == "AP4190"}
    assert {("allreduce", 1), ("allreduce", 2)} <= wrappers


def test_a_site_family_without_prefilter_words_is_looked_for_by_its_names(site):
    code = '#include "fastmm/gemm.h"\nvoid f() { fastmm::gemm(1, 2); }\n'
    assert not wants(code)
    site('[family.fastmm]\ntitle = "FastMM"\ncategory = "library-call"\nrule = "AP4101"\nheaders = ["fastmm/"]\nnamespaces = ["fastmm"]\n')
    assert wants(code)
    assert ("AP4101", "fastmm::gemm") in {(f.rule_id, f.symbol) for f in scan(code)}


def test_a_site_family_that_is_not_wrapped_has_no_wrapper_findings(site):
    site(QCOMM.replace("wrapped = true\n", ""))
    found = {f.rule_id for f in scan(QCOMM_CODE)}
    assert "AP4109" in found and "AP4190" not in found


def test_a_family_word_removed_from_the_data_is_no_longer_matched(shipped_data):
    code = "void f(cutensorHandle_t h) { cutensorCreate(&h); }\n"
    assert wants(code)

    def drop_word(data):
        data["family"]["cutensor"]["prefilter"] = []

    shipped_data("cuda_api/families.toml", drop_word)
    assert not wants(code)


def test_a_scanner_pattern_removed_from_the_data_is_no_longer_matched(shipped_data):
    code = "__global__ void k(float* x) { x[0] = 1; }\n"
    assert wants(code)

    def drop_pattern(data):
        data["prefilter"]["patterns"].remove("__global__")

    shipped_data("rules/cxx.toml", drop_pattern)
    assert not wants(code)


def test_a_family_rule_comes_from_the_data(shipped_data):
    code = "__global__ void k() { cooperative_groups::grid_group g = cooperative_groups::this_grid(); g.sync(); }\n"
    assert "AP5012" in {f.rule_id for f in scan(code, "k.cu")}

    def other_rule(data):
        data["family"]["cooperative_groups"]["rule"] = "AP5008"

    shipped_data("cuda_api/families.toml", other_rule)
    found = {f.rule_id for f in scan(code, "k.cu")}
    assert "AP5008" in found and "AP5012" not in found


def test_every_shipped_family_names_its_prefilter_words():
    # Without them a shipped family would be looked for by its namespaces too (`cg` matches nearly every file).
    families = knowledge.read_toml("cuda_api/families.toml")["family"]
    assert [key for key, table in families.items() if "prefilter" not in table] == []


def test_the_names_a_rule_reports_come_from_the_data(shipped_data):
    code = "void go(const void* k, void** args) { cudaLaunchKernel(k, 1, 1, args, 0, 0); }\n"
    assert ("AP5004", "cudaLaunchKernel") in {(f.rule_id, f.symbol) for f in scan(code)}

    def drop_symbol(data):
        [launch] = [rule for rule in data["rule"] if rule["id"] == "AP5004"]
        launch["symbols"].remove("cudaLaunchKernel")

    shipped_data("rules/cxx.toml", drop_symbol)
    found = {(f.rule_id, f.symbol) for f in scan(code)}
    assert ("AP5004", "cudaLaunchKernel") not in found
    assert ("AP2001", "cudaLaunchKernel") in found  # now only a runtime call, as the catalogue has it
