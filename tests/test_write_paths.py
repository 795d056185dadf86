"""Every atomic write goes through accelport.fileio: no module outside it renames a file into place itself.

A hand-rolled temp-then-rename forgets something sooner or later (the fsync, the permissions of
the file it replaces, removing the temporary file on an error); fileio's atomic_open, atomic_path
and staged_writes do each once.
"""

import ast
from pathlib import Path

import accelport

PACKAGE = Path(accelport.__file__).parent
HELPER = "fileio.py"
# Renames that are not writes (moving a folder into place, say), each with its reason; none today.
NOT_A_WRITE: frozenset[str] = frozenset()
_OS_RENAMES = {"replace", "rename", "renames"}


def renames(source: str) -> list[tuple[int, str]]:
    """(line, call) of each rename in `source`.

    Recognised: os.replace / os.rename / os.renames (also through `import os as ...` or
    `from os import replace`), shutil.move, any `.rename(...)` (str has no such method, Path
    has), and `.replace(...)` called with exactly one positional argument and no keyword:
    Path.replace(target) takes one, str.replace and bytes.replace take two or three (or one
    starred pair), and dataclasses.replace / datetime.replace take keywords.
    """
    tree = ast.parse(source)
    os_names, bare = {"os"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names.update(alias.asname for alias in node.names if alias.name == "os" and alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            bare.update(alias.asname or alias.name for alias in node.names if alias.name in _OS_RENAMES)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in bare:
            found.append((node.lineno, func.id))
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if (owner in os_names and func.attr in _OS_RENAMES) or (owner, func.attr) == ("shutil", "move"):
                found.append((node.lineno, f"{owner}.{func.attr}"))
            elif func.attr == "rename":
                found.append((node.lineno, ".rename"))
            elif (func.attr == "replace" and owner != "dataclasses" and len(node.args) == 1 and not node.keywords
                  and not isinstance(node.args[0], ast.Starred)):
                found.append((node.lineno, ".replace"))
    return sorted(found)


def test_only_fileio_renames_files_into_place():
    offenders = [
        f"{relative}:{line}: {call}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (relative := path.relative_to(PACKAGE).as_posix()) not in (HELPER, *NOT_A_WRITE)
        for line, call in renames(path.read_text())
    ]
    assert not offenders, "write through accelport.fileio (atomic_open, atomic_path, staged_writes):\n" + "\n".join(offenders)


def test_fileio_itself_is_seen_renaming():
    # The control: the scan finds the renames the helper does make.
    assert [call for _, call in renames((PACKAGE / HELPER).read_text())].count("os.replace") >= 3


def test_the_scan_sees_each_way_of_renaming():
    planted = '''
import os as system
import shutil
from os import rename as move_over
from pathlib import Path

def save(path, text):
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    system.replace(tmp, path)
    move_over(tmp, path)
    shutil.move(tmp, path)
    tmp.rename(path)
'''
    assert renames(planted) == [(10, ".replace"), (11, "system.replace"), (12, "move_over"), (13, "shutil.move"), (14, ".rename")]


def test_the_scan_leaves_string_and_record_replaces_alone():
    source = '''
import dataclasses

def tidy(name, record, when):
    name = name.replace("-", "_").replace(" ", "", 1)
    record = dataclasses.replace(record, name=name)
    pair = ("a", "b")
    return when.replace(tzinfo=None), b"a".replace(b"a", b"b"), name.replace(*pair)
'''
    assert renames(source) == []
