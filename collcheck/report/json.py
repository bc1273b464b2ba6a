"""JSON: `{"findings": [...], "errors": [...], "summary": {...}}` (a public contract)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path, PurePath
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
        "budget_cuts": [
            {
                "path": c.path,
                "line": c.line,
                "function": c.function,
                "budget": c.budget.value,
                "limit": c.limit,
            }
            for c in result.budget_cuts
        ],
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
            "budget_cuts": len(result.budget_cuts),
            "by_code": dict(sorted(Counter(finding.code for finding in findings).items())),
        },
    }


def relative_paths(data: Any, root: Path) -> Any:
    """`data` with every `path` value, and every note that starts with a path, relative to `root`
    when it lies under it: the paths of files reached through imports are absolute otherwise."""
    if isinstance(data, dict):
        return {
            key: shown_path(value, root)
            if key == "path" and isinstance(value, str)
            else relative_paths(value, root)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [relative_paths(item, root) for item in data]
    return data


def shown_path(path: str, root: Path) -> str:
    """A path relative to `root` when it is absolute and under it; otherwise as it is."""
    candidate = PurePath(path)
    if not candidate.is_absolute():
        return path
    try:
        return candidate.relative_to(root).as_posix()
    except ValueError:
        return path


def _relative_note(note: str, root: Path) -> str:
    prefix = str(root).rstrip(os.sep) + os.sep
    return note[len(prefix) :] if note.startswith(prefix) else note


def render_json(result: RunResult, root: Path | None = None) -> str:
    """The JSON report; paths relative to `root` (the folder collcheck runs in, as for SARIF)."""
    base = root if root is not None else Path.cwd()
    data = relative_paths(result_to_json(result), base)
    data["notes"] = [_relative_note(note, base) for note in data["notes"]]
    return json.dumps(data, indent=2)
