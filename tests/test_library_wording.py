"""Library error messages name the library's own parameters, never a command-line flag: only `cli/`
knows the flags (an option check raises errors.InvalidValue and the CLI words the flag that fed it)."""

import ast
import re
from pathlib import Path

import accelport

PACKAGE = Path(accelport.__file__).parent
FLAG = re.compile(r"--[a-z]")
# Keyword arguments that carry a message the user reads (fileio's read_input / open_regular).
MESSAGE_KEYWORDS = frozenset({"hint", "missing"})
# Modules other engineers are splitting and converting themselves; this set may only shrink.
NOT_YET_CONVERTED: frozenset[str] = frozenset()


def _is_exception_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name.endswith(("Error", "Exception", "Warning")) or name in ("InvalidValue", "MissingDependency")


def _writes_to_stderr(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "write"
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "stderr")


def _message_parts(node: ast.AST):
    """The expressions of `node` whose text ends up in an error message."""
    if isinstance(node, ast.Raise):
        yield from (part for part in (node.exc, node.cause) if part is not None)
    elif _is_exception_call(node):
        yield from node.args
        yield from (keyword.value for keyword in node.keywords)
    elif _writes_to_stderr(node):  # the redirect shim's one line in a program that cannot take a UserError
        yield from node.args
    elif isinstance(node, ast.Call):
        yield from (keyword.value for keyword in node.keywords if keyword.arg in MESSAGE_KEYWORDS)


def _names_shown(node: ast.AST):
    """Local names whose value is the text itself (`how`, `f"...{how}"`, `a + how`), not names a call
    only reads (`", ".join(args)`): a list of command words joined into a message is not a message."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.JoinedStr | ast.FormattedValue | ast.BinOp | ast.IfExp | ast.BoolOp):
        for child in ast.iter_child_nodes(node):
            yield from _names_shown(child)


def _strings(node: ast.AST):
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            yield inner


def flags_in_messages(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string with a flag in it that a raise, an exception's constructor or a
    message keyword carries, directly or through a local name it reads (`how = "..."; raise E(how)`)."""
    tree = ast.parse(source)
    found: dict[int, tuple[int, str]] = {}
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]
    for scope in scopes:
        read: set[str] = set()
        for node in ast.walk(scope):
            for part in _message_parts(node):
                read.update(_names_shown(part))
                found.update((id(s), (s.lineno, s.value)) for s in _strings(part) if FLAG.search(s.value))
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id in read for t in targets):
                    found.update((id(s), (s.lineno, s.value)) for s in _strings(node.value) if FLAG.search(s.value))
    return sorted(found.values())


def _library_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if not relative.startswith("cli/"):
            yield relative, path


def test_no_library_error_message_names_a_flag():
    offenders = [
        f"{relative}:{line}: {text!r}"
        for relative, path in _library_modules()
        if relative not in NOT_YET_CONVERTED
        for line, text in flags_in_messages(path.read_text())
    ]
    assert not offenders, "library messages that name a flag (raise InvalidValue, or let the CLI add the hint):\n" + "\n".join(offenders)


def test_allow_list_only_names_modules_that_still_need_it():
    stale = sorted(r for r in NOT_YET_CONVERTED if not (PACKAGE / r).exists() or not flags_in_messages((PACKAGE / r).read_text()))
    assert not stale, f"converted or gone: delete {stale} from NOT_YET_CONVERTED"


PLANTED = '''
from accelport.errors import UserError

def check(steps, path):
    how = f"re-run `accelport soak --save {path}`"
    if steps < 1:
        raise UserError(f"--steps {steps}: must be 1 <= steps")
    if path is None:
        error = ValueError("pass --pools FILE")
        raise error
    text = read_input_text(path, "spec", hint="check --spec")
    sys.stderr.write("accelport run: pass --device cpu\\n")
    raise UserError(f"{path}: bad; {how}")
'''


def test_the_checker_sees_a_flag_in_each_kind_of_message():
    lines = [line for line, _ in flags_in_messages(PLANTED)]
    assert lines == [5, 7, 9, 11, 12]


def test_the_checker_leaves_other_strings_alone():
    source = '''
def build(job):
    args = ["--nnodes=1", f"--rdzv-id={job}"]
    why = "needs full tensors (dump with --tensors)"
    if not args:
        raise ValueError("no arguments: " + "-".join(args))
    return args, why
'''
    assert flags_in_messages(source) == []
