"""JUnit XML: one testsuite, one testcase per checked file, one `<failure>` per finding.

A file that could not be analysed is a testcase with an `<error>`. CI systems (GitLab, Jenkins,
Azure) show each file as a test that passed or failed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from collcheck.findings import FileResult, Finding, Fix, RunResult
from collcheck.report.text import describe_counterexample, fix_note

SUITE_NAME = "collcheck"

# XML 1.0 forbids most control characters even when escaped; messages quote source text.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    return _INVALID_XML.sub("\ufffd", text)


def _failure(parent: ET.Element, finding: Finding, fix: Fix | None) -> None:
    loc = finding.location
    message = f"{finding.code} {finding.message}{fix_note(fix)}"
    head = f"{loc.path}:{loc.line}:{loc.column + 1}: {message}"
    element = ET.SubElement(parent, "failure", {"type": finding.code, "message": _clean(message)})
    lines = [head]
    if finding.counterexample is not None:
        lines.extend(describe_counterexample(finding.counterexample))
    element.text = _clean("\n".join(lines))


def _testcase(
    suite: ET.Element, result: FileResult, findings: list[Finding], fixes: dict[Finding, Fix]
) -> None:
    case = ET.SubElement(
        suite, "testcase", {"classname": SUITE_NAME, "name": _clean(result.path), "file": _clean(result.path)}
    )
    for finding in findings:
        _failure(case, finding, fixes.get(finding))
    if result.error is not None:
        error = ET.SubElement(case, "error", {"type": "FileError", "message": _clean(result.error.message)})
        error.text = _clean(f"{result.path}: could not be analysed: {result.error.message}")


def junit_tree(result: RunResult) -> ET.Element:
    findings = result.findings  # sorted, and only once
    by_path: dict[str, list[Finding]] = {}
    for finding in findings:
        by_path.setdefault(finding.location.path, []).append(finding)
    files = sorted(result.files, key=lambda item: item.path)
    failed = sum(1 for item in files if by_path.get(item.path) and item.error is None)
    counts = {"tests": len(files), "failures": failed, "errors": len(result.errors), "skipped": 0}
    attributes = {key: str(value) for key, value in counts.items()}
    root = ET.Element("testsuites", {"name": SUITE_NAME, **attributes})
    suite = ET.SubElement(root, "testsuite", {"name": SUITE_NAME, **attributes, "time": "0"})
    for item in files:
        _testcase(suite, item, by_path.get(item.path, []), result.fixes)
    return root


def render_junit(result: RunResult) -> str:
    root = junit_tree(result)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
