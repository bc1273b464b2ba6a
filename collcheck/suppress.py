"""Inline suppressions, parsed in one place and applied when reporting.

    dist.barrier()  # collcheck: ignore[CC001]
    def f():  # collcheck: ignore[CC001,CC003]   (the whole function)
    x = 1  # collcheck: ignore                   (every code on that line)

Suppressions that no longer suppress anything are reported (like ruff's RUF100).
"""

from __future__ import annotations

import re
import tokenize
from dataclasses import dataclass, field

from collcheck.findings import Finding, Location, UnusedSuppression
from collcheck.lines import physical_lines

_PATTERN = re.compile(r"#\s*collcheck:\s*ignore(?:\[(?P<codes>[A-Za-z0-9_,\s]*)\])?", re.IGNORECASE)


@dataclass
class Suppression:
    line: int
    codes: tuple[str, ...]  # empty: all codes
    span: tuple[int, int]  # lines covered (a def line covers the whole function)
    used: set[str] = field(default_factory=set)

    def matches(self, code: str, line: int) -> bool:
        return self.span[0] <= line <= self.span[1] and (not self.codes or code in self.codes)


def parse_suppressions(source: str) -> dict[int, tuple[str, ...]]:
    """Line -> suppressed codes, read from comments only (never from strings)."""
    found: dict[int, tuple[str, ...]] = {}
    if "collcheck" not in source.lower():
        return found
    try:
        # Line by line as the tokenizer splits them (io.StringIO splits at "\n" only).
        tokens = list(tokenize.generate_tokens(iter(physical_lines(source)).__next__))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return found
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        match = _PATTERN.search(token.string)
        if match is None:
            continue
        codes = match.group("codes") or ""
        found[token.start[0]] = tuple(code.strip().upper() for code in codes.split(",") if code.strip())
    return found


def build_suppressions(comments: dict[int, tuple[str, ...]], def_spans: dict[int, int]) -> list[Suppression]:
    """`def_spans` maps a `def` line to the function's last line, so a def-line comment covers it all."""
    return [
        Suppression(line=line, codes=codes, span=(line, def_spans.get(line, line)))
        for line, codes in sorted(comments.items())
    ]


def apply_suppressions(
    findings: list[Finding], suppressions: list[Suppression], path: str
) -> tuple[list[Finding], list[UnusedSuppression]]:
    kept: list[Finding] = []
    for finding in findings:
        lines = [finding.location.line]
        if finding.cause is not None and finding.cause.path == finding.location.path:
            lines.append(finding.cause.line)  # a suppression on the guard covers what it guards
        hit = next((s for s in suppressions for line in lines if s.matches(finding.code, line)), None)
        if hit is None:
            kept.append(finding)
        else:
            hit.used.add(finding.code)
    unused = [
        UnusedSuppression(
            location=Location(path, item.line), codes=tuple(sorted(set(item.codes) - item.used))
        )
        for item in suppressions
        if (item.codes and set(item.codes) - item.used) or (not item.codes and not item.used)
    ]
    return kept, unused
