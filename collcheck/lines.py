"""Lines as Python's tokenizer splits them: at "\\r\\n", "\\r" and "\\n", nowhere else.

In: a source text. Out: its lines, their start offsets, or the text with every line break made
"\\n". `str.splitlines` also splits at \\v, \\f, \\x1c-\\x1e, \\x85, U+2028 and U+2029, which may
stand inside a string or a comment: its line numbers then drift from those of `ast` and
`tokenize`, and a finding is suppressed, looked up or shown on the wrong line. Every line count
in collcheck goes through here.
"""

from __future__ import annotations

import re

LINE_BREAK = re.compile(r"\r\n|\r|\n")


def physical_lines(text: str) -> list[str]:
    """The lines of `text`, each with its own line ending (the last one may have none)."""
    lines = LINE_BREAK.split(text)
    breaks = LINE_BREAK.findall(text)
    ended = [line + end for line, end in zip(lines, breaks, strict=False)]
    return [*ended, lines[-1]] if lines[-1] else ended


def line_texts(text: str) -> list[str]:
    """The lines of `text` without their line endings (`str.splitlines`, tokenizer style)."""
    lines = LINE_BREAK.split(text)
    return lines[:-1] if not lines[-1] else lines


def line_starts(text: str) -> list[int]:
    """The offset where each line starts: 0, then the offset after every line break."""
    return [0, *(match.end() for match in LINE_BREAK.finditer(text))]


def with_newlines(text: str) -> str:
    """`text` with "\\r\\n" and "\\r" made "\\n", as the compiler reads a source file; line and
    column numbers are unchanged, so analysis code may look for "\\n" alone."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
