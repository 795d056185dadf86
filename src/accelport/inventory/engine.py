"""Run the scanners over discovered files, in parallel processes, and assemble the Report."""

from __future__ import annotations

import codecs
import gc
import logging
import os
import queue
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from accelport import __version__, knowledge
from accelport.errors import UserError
from accelport.findings import BackendStatus, Effort, Finding, Report, SkippedFile, sorted_findings
from accelport.inventory.base import ScanSkipped, SourceFile
from accelport.inventory.route import summarise
from accelport.inventory.scanners import all_scanners, load_scanners
from accelport.source.walk import DEFAULT_MAX_FILE_SIZE, Candidate, discover, read_regular

log = logging.getLogger(__name__)

# Files smaller than this in total are scanned in-process: starting workers costs more.
PARALLEL_MIN_BYTES = 2 * 1024 * 1024
# Findings kept per file; beyond them one summary finding per rule says how many more there
# are. A 60 MB generated file once gave 1.5 million findings and 11 GB of memory.
MAX_FINDINGS_PER_FILE = 10_000
_PYTHON_MODULE = "accelport.inventory.python"
_CXX_MODULE = "accelport.inventory.cxx"
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


@dataclass(frozen=True, slots=True)
class FileResult:
    display: str
    lines: int
    findings: tuple[Finding, ...] = ()
    skipped: str | None = None
    skipped_parts: tuple[tuple[str, str], ...] = ()  # (part, reason): scanned, but these parts not


def _declared_encoding(data: bytes) -> str | None:
    """A PEP 263 coding cookie in the first two lines, if any."""
    for line in data.split(b"\n", 2)[:2]:
        match = _CODING.match(line)
        if match:
            try:
                return codecs.lookup(match.group(1).decode("ascii")).name
            except (LookupError, UnicodeDecodeError):
                return None
    return None


def _summaries(source: SourceFile, limit: int) -> list[Finding]:
    """One finding per rule with findings beyond the limit: the first of them, saying how many more there are."""
    from dataclasses import replace

    return [
        replace(
            first,
            message=f"{count} more {rule_id} finding{'s' if count > 1 else ''} in this file from here on, not listed "
            f"(a file keeps its first {limit} findings; this one stands for the rest). First: {first.message}",
        )
        for rule_id, (count, first) in sorted(source.dropped.items())
    ]


def _capped(findings: list[Finding], source: SourceFile, limit: int | None) -> tuple[Finding, ...]:
    if limit is None:
        return tuple(findings)
    if len(findings) > limit:  # a scanner that does not admit() as it goes
        source.admitted = limit
        for finding in findings[limit:]:
            source.admit(finding)
    return (*findings[:limit], *_summaries(source, limit))


def scan_file(candidate: Candidate, finding_limit: int | None = None) -> FileResult:
    """Scan one file; every failure becomes a skip reason, never an exception.

    With `finding_limit`, at most that many findings are kept, and one summary finding
    per rule stands for the rest (inventory: MAX_FINDINGS_PER_FILE).
    """
    scanner = all_scanners()[candidate.scanner].load()
    try:
        data = read_regular(candidate.path, candidate.size)
    except OSError as exc:
        return FileResult(candidate.display, 0, skipped=f"cannot be read ({exc.strerror})")
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    source = SourceFile(candidate.display, data, finding_limit=finding_limit)
    if not scanner.binary:
        if b"\x00" in data[:8192]:
            return FileResult(candidate.display, lines, skipped="binary content (NUL bytes) in a source file")
        try:
            source.text  # noqa: B018 - decode once to validate UTF-8
        except ScanSkipped as exc:
            encoding = _declared_encoding(data)
            if encoding is None:
                return FileResult(candidate.display, lines, skipped=str(exc))
            try:
                source._text = data.decode(encoding)
            except UnicodeDecodeError:
                return FileResult(candidate.display, lines, skipped=f"{exc} and does not match its declared {encoding}")
    if not scanner.wants(data):
        return FileResult(candidate.display, lines)
    try:
        findings = scanner.scan(source)
    except ScanSkipped as exc:
        return FileResult(candidate.display, lines, skipped=str(exc))
    except RecursionError:
        return FileResult(candidate.display, lines, skipped="nested too deeply to parse")
    except UserError:
        raise  # bad site knowledge: the user's to fix, not this file's
    except Exception as exc:  # a scanner bug must not lose the rest of the scan
        log.exception("%s scanner failed on %s", scanner.name, candidate.display)
        return FileResult(candidate.display, lines, skipped=f"internal error in the {scanner.name} scanner: {type(exc).__name__}: {exc}")
    findings = _capped(list(findings), source, finding_limit)
    return FileResult(candidate.display, lines, findings, skipped_parts=tuple(source.skipped_parts))


