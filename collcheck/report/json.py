"""JSON: `{"findings": [...], "errors": [...], "summary": {...}}` (a public contract)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from collcheck.findings import Finding, Fix, RunResult


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


def fix_to_json(fix: Fix) -> dict[str, Any]:
    """Columns 1-based, as for findings; `end_*` is exclusive."""
    return {
        "applicability": fix.applicability.value,
        "message": fix.description,
        "edits": [
            {
                "line": edit.line,
                "column": edit.column + 1,
                "end_line": edit.end_line,
                "end_column": edit.end_column + 1,
                "content": edit.content,
            }
            for edit in fix.edits
        ],
    }


def _with_fix(data: dict[str, Any], fix: Fix | None, computed: bool) -> dict[str, Any]:
    # Without a fix flag fixes are not computed: no `fix` key rather than a `null` that would
    # claim there is none.
    if computed:
        data["fix"] = fix_to_json(fix) if fix is not None else None
    return data


def result_to_json(result: RunResult) -> dict[str, Any]:
    findings = result.findings
    return {
        "findings": [
            _with_fix(finding_to_json(finding), result.fixes.get(finding), result.fixes_computed)
            for finding in findings
        ],
        "errors": [
            {"path": error.path, "message": error.message, **({"line": error.line} if error.line else {})}
            for error in result.errors
        ],
        "notes": result.notes,
        "unused_suppressions": [
            {"path": item.location.path, "line": item.location.line, "codes": list(item.codes)}
            for item in result.unused_suppressions
        ],
        "stale_baseline": [
            {"fingerprint": e.fingerprint, "code": e.code, "path": e.path, "message": e.message}
            for e in result.stale_baseline
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
