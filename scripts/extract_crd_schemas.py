"""Extract the openAPIV3Schema of each served version from an upstream CRD file, for pools/crds/.

    python scripts/extract_crd_schemas.py UPSTREAM.yaml --repo OWNER/NAME --path PATH --commit SHA
    python scripts/extract_crd_schemas.py UPSTREAM.yaml ... --check src/accelport/pools/crds/FILE.yaml

Drops `description` (never affects validation) and `status` (accelport renders desired state
only); for the Volcano Job, replaces the embedded core/v1 PodSpec under
spec.tasks[].template.spec by a marker (accelport validates it as a core/v1 PodTemplate with
kubernetes-validate, strictly). Writes YAML with a `source` block (repository, path, commit,
generator, licence). `--check` compares, after YAML loading, with an existing file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

POD_SPEC_MARKER = {
    "required": ["containers"],
    "type": "object",
    "x-accelport-pod-spec": "core/v1 PodSpec, validated with kubernetes-validate (strict)",
}


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def extract(crd: dict[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]
    versions = {}
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        schema = _strip(version["schema"]["openAPIV3Schema"])
        schema.get("properties", {}).pop("status", None)
        if spec["group"] == "batch.volcano.sh" and spec["names"]["kind"] == "Job":
            task = schema["properties"]["spec"]["properties"]["tasks"]["items"]["properties"]
            task["template"]["properties"]["spec"] = dict(POD_SPEC_MARKER)
        versions[version["name"]] = schema
    return {"group": spec["group"], "kind": spec["names"]["kind"], "versions": versions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("crd", type=Path)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--licence", default="Apache-2.0")
    parser.add_argument("--check", type=Path, help="compare with this existing file instead of printing")
    args = parser.parse_args(argv)
    crd = next(d for d in yaml.safe_load_all(args.crd.read_text()) if d and d.get("kind") == "CustomResourceDefinition")
    generator = (crd.get("metadata", {}).get("annotations") or {}).get("controller-gen.kubebuilder.io/version", "")
    result = extract(crd)
    if args.check:
        existing = yaml.safe_load(args.check.read_text())
        same = existing["versions"] == result["versions"] and existing["kind"] == result["kind"]
        print(f"{args.check}: {'matches' if same else 'DIFFERS from'} {args.crd}")
        return 0 if same else 1
    document = {
        "source": {"repo": args.repo, "path": args.path, "commit": args.commit, "generator": f"controller-gen {generator}".strip(), "licence": args.licence},
        "transform": "descriptions and status dropped" + ("; tasks[].template.spec replaced by x-accelport-pod-spec marker" if result["kind"] == "Job" and result["group"] == "batch.volcano.sh" else ""),
        **result,
    }
    header = f"# openAPIV3Schema of the {result['kind']} CRD ({result['group']}), from {args.repo} ({args.licence}).\n"
    sys.stdout.write(header + yaml.safe_dump(document, sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
