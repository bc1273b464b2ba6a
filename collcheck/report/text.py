"""ruff-style text: `path:line:col: CODE message`, then the counterexample and a code frame."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path

from collcheck.findings import Applicability, Counterexample, Finding, Fix, Reason, RunResult, TraceStep
from collcheck.lines import line_texts
from collcheck.source import MAX_SOURCE_BYTES, FileRefused, read_regular_file


@lru_cache(maxsize=64)
def _lines(path: str) -> tuple[str, ...]:
    """The file's lines as the analysis numbered them (the tokenizer's line breaks only)."""
    try:
        raw = read_regular_file(path, MAX_SOURCE_BYTES)
    except (OSError, FileRefused):
        return ()
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
    return tuple(line_texts(text))


def code_frame(path: str, line: int, column: int, context: int = 1) -> list[str]:
    lines = _lines(path)
    if not 0 < line <= len(lines):
        return []
    first, last = max(1, line - context), min(len(lines), line + context)
    width = len(str(last))
    frame = []
    for number in range(first, last + 1):
        marker = ">" if number == line else " "
        frame.append(f"  {marker} {number:>{width}} | {lines[number - 1]}")
        if number == line:
            frame.append(f"    {' ' * width} | {' ' * column}^")
    return frame


def _step(step: TraceStep) -> str:
    where = f"{Path(step.path).name}:{step.line}"
    text = f"{step.op}@{where}"
    if step.chain:
        text = " -> ".join([*step.chain, text])
    if step.detail:
        text += f" [{step.detail}]"
    return text


def describe_counterexample(example: Counterexample) -> list[str]:
    lines = [f"  counterexample: world_size={example.world_size}"]
    for rank, steps in example.ranks:
        sequence = ", ".join(_step(step) for step in steps) or "(no collective)"
        lines.append(f"    rank {rank}: {sequence}")
    for name, value in example.values:
        lines.append(f"    {name} = {value}")
    if example.group:
        locals_ = ", ".join(f"rank {rank} is local rank {local}" for rank, local in example.local_ranks)
        lines.append(f"    group: `{example.group}`" + (f" ({locals_})" if locals_ else ""))
    for reason in example.why:
        lines.extend(describe_reason(reason))
    return lines


def describe_reason(reason: Reason) -> list[str]:
    """`why: `cond` at file:line`, then the condition's value on each rank and what it read there."""
    lines = [f"    why: `{reason.condition}` at {Path(reason.path).name}:{reason.line}"]
    for item in reason.ranks:
        reads = ", ".join(f"{name} = {value}" for name, value in item.reads)
        lines.append(f"      rank {item.rank}: {reason.word(item.holds)}" + (f" ({reads})" if reads else ""))
    return lines


def fix_note(fix: Fix | None) -> str:
    """What the text formats append to a finding's message when it has a fix."""
    if fix is None:
        return ""
    if fix.applicability is Applicability.SAFE:
        return " [fix: safe, --fix]"
    return " [fix: unsafe, --fix --unsafe-fixes]"


def render_finding(finding: Finding, concise: bool, fix: Fix | None = None) -> list[str]:
    loc = finding.location
    head = f"{loc.path}:{loc.line}:{loc.column + 1}: {finding.code} {finding.message}{fix_note(fix)}"
    if concise:
        return [head]
    lines = [head]
    if finding.counterexample is not None:
        lines.extend(describe_counterexample(finding.counterexample))
    lines.extend(code_frame(loc.path, loc.line, loc.column))
    lines.append("")
    return lines


def render_text(
    result: RunResult, *, concise: bool = False, verbose: bool = False, statistics: bool = False
) -> str:
    out: list[str] = []
    for finding in result.findings:
        out.extend(render_finding(finding, concise, result.fixes.get(finding)))
    for error in result.errors:
        where = f"{error.path}:{error.line}" if error.line else error.path
        out.append(f"{where}: error: {error.message}")
    for unused in result.unused_suppressions:
        codes = ",".join(unused.codes) or "all codes"
        out.append(
            f"{unused.location.path}:{unused.location.line}:1: unused suppression "
            f"'collcheck: ignore' ({codes}): nothing to suppress here"
        )
    for entry in result.stale_baseline:
        out.append(f"{entry.path}: baseline entry no longer found: {entry.code} {entry.message}")
    cuts = result.budget_cuts
    # Shown without -v: a function left partly unchecked is worth knowing about even when it
    # does not fail the run (budget-exceeded = "note", the default).
    out.extend(f"note: {cut.message()}" for cut in cuts)
    if verbose:
        out.extend(f"note: {note}" for note in result.notes)
    if statistics:
        counts = Counter(finding.code for finding in result.findings)
        out.extend(f"{count:>5}\t{code}" for code, count in sorted(counts.items()))
    findings, errors = len(result.findings), len(result.errors)
    checked = len(result.files)
    if findings or errors:
        parts = [f"Found {findings} finding{'s' if findings != 1 else ''}"]
        if errors:
            parts.append(f"{errors} file{'s' if errors != 1 else ''} could not be analysed")
        out.append(f"{' and '.join(parts)} in {checked} file{'s' if checked != 1 else ''}.")
    else:
        out.append(f"All checks passed ({checked} file{'s' if checked != 1 else ''}).")
    functions = len({(cut.path, cut.line, cut.function) for cut in cuts})
    if functions:
        plural = "s" if functions != 1 else ""
        out.append(f"{functions} function{plural} cut short by a work budget (notes above).")
    return "\n".join(out)
