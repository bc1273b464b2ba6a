"""Every fixture behaves as its inline markers say: `# expect: CC001` on each flagged line,
nothing else flagged. A fixed twin carries no markers and must be clean."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.config import load_settings

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MARKER = re.compile(r"#\s*expect:\s*(?P<codes>CC\d{3}(?:\s*,\s*CC\d{3})*)")


def _fixture_units() -> list[Path]:
    """Single-file fixtures, and folders holding a multi-file fixture (marked by `__fixture__`)."""
    units: list[Path] = []
    for path in sorted(FIXTURES.rglob("*.py")):
        if any((parent / "__fixture__").exists() for parent in path.parents if FIXTURES in parent.parents):
            continue
        units.append(path)
    units.extend(sorted(marker.parent for marker in FIXTURES.rglob("__fixture__")))
    return units


def expected_findings(unit: Path) -> set[tuple[str, int, str]]:
    files = [unit] if unit.is_file() else sorted(unit.rglob("*.py"))
    expected: set[tuple[str, int, str]] = set()
    for file in files:
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            match = MARKER.search(line)
            if match:
                for code in match.group("codes").split(","):
                    expected.add((file.name, number, code.strip()))
    return expected


UNITS = _fixture_units()

# Known false negatives, documented here until the engine covers them (strict: a fix must remove
# the entry, so this list cannot rot).
KNOWN_GAPS: dict[str, str] = {}


def _param(unit: Path) -> object:
    name = str(unit.relative_to(FIXTURES))
    if name in KNOWN_GAPS:
        return pytest.param(unit, id=name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[name]))
    return pytest.param(unit, id=name)


@pytest.mark.parametrize("unit", [_param(u) for u in UNITS])
def test_fixture(unit: Path) -> None:
    settings = load_settings([unit]).with_overrides(jobs=1, cache=False)
    result = check_paths([unit], settings)
    assert not result.errors, result.errors
    found = {(Path(f.location.path).name, f.location.line, f.code) for f in result.findings}
    assert found == expected_findings(unit)


def test_there_are_enough_fixture_pairs() -> None:
    static = [u for u in UNITS if "memory" not in u.parts]
    bugs = [u for u in static if expected_findings(u)]
    fixed = [u for u in static if not expected_findings(u)]
    assert len(bugs) >= 30 and len(fixed) >= 30


def test_every_rule_has_a_bug_and_a_fixed_fixture() -> None:
    """Each code is expected by some `*_bug` fixture, whose `*_fixed` twin expects nothing."""
    from collcheck.checks import all_rules

    twins: dict[str, set[str]] = {}
    for unit in UNITS:
        if not unit.name.endswith("_bug") and not unit.stem.endswith("_bug"):
            continue
        twin = unit.with_name(unit.name.replace("_bug", "_fixed"))
        if twin.exists() and not expected_findings(twin):
            for _, _, code in expected_findings(unit):
                twins.setdefault(code, set()).add(unit.name)
    assert {rule.code for rule in all_rules()} <= set(twins), sorted(set(twins))


def test_readme_rule_table_is_generated_from_the_rules() -> None:
    from collcheck.checks import markdown_table

    readme = (FIXTURES.parent / "README.md").read_text(encoding="utf-8")
    assert markdown_table() in readme
