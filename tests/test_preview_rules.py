"""CC008 (decisions on this rank's own data) is on by default; `ignore` turns it off, and then a
finding of its kind is reported by no other rule either (not as CC007, nor CC003)."""

from __future__ import annotations

from pathlib import Path

from collcheck.api import check_paths
from collcheck.config import load_settings

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "CC008" / "local_count_bug.py"


def _codes(tmp_path: Path, table: str) -> list[str]:
    (tmp_path / "pyproject.toml").write_text(f"[tool.collcheck]\ncache = false\n{table}")
    target = tmp_path / "train.py"
    target.write_text(FIXTURE.read_text())
    result = check_paths([target], load_settings([target]))
    return sorted(f.code for f in result.findings)


def test_own_data_decisions_are_reported_by_default(tmp_path: Path) -> None:
    assert _codes(tmp_path, "") == ["CC008", "CC008"]


def test_ignore_switches_cc008_off_and_no_other_rule_reports_them(tmp_path: Path) -> None:
    assert _codes(tmp_path, 'ignore = ["CC008"]\n') == []