def _scan_chunk(chunk: Sequence[Candidate], finding_limit: int | None) -> list[FileResult]:
    # Parsing allocates millions of short-lived nodes; with the scanners' trees
    # free of reference cycles, the cyclic collector only costs time here.
    with gc_paused():
        return [scan_file(c, finding_limit) for c in chunk]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a while, then back as it was (a caller may have paused it too)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def work_chunks(files: Sequence[Candidate], jobs: int) -> list[list[Candidate]]:
    """Chunks that shrink as the work runs out ("guided" scheduling), so that no process waits long at the end.

    Each chunk takes about 1/(4 x jobs) of the bytes still left, down to a floor of
    1/(64 x jobs) of the total: big chunks while there is plenty to share, small ones last.
    """
    total = sum(f.size for f in files)
    floor = max(total // (jobs * 64), 1)
    chunks: list[list[Candidate]] = [[]]
    left = total
    size = 0
    target = max(left // (jobs * 4), floor)
    for candidate in files:
        chunks[-1].append(candidate)
        size += candidate.size
        if size >= target:
            left -= size
            chunks.append([])
            size = 0
            target = max(left // (jobs * 4), floor)
    return [c for c in chunks if c]


def _claim(counter, total: int) -> int | None:
    """The next unclaimed chunk index, shared by every process; None when all are taken."""
    with counter.get_lock():
        index = counter.value
        if index >= total:
            return None
        counter.value = index + 1
    return index


def _worker(chunks: list[list[Candidate]], counter, results, finding_limit: int | None) -> None:
    gc.disable()
    try:
        while (index := _claim(counter, len(chunks))) is not None:
            try:
                results.put((index, [scan_file(c, finding_limit) for c in chunks[index]]))
            except BaseException as exc:  # a UserError from site knowledge, or worse: the parent re-raises it
                results.put((index, exc))
                return
    finally:
        results.put(None)  # this worker is done
        results.close()
        results.join_thread()


def run_scanners(
    files: Sequence[Candidate],
    jobs: int,
    on_progress: Callable[[int], None] | None = None,
    finding_limit: int | None = MAX_FINDINGS_PER_FILE,
) -> Iterable[FileResult]:
    total_bytes = sum(f.size for f in files)
    serial = jobs <= 1 or len(files) < 2 or total_bytes < PARALLEL_MIN_BYTES
    if not serial:
        import multiprocessing  # small trees never pay for it

        serial = "fork" not in multiprocessing.get_all_start_methods()
    if serial:
        for chunk in work_chunks(files, 1):
            yield from _scan_chunk(chunk, finding_limit)
            if on_progress:
                on_progress(len(chunk))
        return
    # This process works too. Every process claims the next chunk from one shared counter,
    # so the work balances to the last chunk; forked workers inherit the chunks, the loaded
    # knowledge and the scanners, and only results travel (through a queue).
    context = multiprocessing.get_context("fork")
    chunks = work_chunks(files, jobs)
    counter = context.Value("i", 0)
    results = context.Queue()
    workers = [context.Process(target=_worker, args=(chunks, counter, results, finding_limit), daemon=True) for _ in range(jobs - 1)]
    for worker in workers:
        worker.start()
    done: set[int] = set()
    running = len(workers)

    def collect(block: bool) -> Iterable[FileResult]:
        nonlocal running
        while running:
            try:
                item = results.get(timeout=0.5) if block else results.get_nowait()
            except queue.Empty:
                if not block:
                    return
                if not any(w.is_alive() for w in workers):
                    running = 0  # a worker died without a word (killed): its chunks are rescanned below
                continue
            if item is None:
                running -= 1
                continue
            index, payload = item
            if isinstance(payload, BaseException):
                raise payload
            done.add(index)
            yield from payload
            if on_progress:
                on_progress(len(payload))
            if block:
                return

    try:
        with gc_paused():
            while (index := _claim(counter, len(chunks))) is not None:
                chunk_results = [scan_file(c, finding_limit) for c in chunks[index]]
                done.add(index)
                yield from chunk_results
                if on_progress:
                    on_progress(len(chunk_results))
                yield from collect(block=False)
            while running:
                yield from collect(block=True)
            # Chunks claimed by a worker that died before it returned them: scan them here.
            for index in range(len(chunks)):
                if index not in done:
                    yield from _scan_chunk(chunks[index], finding_limit)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
            worker.join()
        results.close()


def _load_catalogue() -> None:
    from accelport.inventory.cuda_api import catalogue  # C/C++, build files and binaries only

    catalogue()


def retarget(findings: list[Finding], target: str) -> list[Finding]:
    """With --target, a finding that works unchanged on that vendor needs no effort there."""
    from dataclasses import replace

    out = []
    for finding in findings:
        if finding.backends.get(target) is BackendStatus.OK and finding.effort is not Effort.NONE:
            finding = replace(finding, effort=Effort.NONE, message=f"{finding.message} (works unchanged on {target})")
        out.append(finding)
    return out


def scan(
    paths: Sequence[str],
    *,
    target: str | None = None,
    excludes: Iterable[str] = (),
    jobs: int | None = None,
    respect_gitignore: bool = True,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    on_discovered: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    max_findings_per_file: int = MAX_FINDINGS_PER_FILE,
) -> Report:
    """Inventory the CUDA dependencies under `paths` (files or folders).

    Memory stays bounded whatever `max_file_size` allows: a file keeps at most
    `max_findings_per_file` findings, and one summary finding per rule counts the rest.
    """
    if target is not None:
        knowledge.vendor(target)  # unknown vendor -> UserError now, not after the scan
    # Load (and validate) every knowledge file before forking: workers share it, and a
    # broken site file is one error line now rather than a failure inside a scanner.
    knowledge.rules()
    knowledge.vendors()
    knowledge.torch_api()
    knowledge.packages()
    if any("cuda_api" in data for _, data in knowledge._user_data()):
        _load_catalogue()  # site [[cuda_api]] entries, checked even when the tree holds no C/C++
    found = discover(
        paths, excludes=excludes, respect_gitignore=respect_gitignore, max_file_size=max_file_size, kinds=all_scanners()
    )
    # Import the scanners this tree needs (and, for C/C++, build files and binaries, the
    # CUDA API catalogue) once, here, so that forked workers inherit them.
    used = {candidate.scanner for candidate in found.files}
    load_scanners(used)
    modules = {all_scanners()[index].module for index in used}
    if modules - {_PYTHON_MODULE}:
        _load_catalogue()
    if on_discovered:
        on_discovered(len(found.files))
    jobs = jobs or os.cpu_count() or 1
    findings: list[Finding] = []
    skipped = list(found.skipped)
    scanned = 0
    lines = 0
    for result in run_scanners(found.files, jobs, on_progress, max_findings_per_file):
        lines += result.lines
        if result.skipped is not None:
            skipped.append(SkippedFile(result.display, result.skipped))
            continue
        scanned += 1
        findings.extend(result.findings)
        skipped.extend(SkippedFile(f"{result.display}!{part}", reason) for part, reason in result.skipped_parts)
    findings = sorted_findings(findings)
    if _CXX_MODULE in modules:  # kernels and launches exist only where C/C++ was scanned
        from accelport.inventory.cxx import link_kernel_launches, link_wrappers

        findings = link_kernel_launches(findings)
        cxx = [(c.path, c.display) for c in found.files if all_scanners()[c.scanner].module == _CXX_MODULE]
        findings = link_wrappers(findings, cxx)
    if target is not None:
        findings = retarget(findings, target)
    route, effort, files = summarise(findings)
    return Report(
        tool_version=__version__,
        roots=list(paths),
        findings=findings,
        files_scanned=scanned,
        lines_scanned=lines,
        skipped=sorted(skipped, key=lambda s: s.path),
        route=route,
        effort=effort,
        files=files,
        target=target,
    )
