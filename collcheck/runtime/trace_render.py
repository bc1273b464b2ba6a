"""Rendering an Analysis (analyze.py): the text report of `collcheck trace`, its JSON form and a
per-kind count of the findings for one-line summaries. In: an Analysis. Out: text, dicts.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from collcheck.runtime.groups import CREATE_SUFFIX
from collcheck.runtime.p2p import base_group
from collcheck.runtime.trace_model import (
    Analysis,
    Side,
)

# ---------------------------------------------------------------------------------------------
# Rendering


def render_text(analysis: Analysis) -> str:
    if analysis.stopped:
        return render_first(analysis)
    lines = [
        f"collcheck trace: {_plural(len(analysis.ranks), 'rank')}, {_plural(len(analysis.groups), 'group')}"
    ]
    for group, members, count in analysis.groups:
        parent, creation, _ = group.partition(CREATE_SUFFIX)
        listed = _ranks_text(members)
        if creation:
            lines.append(f"groups created from group {parent} (ranks {listed}): {_plural(count, 'group')}")
        else:
            lines.append(f"group {group} (ranks {listed}): {_plural(count, 'collective')}")
        for divergence in (d for d in analysis.divergences if d.group == group):
            label = "first divergence" if divergence.kind == "mismatch" else "warning: call sites differ"
            lines.append(f"  {label}: {divergence.text}")
            for side, ranks in zip(divergence.sides, divergence.ranks, strict=False):
                lines.append(f"    {_plural_label(ranks)}: {side.describe} at {side.stack_text}")
        for swap in (s for s in analysis.swaps if s.group == group):
            lines.append(f"  {swap.text}")
        for item in (m for m in analysis.missing if m.group == group):
            lines.append(f"  never issued: {item.text}")
        for finding in (f for f in analysis.p2p if f.group == group):
            label = "first mismatch" if finding.kind == "mismatch" else "never matched"
            lines.append(f"  {label}: {finding.text}")
            for side in finding.sides:
                lines.append(f"    rank {side.rank}: {side.describe} at {side.stack_text}")
    lines.append("per rank:")
    for summary in analysis.summaries:
        lines.append(f"  rank {summary.rank}: {summary.text}")
    if analysis.problems or analysis.absent:
        lines.append("could not read:")
        lines.extend(f"  {problem.where}: {problem.text}" for problem in analysis.problems)
        lines.extend(_absent_lines(analysis))
        shown = sum(1 for problem in analysis.problems if problem.line or problem.skipped)
        skipped = analysis.unreadable - analysis.absent_count
        if skipped > shown:
            lines.append(f"  ({_plural(skipped, 'line')} or entries skipped in all)")
    if analysis.reports:
        lines.append("reported at run time:")
        for report in analysis.reports:
            body = report.text.replace("\n", "\n    ")
            lines.append(f"  rank {report.rank} {report.severity} ({report.kind}): {body}")
    verdict = "ranks diverged" if analysis.diverged else undiverged_verdict(analysis)
    if not analysis.diverged and analysis.warnings:
        verdict += " (with call-site warnings)"
    lines.append(f"result: {verdict}")
    return "\n".join(lines)


def render_first(analysis: Analysis) -> str:
    """What `trace --first` prints: the first divergence found, and nothing that needed the rest
    of the traces (counts, per-rank summaries)."""
    lines = [f"collcheck trace: {_plural(len(analysis.ranks), 'rank')}, stopped at the first divergence"]
    for divergence in analysis.divergences:
        label = "first divergence" if divergence.kind == "mismatch" else "warning: call sites differ"
        lines.append(f"group {divergence.group}: {label}: {divergence.text}")
        for side, ranks in zip(divergence.sides, divergence.ranks, strict=False):
            lines.append(f"  {_plural_label(ranks)}: {side.describe} at {side.stack_text}")
    if analysis.problems or analysis.absent:
        lines.append("could not read:")
        lines.extend(f"  {problem.where}: {problem.text}" for problem in analysis.problems)
        lines.extend(_absent_lines(analysis))
    return "\n".join(lines)


def _absent_lines(analysis: Analysis) -> list[str]:
    """The ranks that left no file, though a header's world size or a member list names them."""
    if not analysis.absent:
        return []
    them = "it" if analysis.absent_count == 1 else "them"
    return [
        f"  {_absent_text(analysis)}: no trace or dump in the folder, though a trace's header or a "
        f"member list names {them}; not analysed"
    ]


