"""Placeholder."""

from __future__ import annotations

from collcheck.findings import Finding
from collcheck.fix.engine import Rewrite, Source


def fix_rank_dependent_root(source: Source, finding: Finding) -> Rewrite | None:
    return None
