"""Snapshots of what the collective rules (CC001-CC007, CC009) print: the full text of every message
template, and every fixture finding's rendered message and counterexample.

The snapshot files are written by the code itself, never by hand:

    COLLCHECK_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/test_message_snapshots.py

then review the diff of tests/snapshots/ like any other change of output.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_support import fixture_run

from collcheck.api import check_paths
from collcheck.checks import all_rules
from collcheck.config import load_settings
from collcheck.findings import Finding

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE = os.environ.get("COLLCHECK_UPDATE_SNAPSHOTS") == "1"
COLLECTIVE_CODES = (*(f"CC00{n}" for n in range(1, 8)), "CC009")


def _units() -> list[Path]:
    """Fixture units of the collective rules: single files, and `__fixture__` folders."""
    marked = sorted(marker.parent for marker in FIXTURES.rglob("__fixture__"))
    files = [
        path
        for path in sorted(FIXTURES.rglob("*.py"))
        if "memory" not in path.parts and not any(folder in path.parents for folder in marked)
    ]
    return files + [folder for folder in marked if "memory" not in folder.parts]


def _templates() -> dict[str, dict[str, str]]:
    """Every `MESSAGE*` constant of the collective rules."""
    found: dict[str, dict[str, str]] = {}
    for rule in all_rules():
        if rule.code in COLLECTIVE_CODES:
            found[rule.code] = {
                name: value
                for name, value in sorted(vars(rule.module).items())
                if name.startswith("MESSAGE") and isinstance(value, str)
            }
    return found


def _short(path: str) -> str:
    return Path(path).relative_to(ROOT).as_posix() if Path(path).is_absolute() else path


def _finding(finding: Finding) -> dict[str, Any]:
    example = finding.counterexample.to_json() if finding.counterexample is not None else None
    for steps in (example or {}).get("ranks", {}).values():
        for step in steps:
            step["path"] = _short(step["path"])
    for reason in (example or {}).get("why", []):
        reason["path"] = _short(reason["path"])
    return {
        "code": finding.code,
        "path": _short(finding.location.path),
        "line": finding.location.line,
        "column": finding.location.column,
        "message": finding.message,
        "counterexample": example,
    }


def _run(unit: Path, project_context: bool = False) -> list[Finding]:
    """A unit's findings. Without the project context by default (the run test_fixtures.py
    reads too, made once): the fixtures lie inside this repository, whose ~700 other files were
    otherwise indexed again for each of the ~450 units (most of this module's time);
    `test_the_repository_around_a_fixture_changes_no_message` checks that the context changes
    nothing where it could: the multi-file fixtures."""
    if not project_context:
        return fixture_run(unit).findings
    settings = load_settings([unit]).with_overrides(jobs=1, cache=False, project_context=True)
    return check_paths([unit], settings).findings


def _compare(name: str, actual: Any) -> None:
    path = SNAPSHOTS / name
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return
    assert path.exists(), f"no snapshot {path}: run with COLLCHECK_UPDATE_SNAPSHOTS=1"
    assert actual == json.loads(path.read_text(encoding="utf-8"))


def test_message_templates_are_pinned() -> None:
    _compare("message_templates.json", _templates())


@pytest.fixture(scope="module")
def fixture_findings() -> dict[str, list[Finding]]:
    return {unit.relative_to(FIXTURES).as_posix(): _run(unit) for unit in _units()}


def test_fixture_messages_and_counterexamples_are_pinned(fixture_findings: dict[str, list[Finding]]) -> None:
    rendered = {name: [_finding(f) for f in findings] for name, findings in fixture_findings.items()}
    assert sum(len(findings) for findings in rendered.values()) >= 30
    _compare("fixture_findings.json", rendered)


# Templates no fixture reaches yet (each entry is a gap in the fixtures, not a feature).
UNREACHED: frozenset[tuple[str, str]] = frozenset()


def test_every_template_is_shown_by_some_fixture(fixture_findings: dict[str, list[Finding]]) -> None:
    used = {(f.code, f.message_template) for findings in fixture_findings.values() for f in findings}
    missing = {
        (code, name)
        for code, templates in _templates().items()
        for name, template in templates.items()
        if (code, template) not in used
    }
    assert missing == UNREACHED


def test_the_repository_around_a_fixture_changes_no_message(
    fixture_findings: dict[str, list[Finding]],
) -> None:
    folders = [unit for unit in _units() if unit.is_dir()]
    assert folders
    for folder in folders:
        name = folder.relative_to(FIXTURES).as_posix()
        in_context = [_finding(f) for f in _run(folder, project_context=True)]
        assert in_context == [_finding(f) for f in fixture_findings[name]], name