def _absent_text(analysis: Analysis) -> str:
    """`rank 3`, `ranks 2,5-7`."""
    return f"{'rank' if analysis.absent_count == 1 else 'ranks'} {_runs_text(analysis.absent)}"


def _runs_text(runs: tuple[tuple[int, int], ...]) -> str:
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)


def undiverged_verdict(analysis: Analysis) -> str:
    """ "consistent" only when everything was read."""
    if not analysis.incomplete:
        return "consistent"
    gaps = []
    if analysis.lost:
        gaps.append(f"{analysis.lost} events lost")
    dumps = sum(1 for problem in analysis.problems if problem.skipped)  # whole files, not lines
    lines = analysis.unreadable - dumps - analysis.absent_count
    if lines > 0:
        gaps.append(f"{_plural(lines, 'unreadable line')} skipped")
    if dumps:
        gaps.append(_plural(dumps, "unreadable dump"))
    if analysis.absent:
        missing = _plural(analysis.absent_count, "rank")
        gaps.append(f"{missing} without a trace or dump ({_absent_text(analysis)})")
    files = sum(
        1
        for problem in analysis.problems
        if not problem.line and not problem.skipped and "events lost" not in problem.text
    )
    if files:
        gaps.append(f"{_plural(files, 'file problem')}")
    return f"incomplete: {', '.join(gaps)}; no divergence in what could be read"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _ranks_text(ranks: tuple[int, ...]) -> str:
    return ",".join(map(str, ranks))


def to_json(analysis: Analysis) -> dict[str, Any]:
    def side(s: Side) -> dict[str, Any]:
        return {
            "rank": s.rank,
            "collective": s.describe,
            "site": s.site,
            "stack": list(s.stack),
            "completed": s.completed,
        }

    return {
        "ranks": list(analysis.ranks),
        **({"stopped_at_first": True} if analysis.stopped else {}),
        "diverged": analysis.diverged,
        "groups": [{"name": g, "ranks": list(m), "collectives": c} for g, m, c in analysis.groups],
        "divergences": [
            {
                "group": d.group,
                "seq": d.seq,
                "kind": d.kind,
                "text": d.text,
                "sides": [side(s) for s in d.sides],
                "ranks": [list(r) for r in d.ranks],
            }
            for d in analysis.divergences
        ],
        "missing": [
            {
                "group": m.group,
                "seq": m.seq,
                "ranks": list(m.ranks),
                "issued_by": side(m.issued_by),
                "text": m.text,
            }
            for m in analysis.missing
        ],
        "p2p": [
            {
                "group": base_group(f.group),
                "kind": f.kind,
                "where": f.where,
                "text": f.text,
                "sides": [side(s) for s in f.sides],
                "absent": f.absent,
            }
            for f in analysis.p2p
        ],
        "swaps": [
            {"group": s.group, "text": s.text, "seqs": [u.seq for u in s.uses[::2]]} for s in analysis.swaps
        ],
        "summaries": [
            {
                "rank": s.rank,
                "source": s.source,
                "collectives": s.collectives,
                "last": side(s.last) if s.last else None,
                "exited": s.exited,
                "text": s.text,
            }
            for s in analysis.summaries
        ],
        "reports": [
            {"rank": r.rank, "kind": r.kind, "severity": r.severity, "text": r.text} for r in analysis.reports
        ],
        "problems": [{"path": p.path, "line": p.line, "text": p.text} for p in analysis.problems],
        "unreadable": analysis.unreadable,
        # (first, last) runs of ranks that left no file: only where some did, as before otherwise
        **({"absent": [list(run) for run in analysis.absent]} if analysis.absent else {}),
        "lost": analysis.lost,
        "incomplete": analysis.incomplete,
    }


def kinds(analysis: Analysis) -> Counter[str]:
    """How many findings of each kind (for one-line summaries)."""
    p2p = [f"p2p {finding.kind}" for finding in analysis.p2p]
    found = [d.kind for d in analysis.divergences] + ["missing"] * len(analysis.missing)
    return Counter(found + ["swap"] * len(analysis.swaps) + p2p)


def _plural_label(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranks_text(ranks)}"
