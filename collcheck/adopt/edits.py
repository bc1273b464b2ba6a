"""Rewrites as edits: the smallest span that changed, with line/column positions."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from collcheck.findings import Edit
from collcheck.lines import line_starts


def _line_starts(text: str) -> list[int]:
    return line_starts(text)  # the tokenizer's lines: "\r" alone ends one too


def position(text: str, offset: int, starts: list[int] | None = None) -> tuple[int, int]:
    """(1-based line, 0-based column) of a character offset."""
    starts = starts if starts is not None else _line_starts(text)
    index = bisect.bisect_right(starts, offset) - 1
    return index + 1, offset - starts[index]


def offset_of(text: str, line: int, column: int, starts: list[int] | None = None) -> int:
    starts = starts if starts is not None else _line_starts(text)
    return starts[line - 1] + column


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def minimal_edit(before: str, after: str) -> Edit | None:
    """The one edit that turns `before` into `after`: everything outside it is identical."""
    if before == after:
        return None
    limit = min(len(before), len(after))
    prefix = 0
    while prefix < limit and before[prefix] == after[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and before[-1 - suffix] == after[-1 - suffix]:
        suffix += 1
    # Widen to whole words: `set(x)` -> `sorted(set(x))` reads as that, not as `et(x` -> `orted(...`.
    while 0 < prefix < len(before) and _word(before[prefix - 1]) and _word(before[prefix]):
        prefix -= 1
    while 0 < suffix < len(before) - prefix and _word(before[-suffix]) and _word(before[-1 - suffix]):
        suffix -= 1
    starts = _line_starts(before)
    line, column = position(before, prefix, starts)
    end_line, end_column = position(before, len(before) - suffix, starts)
    return Edit(line, column, end_line, end_column, after[prefix : len(after) - suffix])


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits (positions refer to `text`), last first."""
    starts = _line_starts(text)
    spans = sorted(
        (
            (offset_of(text, e.line, e.column, starts), offset_of(text, e.end_line, e.end_column, starts), e)
            for e in edits
        ),
        key=lambda item: item[0],
        reverse=True,
    )
    for start, end, edit in spans:
        text = text[:start] + edit.content + text[end:]
    return text
