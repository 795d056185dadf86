"""Generate knowledge/cuda_api/hipify_catalogue.json from HIPIFY's API tables.

Usage: python scripts/gen_cuda_catalogue.py [TABLES_DIR] [-o OUT]

TABLES_DIR defaults to data/upstream/hipify-tables, the repository's copy of
ROCm/HIPIFY `docs/tables/` (commit 014177bc2e434ce3e834aa4f3d0e2abb1efa9796, MIT). The output records that
source, commit and licence; the package reads only the generated file.

Each table row is `|CUDA|A|D|C|R|HIP|A|D|C|R|E|[ROC|A|D|C|R|E]` where A/D/C/R are
the versions that added, deprecated, changed and removed the symbol and E marks
an experimental HIP/ROC API.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TABLES = ROOT / "data" / "upstream" / "hipify-tables"  # vendored copy of shared/data/hipify-tables
DEFAULT_OUT = ROOT / "src" / "accelport" / "knowledge" / "cuda_api" / "hipify_catalogue.json"

SOURCE = {
    "project": "ROCm/HIPIFY",
    "path": "docs/tables/",
    "commit": "014177bc2e434ce3e834aa4f3d0e2abb1efa9796",
    "date": "2024-10",
    "hip_version": "6.3.0",
    "licence": "MIT",
    "copyright": "Copyright (c) 2024 Advanced Micro Devices, Inc.",
    "generator": "scripts/gen_cuda_catalogue.py",
}

# family id -> (table file, title, accelport category, name of the third column's library)
FAMILIES: dict[str, tuple[str, str, str, str | None]] = {
    "runtime": ("CUDA_Runtime_API_functions_supported_by_HIP.md", "CUDA Runtime API", "runtime-api", None),
    "driver": ("CUDA_Driver_API_functions_supported_by_HIP.md", "CUDA Driver API", "driver-api", None),
    "device": ("CUDA_Device_API_supported_by_HIP.md", "CUDA device functions and types", "kernel", None),
    "rtc": ("CUDA_RTC_API_supported_by_HIP.md", "NVRTC (runtime compilation)", "library-call", None),
    "cublas": ("CUBLAS_API_supported_by_HIP_and_ROC.md", "cuBLAS / cuBLASLt", "library-call", "rocBLAS"),
    "cudnn": ("CUDNN_API_supported_by_HIP_and_MIOPEN.md", "cuDNN", "library-call", "MIOpen"),
    "cufft": ("CUFFT_API_supported_by_HIP.md", "cuFFT", "library-call", None),
    "curand": ("CURAND_API_supported_by_HIP_and_ROC.md", "cuRAND", "library-call", "rocRAND"),
    "cusolver": ("CUSOLVER_API_supported_by_HIP_and_ROC.md", "cuSOLVER", "library-call", "rocSOLVER"),
    "cusparse": ("CUSPARSE_API_supported_by_HIP_and_ROC.md", "cuSPARSE", "library-call", "rocSPARSE"),
    "cub": ("CUB_API_supported_by_HIP.md", "CUB", "library-call", None),
    "cucomplex": ("cuComplex_API_supported_by_HIP.md", "cuComplex", "library-call", None),
}

COLUMNS = [
    "family",
    "section",
    "kind",
    "cuda_added",
    "cuda_deprecated",
    "cuda_removed",
    "hip",
    "hip_added",
    "hip_deprecated",
    "hip_removed",
    "hip_experimental",
    "roc",
    "roc_experimental",
]

_SECTION = re.compile(r"^## \*\*\d+\. (?P<title>.+?)\*\*\s*$")
_TYPE_SECTION = re.compile(r"data types|types references|device types", re.IGNORECASE)


def _cell(text: str) -> str:
    return text.strip().strip("`").strip()


def parse_table(path: Path, family: str) -> tuple[list[str], dict[str, list]]:
    """Sections and symbol rows of one HIPIFY table file."""
    sections: list[str] = []
    rows: dict[str, list] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _SECTION.match(line)
        if match:
            sections.append(match.group("title"))
            continue
        if not line.startswith("|`"):
            continue
        cells = [_cell(c) for c in line.strip().strip("|").split("|")]
        if len(cells) not in (11, 17):
            raise ValueError(f"{path.name}: unexpected row with {len(cells)} cells: {line}")
        if not sections:
            raise ValueError(f"{path.name}: table row before any section: {line}")
        symbol = cells[0]
        section = sections[-1]
        kind = "type" if _TYPE_SECTION.search(section) else "function"
        hip = cells[5]
        roc = cells[11] if len(cells) == 17 else ""
        rows.setdefault(
            symbol,
            [
                family,
                len(sections) - 1,
                kind,
                cells[1],
                cells[2],
                cells[4],
                hip,
                cells[6] if hip else "",
                cells[7] if hip else "",
                cells[9] if hip else "",
                bool(hip and cells[10]),
                roc,
                bool(roc and cells[16]),
            ],
        )
    return sections, rows


def build(tables: Path) -> dict:
    licence = (tables / "LICENSE.txt").read_text(encoding="utf-8")
    families = {}
    symbols: dict[str, list] = {}
    for family, (filename, title, category, roc_library) in FAMILIES.items():
        sections, rows = parse_table(tables / filename, family)
        families[family] = {
            "title": title,
            "category": category,
            "table": filename,
            "roc_library": roc_library,
            "sections": sections,
        }
        for symbol, row in rows.items():
            symbols.setdefault(symbol, row)  # first family wins: runtime before the libraries
    return {
        "source": {**SOURCE, "licence_text": licence},
        "columns": COLUMNS,
        "families": families,
        "symbols": dict(sorted(symbols.items())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="?", type=Path, default=DEFAULT_TABLES)
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not (args.tables / "LICENSE.txt").is_file():
        print(f"{args.tables}: not a HIPIFY tables folder (no LICENSE.txt)", file=sys.stderr)
        return 2
    data = build(args.tables)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # One symbol per line keeps diffs of regenerated files readable.
    text = text.replace('],"', '],\n"')
    args.output.write_text(text + "\n", encoding="utf-8")
    print(f"{args.output}: {len(data['symbols'])} symbols in {len(data['families'])} families")
    return 0


if __name__ == "__main__":
    sys.exit(main())
