"""Operator lists: shipped data with provenance, the generator's parsers, and users' own lists."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from accelport.coverage import oplists
from accelport.errors import UserError

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = REPO / "data" / "upstream" / "oplists"  # vendored copy of shared/data/oplists


@pytest.fixture(scope="module")
def builder():
    """scripts/build_oplists.py, imported as a module."""
    spec = importlib.util.spec_from_file_location("build_oplists", REPO / "scripts" / "build_oplists.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(autouse=True)
def no_user_lists(monkeypatch):
    monkeypatch.delenv(oplists.ENV_VAR, raising=False)
    oplists.set_user_files([])
    yield
    oplists.set_user_files([])


def test_shipped_lists_carry_their_provenance():
    lists = oplists.known_oplists()
    assert {"npu", "musa", "mlu", "xpu", "cuda", "mps", "cpu"} <= set(lists)
    for versions in lists.values():
        for oplist in versions:
            assert oplist.source and oplist.licence and oplist.version and oplist.dispatch_key, oplist.origin
            assert len(oplist.ops) > 30
    npu = oplists.oplist_for("npu")
    assert (npu.backend, npu.version, npu.torch_version) == ("torch_npu", "2.13.0", "2.13.0")
    assert "_transformer_encoder_layer_fwd" not in npu.ops and "gelu.out" in npu.ops and "gelu" not in npu.ops
    assert "npu::npu_fusion_attention" in npu.ops  # custom ops keep their namespace
    assert oplists.oplist_for("npu@2.13.0") is npu
    assert not oplists.oplist_for("xpu").complete  # torch's YAML holds only the in-tree XPU kernels
    with pytest.raises(UserError, match="no operator list for vendor 'rocm'"):
        oplists.oplist_for("rocm")
    with pytest.raises(UserError, match="unknown vendor"):
        oplists.oplist_for("nosuch")


def test_aten_facts_know_composites_and_structured_delegates():
    facts = oplists.aten_facts()
    assert facts.composite_kind("linear") == "implicit"
    assert facts.composite_kind("ones_like") == "explicit"
    assert facts.structured_delegate("gelu") == "gelu.out"
    assert facts.composite_kind("mm") == "explicit_nonfunctional" and facts.structured_delegate("mm") == "mm.out"
    assert facts.composite_kind("_transformer_encoder_layer_fwd") is None


def test_parsers_read_each_vendor_format(builder):
    npu = builder.npu_ops(
        {
            "supported": ["mm", {"func": "gelu.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)", "impl_ns": "op_api"}],
            "symint": ["as_strided_"],
            "custom": [{"func": "npu_rms_norm(Tensor self) -> Tensor"}],
        },
        {"supported": ["add.Tensor"]},
    )
    assert npu == ["add.Tensor", "as_strided_", "gelu.out", "mm", "npu::npu_rms_norm"]
    musa = builder.musa_ops(
        [
            {"func": "amax"},
            {"func": "amax.out", "dispatch": {"PrivateUse1": "AMaxOut"}},
            {"func": "cat", "dispatch": {"QuantizedPrivateUse1": "CatQuantizedMusa"}},  # quantized only
            {"func": "flip", "dispatch": {"PrivateUse1, QuantizedPrivateUse1": "flip"}},
        ]
    )
    assert musa == ["amax", "amax.out", "flip"]
    mlu = builder.mlu_ops({"aten": [{"func": "cat", "structured_delegate": "cat.out"}], "vision": [{"func": "nms(Tensor a) -> Tensor"}]})
    assert mlu == ["cat", "torchvision::nms"]
    native = [
        {"func": "gelu.out(Tensor self) -> Tensor(a!)", "structured": True, "dispatch": {"CPU": "a", "CUDA, MPS": "b"}},
        {"func": "gelu(Tensor self) -> Tensor", "structured_delegate": "gelu.out"},
        {"func": "add.out(Tensor self) -> Tensor(a!)", "ufunc_inner_loop": {"Generic": "add"}, "dispatch": {"SparseCUDA": "x"}},
        {"func": "only_cpu(Tensor self) -> Tensor", "dispatch": {"CPU": "c"}},
    ]
    assert builder.torch_backend_ops(native, "CUDA") == ["add.out", "gelu", "gelu.out"]
    assert builder.torch_backend_ops(native, "MPS") == ["gelu", "gelu.out"]


def test_committed_lists_are_what_the_script_generates(builder):
    generated = builder.build(UPSTREAM)
    shipped = oplists.shipped_dir()
    assert set(generated) == {p.name for p in shipped.glob("*.json")}
    for name, text in generated.items():
        assert (shipped / name).read_text(encoding="utf-8") == text, f"{name} is stale: run scripts/build_oplists.py"


def test_a_user_list_replaces_the_shipped_one(tmp_path):
    user = tmp_path / "npu.json"
    user.write_text(json.dumps({"vendor": "npu", "backend": "torch_npu", "version": "2.13.0", "ops": ["mm", "aten::bmm", "add.default"]}))
    oplists.set_user_files([user])
    npu = oplists.oplist_for("npu")
    assert npu.origin == str(user) and npu.ops == {"mm", "bmm", "add"}


def test_a_text_list_with_header_comments(tmp_path, monkeypatch):
    text = tmp_path / "site-npu.txt"
    text.write_text("# vendor = npu\n# version = 2.14.0rc1\n# complete = false\n# source = our lab\nmm\naddmm(Tensor a) -> Tensor\n\n")
    monkeypatch.setenv(oplists.ENV_VAR, str(text))
    oplists.set_user_files([])
    versions = [o.version for o in oplists.known_oplists()["npu"]]
    assert versions == ["2.14.0rc1", "2.13.0"]  # newest first: `--target npu` checks against the site list
    site = oplists.oplist_for("npu@2.14.0rc1")
    assert site.ops == {"mm", "addmm"} and not site.complete and site.source == "our lab"


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ("{not json", "x.json", "not valid JSON"),
        ('{"vendor": "npu"}', "x.json", "lacks `ops`"),
        ('{"vendor": "nope", "ops": []}', "x.json", "unknown vendor 'nope'"),
        ("# vendor = npu\nmm;rm -rf\n", "x.txt", "is not an operator name"),
    ],
)
def test_bad_user_lists_name_the_file(tmp_path, content, name, message):
    path = tmp_path / name
    path.write_text(content)
    oplists.set_user_files([path])
    with pytest.raises(UserError, match=message) as caught:
        oplists.known_oplists()
    assert str(path) in str(caught.value)


def test_a_list_without_a_torch_version_says_unknown(tmp_path, cli, model_spec):
    for versions in oplists.known_oplists().values():
        for oplist in versions:
            assert oplist.torch_version, oplist.origin  # never blank in a report
    assert oplists.oplist_for("musa").torch_version == "unknown"
    assert oplists.oplist_for("mlu").torch_version == "unknown"
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"vendor": "npu", "version": "9.9", "ops": ["mm"]}))
    oplists.set_user_files([mine])
    assert oplists.oplist_for("npu@9.9").torch_version == "unknown"
    report = json.loads(cli("ops", model_spec("masked"), "--target", "musa", "--format", "json").out)
    target = report["targets"][0]
    assert target["oplist"]["torch_version"] == "unknown"
    assert any("does not say which torch version" in note for note in target["notes"])
