"""Propose, verify and apply fixes.

In: findings and the files they are in. Out: a verified `Fix` per finding that has one
(`compute_fixes`), or each file's fixed text (`fix_files`; nothing is written here).

A fixer (collcheck.adopt.fixers, chosen by the finding's rule and variant) gets a finding and the
parsed source (collcheck.adopt.rewrite.Source) and returns a rewrite of the whole text, or None.
A rewrite becomes a `Fix` only when the rewritten file parses and a re-check of it finds exactly
the findings of the original minus the one it fixes: a rewrite that leaves its finding, adds one,
or changes another line's finding is never offered. Fixes are applied one at a time, each on the
text the previous one produced and verified again, so two fixes never trip over each other's edits.

Findings are compared by code, function and message with line numbers taken out (the SARIF
fingerprint's identity, collcheck.findings.line_free_message), because a fix moves lines. The
re-check analyses the file alone; a finding that only appears with the other files of the run (a
helper in another file) has no fix.
"""

from __future__ import annotations

import ast
import difflib
from collections import Counter
from dataclasses import dataclass, field, replace

from collcheck.adopt.edits import minimal_edit
from collcheck.adopt.fixers import fixers_for
from collcheck.adopt.rewrite import Source
from collcheck.adopt.textio import Document, read_document, write_document
from collcheck.config import Settings
from collcheck.findings import Applicability, Finding, Fix, RunResult, line_free_message
from collcheck.lines import physical_lines
from collcheck.safe_write import WriteRefused, WriteRoots

MAX_FIXES_PER_FILE = 100  # each applied fix removes one finding, so this is only a guard


def _identity(finding: Finding) -> tuple[str, str, str]:
    return finding.code, finding.function, line_free_message(finding)


@dataclass
class FileFixer:
    """Fixes for one file, against a standalone analysis of its current text."""

    path: str
    text: str
    settings: Settings
    findings: list[Finding] = field(init=False)
    _parsed: Source | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.findings = self._analyse(self.text) or []

    def _analyse(self, text: str) -> list[Finding] | None:
        """Findings of `text`, or None when it does not parse or analyse."""
        from collcheck.api import analyze_text

        try:
            ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        result = analyze_text(text, self.path, self.settings)
        return None if result.error is not None else result.findings

    def matching(self, finding: Finding) -> Finding | None:
        """This file's own finding for a finding of the run (same place and identity)."""
        where = (finding.location.line, finding.location.column)
        return next(
            (
                own
                for own in self.findings
                if _identity(own) == _identity(finding) and (own.location.line, own.location.column) == where
            ),
            None,
        )

    def propose(self, finding: Finding) -> tuple[Fix, str] | None:
        """A verified fix for `finding` (one of `self.findings`) and the text it produces."""
        source = self._source()
        for fixer in fixers_for(finding):
            try:
                rewrite = fixer(source, finding)
            except Exception:  # a fix is optional: a fixer failing on odd code offers none
                rewrite = None
            if rewrite is None or not self._verified(rewrite.text, finding):
                continue
            edit = minimal_edit(self.text, rewrite.text)
            if edit is None:
                continue
            return Fix(rewrite.applicability, rewrite.description, (edit,)), rewrite.text
        return None

    def _source(self) -> Source:
        """The parsed text, shared by every proposal until a fix changes the text."""
        if self._parsed is None or self._parsed.text != self.text:
            self._parsed = Source(self.path, self.text)
        return self._parsed

    def _verified(self, text: str, fixed: Finding) -> bool:
        after = self._analyse(text)
        if after is None:
            return False
        expected = Counter(_identity(finding) for finding in self.findings)
        expected[_identity(fixed)] -= 1
        return Counter(_identity(finding) for finding in after) == +expected

    def apply_all(self, allowed: frozenset[Applicability]) -> list[Finding]:
        """Apply every allowed fix, one at a time; returns the findings fixed."""
        fixed: list[Finding] = []
        for _ in range(MAX_FIXES_PER_FILE):
            step = self._first_fix(allowed)
            if step is None:
                break
            finding, text = step
            fixed.append(finding)
            self.text = text
            self.findings = self._analyse(text) or []
        return fixed

    def _first_fix(self, allowed: frozenset[Applicability]) -> tuple[Finding, str] | None:
        for finding in self.findings:
            proposal = self.propose(finding)
            if proposal is not None and proposal[0].applicability in allowed:
                return finding, proposal[1]
        return None


def _standalone(settings: Settings) -> Settings:
    return replace(settings, cache=False, jobs=1)


def compute_fixes(result: RunResult, settings: Settings) -> RunResult:
    """Fill `result.fixes` with a verified fix (safe or unsafe) for every finding that has one."""
    by_path: dict[str, list[Finding]] = {}
    for finding in result.findings:
        by_path.setdefault(finding.location.path, []).append(finding)
    for path, findings in by_path.items():
        document = read_document(path)
        if document is None:
            continue
        fixer = FileFixer(path, document.text, _standalone(settings))
        for finding in findings:
            own = fixer.matching(finding)
            proposal = fixer.propose(own) if own is not None else None
            if proposal is not None:
                result.fixes[finding] = proposal[0]
    result.fixes_computed = True
    return result


@dataclass(frozen=True)
class FileChange:
    document: Document
    after: str
    fixed: tuple[Finding, ...]

    def diff(self) -> str:
        before = physical_lines(self.document.text)
        after = physical_lines(self.after)
        lines = difflib.unified_diff(before, after, f"a/{self.document.path}", f"b/{self.document.path}")
        return "".join(
            line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n"
            for line in lines
        )

    def write(self, roots: WriteRoots) -> WriteRefused | None:
        """Write the fixed text (collcheck.adopt.textio.write_document); None when written."""
        return write_document(self.document, self.after, roots)


def fix_files(paths: list[str], settings: Settings, allowed: frozenset[Applicability]) -> list[FileChange]:
    """The changes the allowed fixes make to each file that has findings (nothing is written)."""
    changes = []
    for path in paths:
        document = read_document(path)
        if document is None:
            continue
        fixer = FileFixer(path, document.text, _standalone(settings))
        fixed = fixer.apply_all(allowed)
        if fixed:
            changes.append(FileChange(document, fixer.text, tuple(fixed)))
    return changes
