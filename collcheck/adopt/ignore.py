"""`--add-ignore`: write `# collcheck: ignore[CCxxx]` where `collcheck.suppress` will read it.

A suppression is read on the finding's own line, or on the `def`/`class` line of a function or
class that contains it (never on a decorator line). The comment goes at the end of the finding's
line unless that line cannot take one — it ends inside a multi-line string or with a backslash
continuation — in which case it goes on the `def` line of the innermost enclosing function or
class. An existing `collcheck: ignore[...]` comment on the line gets the new codes merged in;
any other comment is kept and the suppression follows it.
"""

from __future__ import annotations

import ast
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

from collcheck.findings import Finding
from collcheck.lines import physical_lines

_CODES = re.compile(r"(#\s*collcheck:\s*ignore\[)([A-Za-z0-9_,\s]*)(\])", re.IGNORECASE)


@dataclass(frozen=True)
class LineFacts:
    """Which lines can take a trailing comment, and where each line's comment starts."""

    blocked: frozenset[int]  # ends inside a string, or with a backslash
    comments: dict[int, int]  # line -> column of its comment
    def_lines: tuple[tuple[int, int, int], ...]  # (first line, last line, def line), outermost first


def _line_facts(text: str, tree: ast.Module) -> LineFacts | None:
    try:
        # Fed line by line as the tokenizer splits them: io.StringIO's readline splits at "\n"
        # only, so a file of "\r" endings would be one line and every comment on line 1.
        tokens = list(tokenize.generate_tokens(iter(physical_lines(text)).__next__))
    except (tokenize.TokenError, SyntaxError):
        return None
    blocked: set[int] = set()
    comments: dict[int, int] = {}
    for token in tokens:
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
        elif token.start[0] != token.end[0]:  # a string (or f-string part) spanning lines
            blocked.update(range(token.start[0], token.end[0]))
    for number, line in enumerate(physical_lines(text), start=1):
        if line.rstrip().endswith("\\") and number not in comments:
            blocked.add(number)
    spans = [
        (_first_line(node), node.end_lineno or node.lineno, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    return LineFacts(frozenset(blocked), comments, tuple(sorted(spans)))


def _first_line(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    return min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])


def _target_line(line: int, facts: LineFacts) -> int | None:
    """The line that will carry the suppression for a finding on `line`, or None."""
    if line not in facts.blocked:
        return line
    enclosing = [span for span in facts.def_lines if span[0] <= line <= span[1]]
    for _, _, def_line in reversed(enclosing):  # innermost first
        if def_line not in facts.blocked:
            return def_line
    return None


def _comment(codes: Iterable[str], reason: str) -> str:
    text = f"# collcheck: ignore[{','.join(sorted(set(codes)))}]"
    reason = " ".join(reason.split())  # one line, whatever was passed
    return f"{text} {reason}" if reason else text


def _merged(existing: str, codes: set[str]) -> str | None:
    """`existing` (a comment) with `codes` merged into its `collcheck: ignore[...]`, if it has one."""
    match = _CODES.search(existing)
    if match is None:
        return None
    have = [code.strip().upper() for code in match.group(2).split(",") if code.strip()]
    merged = ",".join(sorted(set(have) | codes))
    return existing[: match.start(2)] + merged + existing[match.end(2) :]


def _edit_line(line: str, comment_column: int | None, codes: set[str], reason: str) -> str:
    """One physical line (without its line ending) with the suppression added."""
    if comment_column is not None:
        merged = _merged(line[comment_column:], codes)
        if merged is not None:
            return line[:comment_column] + merged
        return line.rstrip(" \t") + "  " + _comment(codes, reason)
    body = line.rstrip(" \t")
    return body + ("  " if body.strip() else "") + _comment(codes, reason)


def _split_ending(line: str) -> tuple[str, str]:
    for ending in ("\r\n", "\n", "\r"):
        if line.endswith(ending):
            return line[: -len(ending)], ending
    return line, ""


@dataclass(frozen=True)
class IgnoreResult:
    text: str
    added: int  # findings newly covered
    unplaced: tuple[Finding, ...]  # findings no comment could be placed for


def add_ignores(text: str, findings: list[Finding], reason: str = "") -> IgnoreResult:
    """`text` with a suppression for every finding (all in one file), placed where it is read."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return IgnoreResult(text, 0, tuple(findings))
    facts = _line_facts(text, tree)
    if facts is None:
        return IgnoreResult(text, 0, tuple(findings))
    wanted: dict[int, set[str]] = {}
    unplaced: list[Finding] = []
    for finding in findings:
        target = _target_line(finding.location.line, facts)
        if target is None:
            unplaced.append(finding)
            continue
        wanted.setdefault(target, set()).add(finding.code)
    lines = physical_lines(text)
    for number, codes in wanted.items():
        if not 0 < number <= len(lines):
            continue
        content, ending = _split_ending(lines[number - 1])
        lines[number - 1] = _edit_line(content, facts.comments.get(number), codes, reason) + ending
    return IgnoreResult("".join(lines), len(findings) - len(unplaced), tuple(unplaced))
