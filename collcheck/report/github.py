"""GitHub Actions workflow commands: one `::error`/`::warning`/`::notice` annotation per finding.

    ::error file=src/train.py,line=12,col=5,endLine=12,endColumn=17,title=CC001 name::message

Escaping follows `@actions/core` (`toolkit/packages/core/src/command.ts`): data escapes `%`, `\\r`
and `\\n`; property values also escape `:` and `,`.
"""

from __future__ import annotations

from pathlib import Path

from collcheck.checks import rule_by_code
from collcheck.findings import BudgetCut, FileError, Finding, Fix, RunResult, Severity, UnusedSuppression
from collcheck.report.text import describe_counterexample, fix_note

COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, properties: dict[str, str | int]) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    return f"::{command} {props}::{escape_data(message)}" if props else f"::{command}::{escape_data(message)}"


def _path(path: str) -> str:
    return Path(path).as_posix()


def _title(finding: Finding) -> str:
    rule = rule_by_code(finding.code)
    return f"{finding.code} {rule.name}" if rule is not None else finding.code


def _finding_command(finding: Finding, fix: Fix | None) -> str:
    loc = finding.location
    properties: dict[str, str | int] = {"file": _path(loc.path), "line": loc.line, "col": loc.column + 1}
    properties["endLine"] = loc.end_line if loc.end_line is not None else loc.line
    if loc.end_column is not None:
        properties["endColumn"] = loc.end_column + 1
    properties["title"] = _title(finding)
    message = finding.message + fix_note(fix)
    if finding.counterexample is not None:
        lines = [line.strip() for line in describe_counterexample(finding.counterexample)]
        message = "\n".join([message, *lines])
    return workflow_command(COMMANDS[finding.severity], message, properties)


def _error_command(error: FileError) -> str:
    properties: dict[str, str | int] = {"file": _path(error.path)}
    if error.line:
        properties["line"] = error.line
    properties["title"] = "collcheck: file not analysed"
    return workflow_command("error", error.message, properties)


def _unused_command(unused: UnusedSuppression) -> str:
    codes = ",".join(unused.codes) or "all codes"
    properties: dict[str, str | int] = {
        "file": _path(unused.location.path),
        "line": unused.location.line,
        "title": "collcheck: unused suppression",
    }
    return workflow_command("notice", f"'collcheck: ignore' ({codes}) suppresses nothing here", properties)


def _cut_command(cut: BudgetCut) -> str:
    properties: dict[str, str | int] = {
        "file": _path(cut.path),
        "line": cut.line,
        "title": "collcheck: cut short by a work budget",
    }
    return workflow_command("notice", cut.message(), properties)


def render_github(result: RunResult) -> str:
    lines = [_finding_command(finding, result.fixes.get(finding)) for finding in result.findings]
    lines.extend(_error_command(error) for error in result.errors)
    lines.extend(_unused_command(unused) for unused in result.unused_suppressions)
    lines.extend(_cut_command(cut) for cut in result.budget_cuts)
    return "\n".join(lines)
