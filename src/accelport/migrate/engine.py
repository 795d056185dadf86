"""Migrate files: inventory's findings drive the codemods; what they cannot fix gets an inline marker.

Per file with findings, three rounds:
1. rewrite every selected finding whose rule migrate fixes (codemods parse only the spans they edit),
   and add what the rewrites need (`import torch`, `import accelport.compat`, the module's device);
2. remove torch.cuda imports the rewrites left unused;
3. scan the result again with the inventory: every selected finding still there gets a marker
   `# accelport: APxxxx: <what to do>` on its line (unless one is there already).
The result must parse, or the file is left alone and reported. Running migrate on its own
output changes nothing: round 3 sees only acknowledged findings.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import multiprocessing
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from accelport import knowledge
from accelport.findings import Finding, SkippedFile
from accelport.inventory.base import FileScanner
from accelport.inventory.engine import PARALLEL_MIN_BYTES, gc_paused, scan_file
from accelport.inventory.engine import work_chunks as guided_chunks
from accelport.inventory.python import PythonScanner, code_token_lines, scan_python_text
from accelport.inventory.scanners import all_scanners
from accelport.migrate import codemods
from accelport.migrate.codemods.imports import import_edits, unused_import_edits
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit, LineMap, apply_edits
from accelport.migrate.helpers import (
    DEFAULT_MODULE,
    HelperImport,
    forget_folders,
    helper_import_for,
    module_import,
    module_text,
    package_import,
)
from accelport.migrate.model import (
    ADDED,
    MARKED,
    NOT_REWRITTEN,
    REMOVED,
    REWRITTEN,
    Change,
    FileMigration,
    MigrationResult,
    NotPython,
)
from accelport.migrate.source import SourceIndex
from accelport.source import chunks
from accelport.source.files import ScanSkipped, SourceFile
from accelport.source.markers import (
    GENERATED_HEADER,
    MARKER_WORD,
    acknowledge,
    format_marker,
)
from accelport.source.names import lookup_api
from accelport.source.walk import DEFAULT_MAX_FILE_SIZE, Candidate, discover, read_regular

log = logging.getLogger(__name__)
_SCANNER = PythonScanner()

@dataclass(frozen=True)
class Options:
    """What to migrate: rule-ID prefixes (empty: all rules) and the target vendor key."""

    select: tuple[str, ...] = ()
    target: str | None = None
    whole_file: bool = False  # require each whole file to parse, before and after (--write)
    # Where the helpers torch lacks come from: "module" (a generated module in the tree, needing only
    # torch) or "package" (`import accelport.compat`); and the generated module's name.
    helpers: str = "module"
    helpers_module: str = DEFAULT_MODULE
    roots: tuple[str, ...] = ()  # the paths migrate was given: a helper module is written inside them

    def helper_import(self, path: str | None = None) -> HelperImport:
        if self.helpers == "package":
            return package_import()
        if path is None:
            return module_import(self.helpers_module)
        return helper_import_for(path, self.helpers_module, self.roots)

    def selects(self, rule_id: str) -> bool:
        return not self.select or rule_id.startswith(self.select)


def parse_select(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """`AP1101,AP12` -> ('AP1101', 'AP12'); every ID or prefix must name at least one rule."""
    return knowledge.rule_prefixes(text, "--select")


@knowledge.derived_cache
def marker_texts() -> dict[str, str]:
    return dict(knowledge.read_toml("migrate.toml")["marker"])


# --------------------------------------------------------------------------- one file


def migrate_source(
    text: str,
    path: str = "<source>",
    *,
    findings: Sequence[Finding] | None = None,
    tree: ast.Module | None = None,
    options: Options = Options(),
    scanner: FileScanner | None = None,
    whole_file: bool = False,
    helper: HelperImport | None = None,
) -> FileMigration:
    """Migrate one Python file's text.

    `findings` are inventory's for it and `tree` the (partial) parse they came from, both
    made here when not given; `scanner` is the
    inventory scanner that claims the file (setup.py has its own). Only the top-level
    statements that hold findings are parsed, and afterwards only the changed ones are
    checked again; `whole_file` also requires the whole file, before and after, to parse
    (what `--write` asks, so it never writes into a file that does not parse). `helper` says how
    the file reaches the helpers torch lacks (default: from `options`, a module beside the file).
    """
    scanner = scanner or _SCANNER
    result = FileMigration(path=path, original=text, migrated=text)
    try:
        if whole_file:
            _parse(text, path)
        if findings is None:
            findings, tree = _scan(text, path, scanner)
        if tree is None and findings:
            tree = partial_tree(text, path, {line for f in findings for line in (f.location.line, f.location.end_line)})
    except (SyntaxError, ValueError, ScanSkipped) as exc:
        result.error = f"does not parse as Python ({exc}); fix the syntax or exclude the file"
        return result
    if not any(options.selects(f.rule_id) and not f.acknowledged for f in findings):
        return result
    source = SourceIndex.from_tree(text, tree)
    target = knowledge.vendor(options.target) if options.target else None
    helper = helper or options.helper_import()
    ctx = FileContext(source, target=target, whole_tree=lambda: _parse(text, path), helper=helper)
    edits = _rewrite_edits(source, ctx, findings, options)
    edits += ctx.insertions()
    rewritten, pieces = apply_edits(text, edits, ctx.layout)
    changes = _rewrite_changes(path, source, edits)
    line_maps = [LineMap(text, pieces)]

    try:
        removals = unused_import_edits(text, rewritten, path)
    except SyntaxError as exc:
        return _internal_error(result, f"the rewrite did not parse ({exc})")
    if removals:
        cleaned, pieces = apply_edits(rewritten, removals, ctx.layout)
        for edit in removals:
            if edit.error is None:
                line = _old_line(line_maps, rewritten.count("\n", 0, edit.start) + 1)
                changes.append(Change(path, line, REMOVED, None, "import", edit.before.strip(), edit.after.strip(), "no longer used"))
        line_maps.insert(0, LineMap(rewritten, pieces))
        rewritten = cleaned

    try:
        # The rescan parses every rewritten statement: that is the check the rewrite parses.
        remaining, rescanned = _scan(rewritten, path, scanner, also=_changed_lines(line_maps))
        marked, marker_changes = _mark(rewritten, path, options, line_maps, remaining, rescanned)
        if whole_file:
            _parse(marked, path)
    except (SyntaxError, ValueError, ScanSkipped) as exc:
        return _internal_error(result, f"the migrated code did not parse ({exc})")
    result.migrated = marked
    if ctx.needs_compat and helper.path is not None:
        result.helper_path = helper.path
    result.changes = sorted(changes + marker_changes, key=lambda c: (c.line, c.action != ADDED, c.rule_id or ""))
    return result


def partial_tree(text: str, path: str, lines: set[int]) -> ast.Module:
    """The module with only the top-level statements holding `lines` (and the imports) parsed.

    Line and column positions are those of `text`. Other statements are blanked, so a
    large file costs what its relevant statements cost; when the statement boundaries
    guessed from the text are wrong, the whole file is parsed instead.
    """
    split = chunks.split_lines(text)
    starts = chunks.statement_starts(text.encode("utf-8", "surrogatepass"))
    if starts is None:
        return _parse(text, path)
    spans, keep = chunks.select(split, lines, starts)
    if all(keep):
        return _parse(text, path)
    try:
        return _parse(chunks.blanked(split, spans, keep), path)
    except SyntaxError:
        return _parse(text, path)


def _changed_lines(line_maps: Sequence[LineMap]) -> set[int]:
    """Lines of the latest text that some round rewrote (line_maps: latest round first)."""
    changed: set[int] = set()
    for index, line_map in enumerate(reversed(line_maps)):
        later = list(reversed(line_maps))[index + 1 :]
        for line in line_map.changed_lines():
            for forward in later:
                line = forward.new_line(line)
            changed.add(line)
    return changed


def _internal_error(result: FileMigration, what: str) -> FileMigration:
    log.error("%s: %s", result.path, what)
    result.error = f"left unchanged: {what}; this is an accelport bug, please report it with the file"
    return result


def _parse(text: str, path: str) -> ast.Module:
    with warnings.catch_warnings():
        # Invalid escapes are the user's business (Python 3.11 warns with DeprecationWarning, 3.12 SyntaxWarning).
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(text, filename=path)


def _scan(
    text: str,
    path: str,
    scanner: FileScanner | None = None,
    also: set[int] | None = None,
    *,
    data: bytes | None = None,
    wanted: set[int] | None = None,
    edges: chunks.LazyEdges | None = None,
) -> tuple[list[Finding], ast.Module | None]:
    """Inventory's findings for `text` (markers acknowledged) and the parse they came from.

    The parse covers the statements with findings; `also` adds lines whose statements must
    be parsed too (rewritten ones, which may hold no CUDA token any more), so that one
    parse both rescans a rewritten file and checks what was rewritten.
    `data`, `wanted` and `edges`, when the caller has them, are the file's bytes (encoding
    `text`), its CUDA-token lines and its string edges: they are not computed again.
    """
    scanner = scanner or _SCANNER
    source = SourceFile(path, data if data is not None else text.encode("utf-8", "surrogatepass"))
    if type(scanner) is PythonScanner:
        if wanted is None:
            edges = chunks.LazyEdges(source.data)
            wanted = code_token_lines(source.data, edges)
        findings = (
            scan_python_text(source, text, wanted=wanted, data=source.data, edges=edges, parse_also=also)
            if wanted or also
            else []
        )
    else:
        findings = scanner.scan(source)
    if MARKER_WORD in source.data:
        findings = acknowledge(findings, source.lines)
    return findings, source.tree if isinstance(source.tree, ast.Module) else None


def _rewrite_edits(source: SourceIndex, ctx: FileContext, findings: Sequence[Finding], options: Options) -> list[Edit]:
    registry = codemods.load()
    edits: list[Edit] = []
    import_sites = []
    for finding in findings:
        # A rule that is not fixed in general may still have a codemod for the forms that are (AP9001).
        if finding.acknowledged or not options.selects(finding.rule_id):
            continue
        if not finding.autofix and finding.rule_id not in registry:
            continue
        site = source.site(finding)
        if site is None:
            continue
        if isinstance(site.node, ast.alias):
            import_sites.append(site)
            continue
        codemod = registry.get(finding.rule_id)
        if codemod is None:
            continue
        try:
            edit = codemod(site, ctx)
        except Exception as exc:  # a codemod bug must not cost the rest of the file
            log.exception("%s: codemod for %s failed at line %d", source, finding.rule_id, finding.location.line)
            edit = None
            del exc
        if edit is not None:
            edits.append(edit)
    edits += import_edits(import_sites, ctx)
    return edits


def _rewrite_changes(path: str, source: SourceIndex, edits: Sequence[Edit]) -> list[Change]:
    changes = []
    for edit in edits:
        line = source.text.count("\n", 0, edit.start) + 1
        if edit.site is None:
            if edit.after:
                for added in edit.after.strip().splitlines():
                    if added.strip() and not added.startswith((" ", "\t", "#", "try:", "except")):
                        changes.append(Change(path, line, ADDED, None, added.split("=")[0].strip(), "", added.strip()))
            continue
        if edit.error is not None:
            continue  # round 3 finds the finding again and marks it
        finding = edit.site.finding
        changes.append(
            Change(path, finding.location.line, REWRITTEN, finding.rule_id, finding.symbol, edit.before, edit.after)
        )
    return changes


def _old_line(line_maps: Sequence[LineMap], line: int) -> int:
    """A line of the latest text mapped back through each round to the original file."""
    for line_map in line_maps:
        line = line_map.old_line(line)
    return line


def _mark(
    text: str,
    path: str,
    options: Options,
    line_maps: Sequence[LineMap],
    findings: Sequence[Finding],
    tree: ast.Module | None,
) -> tuple[str, list[Change]]:
    """Add a marker for every selected finding still in `text` that has none.

    A marker goes at the end of the finding's line, unless that line continues (a
    backslash, or a string running on), where a comment would change the code.
    """
    pending: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.acknowledged or not options.selects(finding.rule_id):
            continue
        pending.setdefault(finding.location.line, []).append(finding)
    if not pending:
        return text, []
    if tree is None:
        tree = partial_tree(text, path, set(pending))
    lines = text.splitlines(keepends=True)
    index = SourceIndex.from_tree(text, tree)
    texts = marker_texts()
    changes = []
    for number, group in sorted(pending.items()):
        body = lines[number - 1]
        content = body.rstrip("\r\n")
        ending = body[len(content) :]
        original_line = _old_line(line_maps, number)
        if content.rstrip().endswith("\\") or index.line_ends_in_string(number):
            for finding in group:
                changes.append(
                    Change(path, original_line, NOT_REWRITTEN if finding.autofix else MARKED, finding.rule_id, finding.symbol,
                           content.strip(), content.strip(), "the line continues; no marker could be placed")
                )
            continue
        markers = []
        seen = set()
        for finding in group:
            if finding.rule_id in seen:
                continue
            seen.add(finding.rule_id)
            entry = lookup_api(finding.symbol) if finding.symbol else None
            what = (entry[1].get("marker") if entry else None) or texts.get(finding.rule_id, knowledge.rules()[finding.rule_id].summary)
            if finding.autofix:
                what = f"not rewritten automatically here; {what}"
            markers.append(format_marker(finding.rule_id, what))
        new_content = content.rstrip(" \t") + "  " + "  ".join(markers)
        lines[number - 1] = new_content + ending
        for finding in group:
            action = NOT_REWRITTEN if finding.autofix else MARKED
            changes.append(Change(path, original_line, action, finding.rule_id, finding.symbol, content.strip(), new_content.strip()))
    return "".join(lines), changes


# --------------------------------------------------------------------------- many files


_NOT_REWRITTEN_KINDS = {
    ".ipynb": "notebooks are not rewritten; migrate their code cells by hand (inventory lists the findings per cell)",
    ".pyi": "type stubs are not rewritten; update them after migrating the code they describe",
}


def migrate_candidate(candidate: Candidate, options: Options) -> FileMigration | SkippedFile | NotPython | None:
    """Scan one discovered file and migrate it; None when it has no finding to act on.

    A Python file is parsed once: the same tree serves inventory's scan and the rewrite.
    Anything unusual (binary, not UTF-8, does not parse) goes through inventory's own
    `scan_file`, so it is reported exactly as `inventory` reports it. Files that are not
    Python (C++/CUDA sources, build files, manifests, binaries) are route-B work: they are
    counted, never rewritten.
    """
    declared = all_scanners()[candidate.scanner]
    scanner = declared.load()
    setup_script = declared.cls == "SetupScriptScanner"
    suffix = os.path.splitext(candidate.path)[1].lower()
    python = (setup_script or isinstance(scanner, PythonScanner)) and suffix in (".py", ".pyw")
    if python:
        try:
            data = read_regular(candidate.path, candidate.size)
        except OSError as exc:
            return SkippedFile(candidate.display, f"cannot be read ({exc.strerror})")
        if data.startswith(GENERATED_HEADER):
            return _helper_file(candidate.path, candidate.display, data)  # ours: brought up to date, never scanned
        if b"\x00" not in data[:8192]:
            wanted = edges = None
            if not setup_script:
                if not scanner.wants(data):
                    return None
                edges = chunks.LazyEdges(data)
                wanted = code_token_lines(data, edges)
                if not wanted:
                    return None  # no CUDA token outside comments and docstrings
            try:
                bom = data.startswith(b"\xef\xbb\xbf")
                text = data.decode("utf-8-sig" if bom else "utf-8")
                if bom:
                    findings, tree = _scan(text, candidate.display, scanner)  # offsets of the text without its BOM
                else:
                    findings, tree = _scan(text, candidate.display, scanner, data=data, wanted=wanted, edges=edges)
            except (UnicodeDecodeError, ScanSkipped, ValueError, MemoryError, RecursionError):
                pass  # let inventory say what is wrong with it
            else:
                if not any(options.selects(f.rule_id) and not f.acknowledged for f in findings):
                    return None
                migration = migrate_source(
                    text, candidate.display, findings=findings, tree=tree, options=options, scanner=scanner,
                    whole_file=options.whole_file, helper=options.helper_import(candidate.path),
                )
                if migration.error is not None and migration.error.startswith("does not parse"):
                    return SkippedFile(candidate.display, migration.error)
                migration.bom = bom
                migration.disk_path = candidate.path
                if candidate.outside is not None and migration.changed:
                    return SkippedFile(candidate.display, outside_tree(candidate.outside))
                return migration
    result = scan_file(candidate)
    if result.skipped is not None:
        return SkippedFile(result.display, result.skipped) if python or suffix in _NOT_REWRITTEN_KINDS else None
    pending = [f for f in result.findings if options.selects(f.rule_id) and not f.acknowledged]
    if not pending:
        return None
    if suffix in _NOT_REWRITTEN_KINDS:
        return SkippedFile(result.display, _NOT_REWRITTEN_KINDS[suffix])
    if not python:
        return NotPython(result.display, len(pending))
    return SkippedFile(result.display, "not UTF-8; migrate writes UTF-8 only, convert the file first")


def outside_tree(target: str) -> str:
    """The skip reason for a file whose symbolic link leads out of the tree migrate was given."""
    return (
        f"a symbolic link to {target}, outside the tree being migrated (where neither this run nor git "
        "protects it); left unchanged: migrate that file in its own tree"
    )


def helper_files(files: Sequence[FileMigration]) -> list[FileMigration]:
    """The helper modules the migrated files import, as files to create (or bring up to date)."""
    wanted: dict[str, str] = {}
    for migration in files:
        if migration.helper_path and migration.error is None and migration.disk_path:
            folder = os.path.dirname(migration.disk_path)
            display = os.path.join(os.path.dirname(migration.path), os.path.relpath(migration.helper_path, folder))
            wanted.setdefault(migration.helper_path, os.path.normpath(display))
    made = []
    for path, display in sorted(wanted.items()):
        try:
            current: bytes | None = read_regular(path)  # a FIFO in its place is refused, never opened blocking
        except FileNotFoundError:
            current = None
        except OSError:
            current = b""  # cannot be read: writing it is refused as changed on disk
        helper = _helper_file(path, display, current)
        if helper is not None:
            made.append(helper)
    return made


def _helper_file(path: str, display: str, current: bytes | None) -> FileMigration | None:
    """The helper module at `path` as a file to write (None when it already holds what migrate writes)."""
    text = module_text()
    try:
        old = current.decode("utf-8") if current is not None else None
    except UnicodeDecodeError:
        old = ""
    if old == text:
        return None
    name = os.path.splitext(os.path.basename(path))[0]
    if old and not old.startswith(GENERATED_HEADER.decode()):
        why = "left unchanged: a file of this name is not accelport's helper module; pass --helpers-module with another name"
        return FileMigration(display, old, old, error=why, disk_path=path)
    note = "helper module for what torch has no device-agnostic API for; it needs only torch"
    change = Change(display, 1, ADDED, None, name, "", f"{name}.py (generated from accelport.compat)", note)
    return FileMigration(display, old or "", text, [change], disk_path=path, creates=old is None)


def _migrate_chunk(chunk: Sequence[Candidate], options: Options, keep_text: bool = True) -> list:
    with gc_paused():  # as in inventory: the trees here have no cycles worth collecting
        outcomes = [migrate_candidate(c, options) for c in chunk]
    if keep_text:
        return outcomes
    return [o.without_text() if isinstance(o, FileMigration) else o for o in outcomes]


def migrate(
    paths: Sequence[str],
    *,
    options: Options = Options(),
    excludes: Iterable[str] = (),
    jobs: int | None = None,
    respect_gitignore: bool = True,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    on_discovered: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    keep_text: bool = True,
) -> MigrationResult:
    """Migrate every file under `paths`; nothing is written (see `writing.write_files`).

    `keep_text=False` drops each file's text from the result (`--check` needs only what
    would change), which keeps the results shipped back from worker processes small.
    """
    if options.target is not None:
        knowledge.vendor(options.target)
    if not options.roots:
        options = dataclasses.replace(options, roots=tuple(paths))
    forget_folders()
    knowledge.rules()
    marker_texts()
    codemods.load()
    found = discover(
        paths, excludes=excludes, respect_gitignore=respect_gitignore, max_file_size=max_file_size, kinds=all_scanners()
    )
    if on_discovered:
        on_discovered(len(found.files))
    jobs = jobs or os.cpu_count() or 1
    files: list[FileMigration] = []
    not_python: list[NotPython] = []
    skipped = list(found.skipped)
    total = sum(f.size for f in found.files)
    chunks = guided_chunks(found.files, 1 if jobs <= 1 or total < PARALLEL_MIN_BYTES else jobs)
    if jobs <= 1 or len(found.files) < 2 or total < PARALLEL_MIN_BYTES:
        batches: Iterable[list] = (_migrate_chunk(chunk, options, keep_text) for chunk in chunks)
        pool = None
    else:
        from concurrent.futures import ProcessPoolExecutor

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method))
        batches = pool.map(_migrate_chunk, chunks, [options] * len(chunks), [keep_text] * len(chunks))
    try:
        for batch in batches:
            for outcome in batch:
                if isinstance(outcome, SkippedFile):
                    skipped.append(outcome)
                elif isinstance(outcome, NotPython):
                    not_python.append(outcome)
                elif outcome is not None:
                    files.append(outcome)
            if on_progress:
                on_progress(len(batch))
    finally:
        if pool is not None:
            pool.shutdown()
    scanned = len(found.files) - sum(1 for s in skipped if s not in found.skipped)
    have = {f.disk_path for f in files}
    files += [h for h in helper_files(files) if h.disk_path not in have]
    return MigrationResult(
        roots=list(paths),
        files=sorted(files, key=lambda f: f.path),
        files_scanned=scanned,
        skipped=sorted(skipped, key=lambda s: s.path),
        target=options.target,
        select=options.select,
        not_python=sorted(not_python, key=lambda n: n.path),
        stale_temp=found.stale_temp,
    )
