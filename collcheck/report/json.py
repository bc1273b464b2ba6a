"""JSON: `{"findings": [...], "errors": [...], "summary": {...}}` (a public contract)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from collcheck.findings import Finding, RunResult


def finding_to_json(finding: Finding) -> dict[str, Any]:
    loc = finding.location
    data: dict[str, Any] = {
        "code": finding.code,
        "severity": finding.severity.value,
        "path": loc.path,
        "line": loc.line,
        "column": loc.column + 1,
        "end_line": loc.end_line if loc.end_line is not None else loc.line,
        "end_column": (loc.end_column if loc.end_column is not None else loc.column) + 1,
        "message": finding.message,
        "function": finding.function,
    }
    if finding.counterexample is not None:
        data["counterexample"] = finding.counterexample.to_json()
    return data


def result_to_json(result: RunResult) -> dict[str, Any]:
    findings = result.findings
    return {
        "findings": [finding_to_json(finding) for finding in findings],
        "errors": [
            {"path": error.path, "message": error.message, **({"line": error.line} if error.line else {})}
            for error in result.errors
        ],
        "notes": result.notes,
        "unused_suppressions": [
            {"path": item.location.path, "line": item.location.line, "codes": list(item.codes)}
            for item in result.unused_suppressions
        ],
        "summary": {
            "files": len(result.files),
            "findings": len(findings),
            "errors": len(result.errors),
            "by_code": dict(sorted(Counter(finding.code for finding in findings).items())),
        },
    }


def render_json(result: RunResult) -> str:
    return json.dumps(result_to_json(result), indent=2)
