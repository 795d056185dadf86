"""Binary scanner: ELF shared objects, objects, cubins and the ELF files inside wheels, read with pyelftools.

It reports what no source scan can see: DT_NEEDED entries on NVIDIA libraries,
undefined CUDA symbols the binary expects to import, and embedded GPU code
(`.nv_fatbin` / `.nvFatBinSegment`) with the SM architectures it was built for.
No CUDA tool is needed.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from accelport.findings import BackendStatus, Finding, Location
from accelport.inventory.base import (
    FileScanner,
    ScanSkipped,
    SourceFile,
    backend_statuses,
    make_finding,
)
from accelport.inventory.cuda_api import catalogue

ELF_MAGIC = b"\x7fELF"
ZIP_MAGIC = b"PK\x03\x04"
FATBIN_MAGIC = 0xBA55ED50  # .nv_fatbin container header
FATBIN_WRAPPER_MAGIC = 0x466243B1  # __fatBinC_Wrapper_t in .nvFatBinSegment
EM_CUDA = 190
# An ELF member of a wheel larger than this is reported, not read into memory.
MAX_MEMBER_BYTES = 256 * 1024 * 1024
METADATA_MAX_BYTES = 4 * 1024 * 1024  # a wheel's METADATA file; larger is not metadata
MAX_LISTED_SYMBOLS = 12

# Undefined symbols worth a look even when the catalogue does not list them.
_CUDA_SYMBOL = re.compile(r"(?:cuda|cu[A-Z]|cublas|cudnn|cufft|curand|cusolver|cusparse|nccl|nvrtc|nvtx|cutensor|cupti)\w*")
# Itanium-mangled names in at::cuda / c10::cuda (e.g. _ZN2at4cuda20getCurrentCUDAStreamEa).
_ATEN_MANGLED = re.compile(r"_ZN(?:K)?(?:2at|3c10)4cuda")

_FATBIN_KINDS = {1: "PTX", 2: "SASS", 4: "LTO-IR"}


@dataclass(frozen=True, slots=True)
class FatbinEntry:
    kind: str  # PTX | SASS | LTO-IR | kind N
    arch: int

    @property
    def label(self) -> str:
        if self.kind == "PTX":
            return f"compute_{self.arch}"
        if self.kind == "SASS":
            return f"sm_{self.arch}"
        return f"{self.kind.lower()}_{self.arch}"


def parse_fatbin(data: bytes) -> list[FatbinEntry]:
    """Entries of every fat-binary container in a `.nv_fatbin` section (or a .fatbin file).

    Layout (little endian): container header {u32 magic, u16 version, u16 header size,
    u64 payload size}, then entries {u16 kind, u16, u32 entry header size, u64 payload
    size, u32, u32, u16 minor, u16 major, u32 arch, ...} each followed by its payload.
    """
    entries: list[FatbinEntry] = []
    offset = 0
    limit = len(data)
    while offset + 16 <= limit:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, offset)
        if magic != FATBIN_MAGIC:
            # Containers are 8-byte aligned; padding between them is zeros.
            next_at = data.find(struct.pack("<I", FATBIN_MAGIC), offset + 1)
            if next_at < 0:
                break
            offset = next_at
            continue
        if header_size < 16:
            break
        start = offset + header_size
        end = min(start + fat_size, limit)
        entry = start
        while entry + 32 <= end:
            kind, _unknown, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            if entry_header < 32:
                break
            entries.append(FatbinEntry(_FATBIN_KINDS.get(kind, f"kind {kind}"), arch))
            entry += entry_header + payload
        offset = max(end, offset + 16)
    return entries


@dataclass(frozen=True, slots=True)
class ElfFacts:
    """What one ELF file tells about its CUDA dependencies."""

    needed: tuple[str, ...]
    undefined: tuple[str, ...]
    fatbin_sections: tuple[str, ...]
    fatbin: tuple[FatbinEntry, ...]
    cuda_machine: bool
    cuda_arch: int | None


def read_elf(data: bytes) -> ElfFacts:
    """Parse an ELF image; raise ScanSkipped with the reason when it is truncated or malformed."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        elf = ELFFile(io.BytesIO(data))
        cuda_machine = elf["e_machine"] in ("EM_CUDA", EM_CUDA)
        cuda_arch = (elf["e_flags"] & 0xFF) or None if cuda_machine else None
        needed: list[str] = []
        undefined: set[str] = set()
        sections: list[str] = []
        fatbin: list[FatbinEntry] = []
        for section in elf.iter_sections():
            name = section.name
            if isinstance(section, DynamicSection):
                needed.extend(tag.needed for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED")
            elif isinstance(section, SymbolTableSection):
                for symbol in section.iter_symbols():
                    if symbol["st_shndx"] == "SHN_UNDEF" and symbol.name:
                        undefined.add(symbol.name.split("@", 1)[0])
            if name in (".nv_fatbin", ".nvFatBinSegment", "__nv_relfatbin", ".nv_relfatbin"):
                sections.append(name)
                if name == ".nv_fatbin" and section["sh_type"] != "SHT_NOBITS":
                    fatbin.extend(parse_fatbin(section.data()))
    except ELFError as exc:
        raise ScanSkipped(f"malformed ELF file ({exc}); it may be truncated") from None
    except (struct.error, ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError, MemoryError) as exc:
        raise ScanSkipped(f"truncated or malformed ELF file ({type(exc).__name__}: {exc})") from None
    return ElfFacts(tuple(needed), tuple(sorted(undefined)), tuple(sections), tuple(fatbin), cuda_machine, cuda_arch)


class BinaryScanner(FileScanner):
    """Shared objects, relocatable objects, cubins, fatbins and wheels."""

    name = "binary"
    suffixes = (".so", ".o", ".cubin", ".fatbin", ".whl", ".node")
    filename_patterns = (r".+\.so(?:\.\d+)+",)
    binary = True
    max_member_bytes = MAX_MEMBER_BYTES

    def scan(self, source: SourceFile) -> list[Finding]:
        data = source.data
        name = source.display.lower()
        if data.startswith(ZIP_MAGIC) and name.endswith(".whl"):
            return list(self._wheel(source, data))
        if name.endswith(".fatbin") and data[:4] == struct.pack("<I", FATBIN_MAGIC):
            return list(_fatbin_findings(source.display, "", parse_fatbin(data), (".fatbin file",)))
        if not data.startswith(ELF_MAGIC):
            if name.endswith(".whl"):
                raise ScanSkipped("not a wheel (no zip header)")
            what = "a linker script or text file" if data[:64].isascii() and data.strip() else "not an ELF file"
            raise ScanSkipped(f"{what}, not an ELF binary; nothing to inspect")
        return list(_elf_findings(source.display, "", read_elf(data)))

    def _wheel(self, source: SourceFile, data: bytes) -> Iterator[Finding]:
        """Findings of a wheel's metadata and binary members; a member that cannot be read is a skipped part."""
        display = source.display
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
            members = archive.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise ScanSkipped(f"not a readable wheel ({exc})") from None
        for info in members:
            member = info.filename
            lower = member.lower()
            metadata = lower.endswith(".dist-info/metadata")
            if not (metadata or lower.endswith((".so", ".cubin", ".fatbin")) or re.search(r"\.so(\.\d+)+$", lower)):
                continue
            limit = METADATA_MAX_BYTES if metadata else self.max_member_bytes
            if info.file_size > limit:
                source.skipped_parts.append(
                    (member, f"wheel member of {_size(info.file_size)} is over the {_size(limit)} limit for one member; not read")
                )
                continue
            try:
                blob = archive.read(info)
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, zlib.error) as exc:
                source.skipped_parts.append((member, f"wheel member cannot be read ({exc}); the wheel may be truncated or corrupt"))
                continue
            if metadata:
                yield from _metadata_findings(display, member, blob)
            elif lower.endswith(".fatbin") and blob[:4] == struct.pack("<I", FATBIN_MAGIC):
                yield from _fatbin_findings(display, member, parse_fatbin(blob), (".fatbin file",))
            elif blob.startswith(ELF_MAGIC):
                try:
                    facts = read_elf(blob)
                except ScanSkipped as exc:
                    source.skipped_parts.append((member, f"wheel member: {exc}"))
                    continue
                yield from _elf_findings(display, member, facts)


