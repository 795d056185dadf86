"""The compiled recorder's field table (recorder_fields.py) names what a Capture really has, its C
enums follow it, and the build is redone when any file of the recorder's source changes.

None of these needs a C compiler: renaming a Capture attribute the C code reads must fail here
everywhere, not only quietly send machines with a compiler down the Python path.
"""

from __future__ import annotations

import re

import pytest

from accelport import native
from accelport.verify import capture
from accelport.verify.numerics import native as stats_native
from accelport.verify.numerics import recorder, recorder_fields
from accelport.verify.numerics.dump_ops import _Entry


@pytest.mark.parametrize("compiled", [True, False])
def test_every_name_in_the_field_table_is_on_a_started_capture(tmp_path, compiled):
    with capture(tmp_path / "run", compiled=compiled) as cap:
        missing = [name for name in recorder_fields.CAPTURE_ATTRIBUTES if not hasattr(cap, name)]
        not_methods = [name for name in recorder_fields.CAPTURE_METHODS if not callable(getattr(cap, name, None))]
    assert missing == [] and not_methods == []
    assert set(recorder_fields.ENTRY_ATTRIBUTES) <= set(_Entry.__slots__)


def test_the_c_enums_follow_the_table_in_order():
    header = recorder.SOURCE.with_name("_recorder_fields.h").read_text()
    for tag, prefix, names in (
        ("capture_attribute", "A_", recorder_fields.CAPTURE_ATTRIBUTES),
        ("capture_method", "M_", recorder_fields.CAPTURE_METHODS),
        ("entry_attribute", "E_", recorder_fields.ENTRY_ATTRIBUTES),
    ):
        body = re.search(rf"enum {tag} \{{(.*?)\}};", header, re.S)
        assert body is not None, tag
        members = re.findall(r"\b[A-Z][A-Z0-9_]*\b", re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S))
        assert members == [prefix + name.lstrip("_").upper() for name in names] + [f"{prefix}COUNT"]
    version = re.search(r"#define FIELDS_VERSION (\d+)", header)
    assert version is not None and int(version.group(1)) == recorder_fields.FIELDS_VERSION
    assert recorder_fields.table()[0] == recorder_fields.FIELDS_VERSION


def test_the_build_key_covers_every_file_the_recorder_includes():
    names = {part.name for part in recorder.PARTS}
    assert recorder.PARTS[0] == recorder.SOURCE
    for part in recorder.PARTS:
        for included in re.findall(r'#include "([^"]+)"', part.read_text()):
            assert included in names, f"{part.name} includes {included}, which recorder.PARTS does not list"


def test_a_change_to_any_part_of_the_source_builds_a_new_extension(tmp_path, monkeypatch):
    copies = []
    for part in recorder.PARTS:
        copy = tmp_path / part.name
        copy.write_bytes(part.read_bytes())
        copies.append(copy)
    monkeypatch.setattr(recorder, "SOURCE", copies[0])
    monkeypatch.setattr(recorder, "PARTS", tuple(copies))
    monkeypatch.setattr(stats_native, "kernels", lambda: object())
    monkeypatch.setattr(native, "compiler", lambda: ["cc"])
    monkeypatch.setattr(native, "python_include", lambda: str(tmp_path))  # a key no real build has
    built = []

    class Stop(Exception):
        pass

    def build(cc, source, path, attempts):
        built.append(path.name)
        raise Stop

    monkeypatch.setattr(native, "build_library", build)

    def target() -> str:
        with pytest.raises(Stop):
            recorder._load()
        return built[-1]

    first = target()
    assert target() == first  # nothing changed: the same file
    seen = {first}
    for copy in copies:
        copy.write_text(copy.read_text() + "\n/* changed */\n")
        name = target()
        assert name not in seen, f"a change to {copy.name} keeps the cached build"
        seen.add(name)
