"""What `collcheck check` does after checking when asked to fix, suppress or baseline.

In: the check's `RunResult`, the `Adoption` request (collcheck.adopt.request) and where files
may be written. Out: an `Outcome`. Never prints: it returns the result to report, messages for
stderr, and the exit code when the request decides it (a diff, a written baseline). libcst is
imported only on the fix paths; a plain check never imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from collcheck.adopt.request import Adoption, require_libcst
from collcheck.config import Settings
from collcheck.findings import Finding, RunResult
from collcheck.safe_write import WriteRoots

Checker = Callable[[], RunResult]  # runs the same check again (after files were rewritten)


@dataclass
class Outcome:
    result: RunResult
    messages: list[str] = field(default_factory=list)  # for stderr
    output: str | None = None  # printed instead of the report (a diff)
    exit_code: int | None = None  # decided here instead of by the findings


def _paths_with_findings(result: RunResult) -> list[str]:
    return list(dict.fromkeys(finding.location.path for finding in result.findings))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def add_ignore_comments(result: RunResult, reason: str, roots: WriteRoots) -> list[str]:
    """Write a suppression for every finding of `result`; returns messages."""
    from collcheck.adopt.ignore import add_ignores
    from collcheck.adopt.textio import read_document, write_document
    from collcheck.safe_write import ChangedOnDisk

    by_path: dict[str, list[Finding]] = {}
    for finding in result.findings:
        by_path.setdefault(finding.location.path, []).append(finding)
    added, files, messages, skipped = 0, 0, [], 0
    for path, findings in by_path.items():
        document = read_document(path)
        outcome = add_ignores(document.text, findings, reason) if document is not None else None
        if document is None or outcome is None:
            messages.append(f"collcheck: {path}: could not add suppressions")
            continue
        refused = write_document(document, outcome.text, roots) if outcome.text != document.text else None
        if refused is not None:
            skipped += isinstance(refused, ChangedOnDisk)
            messages.append(f"collcheck: could not add suppressions: {refused}")
            continue
        added += outcome.added
        files += outcome.added > 0
        for finding in outcome.unplaced:
            where = f"{path}:{finding.location.line}"
            messages.append(f"collcheck: {where}: no line can carry a suppression for {finding.code}")
    summary = f"collcheck: added suppressions for {_plural(added, 'finding')} in {_plural(files, 'file')}"
    if skipped:
        summary += f"; {_plural(skipped, 'file')} skipped: changed on disk since read"
    messages.insert(0, summary)
    return messages


def adopt(
    result: RunResult, settings: Settings, request: Adoption, check_again: Checker, roots: WriteRoots
) -> Outcome:
    """Carry out `request` on `result` (the check's result); see the module docstring. Files are
    written only as `roots` allow (collcheck.safe_write)."""
    if request.write_baseline is not None:
        from collcheck.adopt.baseline import write_baseline

        count = write_baseline(result, request.write_baseline, roots)
        message = f"collcheck: wrote {_plural(count, 'finding')} to baseline {request.write_baseline}"
        return Outcome(result, [message], exit_code=0)
    outcome = Outcome(result)
    if request.add_ignore is not None:
        outcome.messages.extend(add_ignore_comments(result, request.add_ignore, roots))
        outcome.result = check_again()
    if request.wants_fixes:
        require_libcst()
    if request.diff:
        return _diff(outcome, settings, request)
    if request.fix:
        _fix(outcome, settings, request, check_again, roots)
    if request.wants_fixes:
        from collcheck.adopt.fixes import compute_fixes

        compute_fixes(outcome.result, settings)
    if request.baseline is not None:
        from collcheck.adopt.baseline import apply_baseline

        apply_baseline(outcome.result, request.baseline)
    return outcome


def _diff(outcome: Outcome, settings: Settings, request: Adoption) -> Outcome:
    from collcheck.adopt.fixes import fix_files

    changes = fix_files(_paths_with_findings(outcome.result), settings, request.allowed)
    outcome.output = "".join(change.diff() for change in changes)
    fixed = sum(len(change.fixed) for change in changes)
    outcome.messages.append(f"collcheck: would fix {_plural(fixed, 'finding')}")
    outcome.exit_code = 1 if changes else 0  # as `ruff check --diff`
    return outcome


def _fix(
    outcome: Outcome, settings: Settings, request: Adoption, check_again: Checker, roots: WriteRoots
) -> None:
    from collcheck.adopt.fixes import fix_files
    from collcheck.safe_write import ChangedOnDisk

    changes = fix_files(_paths_with_findings(outcome.result), settings, request.allowed)
    written, skipped = [], 0
    for change in changes:
        refused = change.write(roots)
        if refused is None:
            written.append(change)
            continue
        skipped += isinstance(refused, ChangedOnDisk)
        outcome.messages.append(f"collcheck: could not write the fixed file: {refused}")
    fixed = sum(len(change.fixed) for change in written)
    summary = f"collcheck: fixed {_plural(fixed, 'finding')} in {_plural(len(written), 'file')}"
    if skipped:
        summary += f"; {_plural(skipped, 'file')} skipped: changed on disk since read"
    outcome.messages.append(summary)
    if written:
        outcome.result = check_again()


__all__: Sequence[str] = ("Outcome", "adopt")
