"""Placeholder."""

from __future__ import annotations

from collcheck.findings import Finding
from collcheck.fix.engine import Rewrite, Source


def fix_all_gather_object(source: Source, finding: Finding) -> Rewrite | None:
    return None
