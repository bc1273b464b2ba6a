"""What `collcheck check` does after checking when asked to fix, suppress or baseline.

Never prints: it returns the result to report, messages for stderr, and the exit code when the
request decides it (a diff, a written baseline). libcst is imported only on the fix paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from collcheck.config import Settings
from collcheck.findings import Applicability, Finding, RunResult
from collcheck.safe_write import WriteRoots

Checker = Callable[[], RunResult]  # runs the same check again (after files were rewritten)


class AdoptionError(ValueError):
    """A request that cannot be carried out (a bad baseline, libcst missing): exit code 2."""


def require_libcst() -> None:
    import importlib.util

    if importlib.util.find_spec("libcst") is None:
        raise AdoptionError("fixes need libcst: pip install 'collcheck[fix]'")


@dataclass(frozen=True)
class Adoption:
    """The fix, suppression and baseline options of one `collcheck check`."""

    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    show_fixes: bool = False
    add_ignore: str | None = None  # the reason; "" for none
    baseline: Path | None = None
    write_baseline: Path | None = None

    @property
    def writes(self) -> bool:
        """Whether carrying it out writes files (which then need `WriteRoots`)."""
        return self.fix or self.add_ignore is not None or self.write_baseline is not None

    @property
    def requested(self) -> bool:
        return self.wants_fixes or self.add_ignore is not None or bool(self.baseline or self.write_baseline)

    @property
    def wants_fixes(self) -> bool:
        return self.fix or self.unsafe_fixes or self.diff or self.show_fixes

    @property
    def allowed(self) -> frozenset[Applicability]:
        if self.unsafe_fixes:
            return frozenset(Applicability)
        return frozenset({Applicability.SAFE})


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
    from collcheck.fix.ignore import add_ignores
    from collcheck.fix.textio import read_document, write_document
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
        from collcheck.baseline import write_baseline

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
        from collcheck.fix.engine import compute_fixes

        compute_fixes(outcome.result, settings)
    if request.baseline is not None:
        from collcheck.baseline import apply_baseline

        apply_baseline(outcome.result, request.baseline)
    return outcome


def _diff(outcome: Outcome, settings: Settings, request: Adoption) -> Outcome:
    from collcheck.fix.engine import fix_files

    changes = fix_files(_paths_with_findings(outcome.result), settings, request.allowed)
    outcome.output = "".join(change.diff() for change in changes)
    fixed = sum(len(change.fixed) for change in changes)
    outcome.messages.append(f"collcheck: would fix {_plural(fixed, 'finding')}")
    outcome.exit_code = 1 if changes else 0  # as `ruff check --diff`
    return outcome


def _fix(
    outcome: Outcome, settings: Settings, request: Adoption, check_again: Checker, roots: WriteRoots
) -> None:
    from collcheck.fix.engine import fix_files
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


def baseline_path(option: Path | None, settings: Settings) -> Path | None:
    """`--baseline` wins over `baseline = ...` in the configuration."""
    if option is not None:
        return option
    return Path(settings.baseline) if settings.baseline else None


__all__: Sequence[str] = ("Adoption", "AdoptionError", "Outcome", "adopt", "baseline_path")
