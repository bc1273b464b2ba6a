"""The textual prefilter's pattern: words that mean a file may communicate. Cheap to import."""

from __future__ import annotations

import re

from collcheck.catalog import Catalog

_PATTERNS: dict[str, re.Pattern[str]] = {}


def trigger_pattern(catalog: Catalog) -> re.Pattern[str]:
    return _trigger_pattern(catalog)


def _trigger_pattern(catalog: Catalog) -> re.Pattern[str]:
    pattern = _PATTERNS.get(catalog.fingerprint)
    if pattern is None:
        words = sorted(catalog.trigger_words, key=len, reverse=True)
        pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b")
        _PATTERNS[catalog.fingerprint] = pattern
    return pattern
