"""SARIF 2.1.0, as GitHub code scanning (`github/codeql-action/upload-sarif`) reads it.

Paths become URIs relative to `%SRCROOT%` (the folder collcheck ran in), so the upload resolves
them against the checkout. Each counterexample step is a related location and, per rank, a step
of a thread flow. Files that could not be analysed are tool execution notifications, not results.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from collcheck import __version__
from collcheck.checks import Rule, all_rules
from collcheck.findings import (
    Counterexample,
    FileError,
    Finding,
    Fix,
    Location,
    Reason,
    RunResult,
    Severity,
    TraceStep,
    fingerprints,
    path_uri,
)

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/collcheck/collcheck"
SRCROOT = "%SRCROOT%"
FINGERPRINT_KEY = "collcheck/v1"

LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _artifact(path: str, root: Path) -> dict[str, Any]:
    uri, relative = path_uri(path, root)
    return {"uri": uri, "uriBaseId": SRCROOT} if relative else {"uri": uri}


def _region(location: Location) -> dict[str, Any]:
    region: dict[str, Any] = {
        "startLine": max(location.line, 1),
        "startColumn": location.column + 1,
        "endLine": max(location.end_line or location.line, 1),
    }
    if location.end_column is not None:  # absent: the region runs to the end of its last line
        region["endColumn"] = location.end_column + 1
    return region


def _physical(path: str, root: Path, region: dict[str, Any]) -> dict[str, Any]:
    return {"physicalLocation": {"artifactLocation": _artifact(path, root), "region": region}}


def _rule_descriptor(rule: Rule) -> dict[str, Any]:
    level = LEVELS[rule.severity]
    summary = rule.summary or rule.name
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": summary},
        "fullDescription": {"text": rule.doc.strip() or summary},
        "help": {"text": rule.doc.strip() or summary, "markdown": rule.doc.strip() or summary},
        "defaultConfiguration": {"level": level, "enabled": rule.default_enabled},
        "properties": {"tags": ["collcheck", rule.status], "problem.severity": level, "since": rule.since},
    }


def _unknown_descriptor(code: str) -> dict[str, Any]:
    """A finding whose code is not registered (a rule module not installed) still needs an entry."""
    return {"id": code, "name": code, "shortDescription": {"text": code}}


def rule_descriptors(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    descriptors = [_rule_descriptor(rule) for rule in all_rules()]
    known = {descriptor["id"] for descriptor in descriptors}
    for code in sorted({finding.code for finding in findings} - known):
        descriptors.append(_unknown_descriptor(code))
    return descriptors


def _step_text(rank: int, step: TraceStep) -> str:
    chain = " -> ".join([*step.chain, step.op]) if step.chain else step.op
    text = f"rank {rank}: {chain} at {Path(step.path).name}:{step.line}"
    return f"{text} [{step.detail}]" if step.detail else text


def _steps(example: Counterexample) -> Iterable[tuple[int, TraceStep]]:
    for rank, steps in example.ranks:
        for step in steps:
            yield rank, step


def _reason_text(reason: Reason) -> str:
    """`why: `rank == 0` is true on rank 0 (rank = 0), false on rank 1 (rank = 1)`."""
    parts = []
    for item in reason.ranks:
        reads = ", ".join(f"{name} = {value}" for name, value in item.reads)
        parts.append(f"{reason.word(item.holds)} on rank {item.rank}" + (f" ({reads})" if reads else ""))
    return f"why: `{reason.condition}` is " + ", ".join(parts)


def _related_locations(example: Counterexample, root: Path) -> list[dict[str, Any]]:
    related = []
    for index, (rank, step) in enumerate(_steps(example), start=1):
        entry = _physical(step.path, root, {"startLine": max(step.line, 1)})
        entry["id"] = index
        entry["message"] = {"text": _step_text(rank, step)}
        related.append(entry)
    for reason in example.why:  # the conditions that split the ranks, after the steps
        entry = _physical(reason.path, root, {"startLine": max(reason.line, 1)})
        entry["id"] = len(related) + 1
        entry["message"] = {"text": _reason_text(reason)}
        related.append(entry)
    return related


def _code_flows(example: Counterexample, root: Path) -> list[dict[str, Any]]:
    thread_flows = []
    for rank, steps in example.ranks:
        if not steps:  # SARIF needs at least one location per thread flow
            continue
        locations = []
        for step in steps:
            location = _physical(step.path, root, {"startLine": max(step.line, 1)})
            location["message"] = {"text": _step_text(rank, step)}
            locations.append({"location": location})
        thread_flows.append({"id": f"rank {rank}", "locations": locations})
    if not thread_flows:
        return []
    message = f"counterexample at world_size={example.world_size}"
    return [{"message": {"text": message}, "threadFlows": thread_flows}]


def _message(finding: Finding) -> str:
    example = finding.counterexample
    if example is None:
        return finding.message
    ranks = "; ".join(
        f"rank {rank}: " + (", ".join(step.op for step in steps) or "no collective")
        for rank, steps in example.ranks
    )
    why = "".join(
        f"; {_reason_text(reason)} at {Path(reason.path).name}:{reason.line}" for reason in example.why
    )
    return f"{finding.message} (world_size={example.world_size}; {ranks}{why})"


def _result(finding: Finding, rule_index: int, root: Path, fingerprint: str) -> dict[str, Any]:
    location = finding.location
    primary = _physical(location.path, root, _region(location))
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": LEVELS[finding.severity],
        "message": {"text": _message(finding)},
        "locations": [primary],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint},
    }
    if finding.function:
        primary["logicalLocations"] = [{"name": finding.function, "kind": "function"}]
    if finding.counterexample is not None:
        result["relatedLocations"] = _related_locations(finding.counterexample, root)
        flows = _code_flows(finding.counterexample, root)
        if flows:
            result["codeFlows"] = flows
    return result


def _results(
    result: RunResult, findings: list[Finding], rules: list[dict[str, Any]], root: Path
) -> list[dict[str, Any]]:
    index = {rule["id"]: position for position, rule in enumerate(rules)}
    results = []
    for finding, fingerprint in zip(findings, fingerprints(findings, root), strict=True):
        entry = _result(finding, index[finding.code], root, fingerprint)
        fix = result.fixes.get(finding)
        if fix is not None:
            entry["fixes"] = [_fix(fix, finding.location.path, root)]
        results.append(entry)
    return results


def _fix(fix: Fix, path: str, root: Path) -> dict[str, Any]:
    """A SARIF `fix`: one artifact change whose replacements are the fix's edits."""
    replacements = [
        {
            "deletedRegion": {
                "startLine": edit.line,
                "startColumn": edit.column + 1,
                "endLine": edit.end_line,
                "endColumn": edit.end_column + 1,
            },
            "insertedContent": {"text": edit.content},
        }
        for edit in fix.edits
    ]
    return {
        "description": {"text": f"{fix.description} ({fix.applicability.value} fix)"},
        "artifactChanges": [{"artifactLocation": _artifact(path, root), "replacements": replacements}],
        "properties": {"applicability": fix.applicability.value},
    }