def _size(count: int) -> str:
    if count >= 1024 * 1024 and count % (1024 * 1024) == 0:
        return f"{count // (1024 * 1024)} MiB"
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MiB"
    return f"{count} bytes"


def _metadata_findings(display: str, member: str, metadata: bytes) -> Iterator[Finding]:
    """CUDA wheels the wheel itself requires (`Requires-Dist: nvidia-cublas-cu12`)."""
    from accelport.inventory.manifests import Span, requirement_findings

    for number, line in enumerate(metadata.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = line.partition(":")[2].strip()
        # Location: the wheel file; the member and its line go into the snippet.
        yield from requirement_findings(requirement, display, Span(1, 1, 1), f"{member}:{number}: {line.strip()}")


def _location(display: str) -> Location:
    return Location(display, 1, 1, 1, 1)


def _where(member: str) -> str:
    return f" (wheel member {member})" if member else ""


def _binary_backends() -> dict[str, BackendStatus]:
    # Only NVIDIA runs it; HIP-capable vendors after a rebuild from source.
    statuses = backend_statuses(cuda_like=BackendStatus.PORTABLE, others=BackendStatus.UNSUPPORTED)
    statuses["cuda"] = BackendStatus.OK
    return statuses


def _elf_findings(display: str, member: str, facts: ElfFacts) -> Iterator[Finding]:
    cat = catalogue()
    where = _where(member)
    location = _location(display)
    for soname in facts.needed:
        family = cat.library_family(soname)
        if family is None:
            continue
        yield make_finding(
            "AP7001",
            symbol=soname,
            location=location,
            snippet=f"NEEDED {soname}" + where,
            message=f"links against {soname} ({family.title}){where}",
            backends=_binary_backends(),
        )
    by_family: dict[str, list[str]] = defaultdict(list)
    for name in facts.undefined:
        if _ATEN_MANGLED.match(name):
            by_family["aten"].append(name)
            continue
        if not _CUDA_SYMBOL.fullmatch(name):
            continue
        entry = cat.lookup(name)
        if entry is not None:
            by_family[entry.family.key].append(name)
    for family_key, names in sorted(by_family.items()):
        family = cat.families[family_key]
        shown = ", ".join(names[:MAX_LISTED_SYMBOLS]) + (f" and {len(names) - MAX_LISTED_SYMBOLS} more" if len(names) > MAX_LISTED_SYMBOLS else "")
        yield make_finding(
            "AP7002",
            symbol=names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1})",
            location=location,
            snippet="U " + " ".join(names[:4]) + where,
            message=f"{len(names)} undefined {family.title} symbol(s){where}: {shown}",
            backends=_binary_backends(),
        )
    if facts.fatbin_sections:
        yield from _fatbin_findings(display, member, facts.fatbin, facts.fatbin_sections)
    if facts.cuda_machine:
        arch = f"sm_{facts.cuda_arch}" if facts.cuda_arch else "unknown architecture"
        yield make_finding(
            "AP7004",
            symbol=arch,
            location=location,
            snippet=f"ELF machine EM_CUDA, {arch}" + where,
            message=f"NVIDIA device code (cubin) for {arch}{where}",
            backends=_binary_backends(),
        )


def _fatbin_findings(display: str, member: str, entries: list[FatbinEntry] | tuple[FatbinEntry, ...], sections: tuple[str, ...]) -> Iterator[Finding]:
    labels = sorted({e.label for e in entries}, key=lambda s: (s.split("_")[0], int(s.rsplit("_", 1)[1]) if s.rsplit("_", 1)[1].isdigit() else 0))
    archs = " ".join(labels) if labels else "architectures not readable"
    yield make_finding(
        "AP7003",
        symbol=archs,
        location=_location(display),
        snippet=f"{', '.join(sections)}: {archs}" + _where(member),
        message=f"embedded NVIDIA GPU code in {', '.join(sections)}: {archs}{_where(member)}",
        backends=_binary_backends(),
    )
