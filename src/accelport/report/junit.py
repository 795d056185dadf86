"""JUnit XML for CI systems: one suite per check group, one case per check."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    classname: str
    seconds: float = 0.0
    failure: str | None = None  # short message when the check failed
    details: str = ""  # longer text: figures, paths
    skipped: str | None = None  # why a check could not run (reported, never silent)


def render(suites: dict[str, Sequence[Case]], name: str = "accelport") -> str:
    root = ET.Element("testsuites", name=name)
    for suite_name, cases in suites.items():
        failures = sum(1 for c in cases if c.failure is not None)
        skipped = sum(1 for c in cases if c.skipped is not None)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=suite_name,
            tests=str(len(cases)),
            failures=str(failures),
            errors="0",
            skipped=str(skipped),
            time=f"{sum(c.seconds for c in cases):.3f}",
        )
        for case in cases:
            element = ET.SubElement(suite, "testcase", name=case.name, classname=case.classname, time=f"{case.seconds:.3f}")
            if case.failure is not None:
                failure = ET.SubElement(element, "failure", message=case.failure)
                failure.text = case.details
            elif case.skipped is not None:
                ET.SubElement(element, "skipped", message=case.skipped)
            if case.details and case.failure is None:
                out = ET.SubElement(element, "system-out")
                out.text = case.details
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