def _error_location(error: FileError, root: Path) -> dict[str, Any]:
    if error.line:
        return _physical(error.path, root, {"startLine": error.line})
    return {"physicalLocation": {"artifactLocation": _artifact(error.path, root)}}


def _notifications(result: RunResult, root: Path) -> list[dict[str, Any]]:
    notes: list[dict[str, Any]] = []
    for error in result.errors:
        notes.append(
            {
                "level": "error",
                "message": {"text": f"{error.path}: could not be analysed: {error.message}"},
                "locations": [_error_location(error, root)],
                "descriptor": {"id": "collcheck/file-error"},
            }
        )
    for unused in result.unused_suppressions:
        codes = ",".join(unused.codes) or "all codes"
        notes.append(
            {
                "level": "note",
                "message": {"text": f"unused suppression 'collcheck: ignore' ({codes}): nothing to suppress"},
                "locations": [_physical(unused.location.path, root, {"startLine": unused.location.line})],
                "descriptor": {"id": "collcheck/unused-suppression"},
            }
        )
    for cut in result.budget_cuts:
        notes.append(
            {
                "level": "note",
                "message": {"text": cut.message()},
                "locations": [_physical(cut.path, root, {"startLine": cut.line})],
                "descriptor": {"id": "collcheck/budget-cut"},
            }
        )
    return notes


def sarif_log(result: RunResult, root: Path | None = None) -> dict[str, Any]:
    root = (root or Path.cwd()).resolve()
    findings = result.findings
    rules = rule_descriptors(findings)
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "collcheck",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": rules,
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri().rstrip("/") + "/"}},
        "invocations": [
            {"executionSuccessful": True, "toolExecutionNotifications": _notifications(result, root)}
        ],
        "columnKind": "unicodeCodePoints",
        "results": _results(result, findings, rules, root),
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render_sarif(result: RunResult, root: Path | None = None) -> str:
    return json.dumps(sarif_log(result, root), indent=2)
