"""`collcheck run`'s closing verdict: one paragraph, printed last, and the exit status that says which.

After a failed job the terminal holds torchrun's tracebacks, c10d warnings and the cross-rank
analysis; the verdict comes after all of them, where the eye lands, and names the cause once:

* a mismatch (ranks issued different collectives, a swapped pair, a send and recv that disagree,
  groups created in different orders; a call-site divergence under `--strict`): status 3;
* a rank that died (killed by a signal, crashed, exited with an error) while the others waited:
  status 5, naming its last operation, ahead of the stall it caused on the others;
* a stall (a collective that some rank never issued, reported at run time or found by the
  launcher's backstop): status 4;
* no usable trace (the tracer never started, or its traces cannot be read): status 6;
* an interrupted run: 128 + the signal `collcheck run` received (130 for Ctrl-C, 143 for
  SIGTERM), as a shell reports it; a consistent run of a successful job: 0.

Pure functions over the analysis; no torch.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from collcheck.runtime.liveline import LiveReport
from collcheck.runtime.record import TRACE_PREFIX, TRACE_SUFFIX, CollectiveEvent
from collcheck.runtime.trace_binary import BINARY_SUFFIX
from collcheck.runtime.trace_live import header_line
from collcheck.runtime.trace_model import Analysis
from collcheck.runtime.trace_render import undiverged_verdict


class Status(IntEnum):
    OK = 0
    MISMATCH = 3
    STALL = 4
    RANK_DIED = 5
    TRACER_ERROR = 6
    INTERRUPTED = 130


@dataclass(frozen=True)
class Verdict:
    status: Status
    text: str
    exit_status: int | None = None  # what `collcheck run` exits with, where not `status` (128 + N)

    @property
    def code(self) -> int:
        return int(self.status) if self.exit_status is None else self.exit_status

    @property
    def paragraph(self) -> str:
        return f"collcheck: verdict: {self.text} [exit status {self.code}: {_MEANING[self.status]}]"


_MEANING = {
    Status.OK: "consistent",
    Status.MISMATCH: "mismatch",
    Status.STALL: "stall",
    Status.RANK_DIED: "a rank died",
    Status.TRACER_ERROR: "tracer error",
    Status.INTERRUPTED: "interrupted",
}
_MISMATCH_REPORTS = ("mismatch", "swap", "callsite")


@dataclass(frozen=True)
class JobEnd:
    """How the job ended, as `collcheck run` saw it."""

    returncode: int
    hung: bool = False
    interrupted: bool = False
    exit_status: int = 0  # collcheck run's own status when interrupted: 128 + the signal it got


def decide(
    analysis: Analysis,
    end: JobEnd,
    exit_codes: dict[int, int],
    strict: bool = False,
    live: Sequence[LiveReport] = (),
) -> Verdict:
    """The verdict. `exit_codes`: rank -> its process's exit code where known (negative: signal).
    `live`: the error reports ranks sent to `collcheck run` as they made them (liveline.py), which
    stand where their trace lines were lost (a full disk)."""
    if end.interrupted:
        return Verdict(
            Status.INTERRUPTED,
            f"the run was interrupted ({_received(end.exit_status)}); "
            "the analysis above shows where each rank was",
            end.exit_status or int(Status.INTERRUPTED),
        )
    unseen = _unseen(analysis, live)
    mismatch = _mismatch(analysis, strict)
    if mismatch is None:
        mismatch = next((r.text.splitlines()[0] for r in unseen if r.kind in _MISMATCH_REPORTS), None)
    if mismatch is not None:
        return Verdict(Status.MISMATCH, mismatch)
    if end.hung:  # collcheck run stopped every process itself: their signals say nothing
        return Verdict(Status.STALL, "a collective stayed open past the timeout; the job was stopped")
    if end.returncode == 0 and _only_absent(analysis) and not analysis.diverged:
        # Every process exited cleanly, and ranks the headers name left no trace here: traced on
        # another node into a folder of its own, or not traced; what is here was read in full.
        return Verdict(Status.OK, _absent_verdict(analysis))
    if analysis.incomplete and end.returncode == 0:
        # Every process exited cleanly: a trace without its exit record lost its last lines.
        return Verdict(Status.TRACER_ERROR, undiverged_verdict(analysis))
    died = _died(analysis, exit_codes, frozenset(report.rank for report in live))
    stalls = [r.text for r in analysis.runtime_errors if r.kind == "stall"]
    stalls += [r.text for r in unseen if r.kind == "stall"]
    causes = [death for death in died if death[1] != -signal.SIGTERM]
    if causes or (died and not stalls):  # ahead of the stall reports its peers made while waiting for it
        return Verdict(Status.RANK_DIED, _deaths_text(died))
    if stalls:  # ranks the launcher stopped (SIGTERM) after a stall was reported were not its cause
        return Verdict(Status.STALL, stalls[0].splitlines()[0] + _stopped_clause(died))
    if analysis.missing:
        return Verdict(Status.STALL, analysis.missing[0].text)
    if end.returncode != 0:
        return Verdict(Status.RANK_DIED, f"the job exited with status {end.returncode}; no trace explains it")
    if analysis.diverged:
        return Verdict(Status.MISMATCH, "ranks diverged (see the analysis above)")
    if analysis.incomplete:  # never "consistent" about traces that could not be read in full
        return Verdict(Status.TRACER_ERROR, undiverged_verdict(analysis))
    warnings = f" with {len(analysis.warnings)} call-site warning(s)" if analysis.warnings else ""
    return Verdict(Status.OK, f"{len(analysis.ranks)} ranks traced, consistent{warnings}")


def _only_absent(analysis: Analysis) -> bool:
    """Whether the only gap is ranks that left no file: everything here was read."""
    return bool(analysis.absent) and not (
        analysis.problems or analysis.lost or analysis.unreadable != analysis.absent_count
    )


def _absent_verdict(analysis: Analysis) -> str:
    warnings = f" with {len(analysis.warnings)} call-site warning(s)" if analysis.warnings else ""
    runs = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in analysis.absent)
    whose = f"rank {runs}" if analysis.absent_count == 1 else f"ranks {runs}"
    return (
        f"{len(analysis.ranks)} ranks traced, consistent{warnings}; {whose} of the job left no trace "
        "in this folder (another node's folder, or not traced), so they were not compared"
    )


def no_traces(trace_dir: str, returncode: int, interrupted: bool = False, exit_status: int = 0) -> Verdict:
    if interrupted:
        return Verdict(
            Status.INTERRUPTED,
            f"the run was interrupted ({_received(exit_status)}) "
            f"before any rank wrote a trace to {trace_dir}",
            exit_status or int(Status.INTERRUPTED),
        )
    return Verdict(
        Status.TRACER_ERROR,
        f"no traces in {trace_dir} (did the command initialise torch.distributed?); "
        f"the job exited with status {returncode}",
    )


def _mismatch(analysis: Analysis, strict: bool) -> str | None:
    if analysis.swaps:
        return analysis.swaps[0].text
    if analysis.mismatches:
        return analysis.mismatches[0].text
    p2p = [finding for finding in analysis.p2p if finding.kind == "mismatch"]
    if p2p:
        return p2p[0].text
    reported = [r for r in analysis.runtime_errors if r.kind in _MISMATCH_REPORTS]
    if reported:
        return reported[0].text.splitlines()[0]
    if strict and analysis.warnings:
        return f"call-site divergence (strict): {analysis.warnings[0].text}"
    return None


def _unseen(analysis: Analysis, live: Sequence[LiveReport]) -> list[LiveReport]:
    """Live reports whose trace line is missing (same rank, kind and first line)."""
    seen = {(r.rank, r.kind, r.text.splitlines()[0] if r.text else "") for r in analysis.reports}
    return [r for r in live if (r.rank, r.kind, r.text.splitlines()[0] if r.text else "") not in seen]


def _died(
    analysis: Analysis, exit_codes: dict[int, int], live_reporters: frozenset[int] = frozenset()
) -> list[tuple[int, int | None, str]]:
    """(rank, exit code or None, `rank 1 died at #103 (signal 9 SIGKILL): last all_reduce(...) at
    x.py:12 (group 0, #103), completed`) for every rank that ended without collcheck stopping it:
    killed by a signal, exited with an error status, or (status unknown) whose trace stops without
    an exit record or any report of its own."""
    reporters = {report.rank for report in analysis.reports if report.severity == "error"} | live_reporters
    found = []
    for summary in analysis.summaries:
        code = exit_codes.get(summary.rank)
        if code is not None and code not in (0, ABORTED):
            how = f"signal {-code} {_signal_name(-code)}".rstrip() if code < 0 else f"exit status {code}"
        elif code is None and summary.exited is False and summary.rank not in reporters:
            how = "killed or crashed; exit status unknown"
        else:
            continue
        last = analysis.timeline.last.get(summary.rank)
        if last is None:
            found.append(
                (summary.rank, code, f"rank {summary.rank} died before its first collective ({how})")
            )
            continue
        # Record mode writes a completion with the next line or tick: a rank killed just after a
        # collective completed may not have written it.
        state = "completed" if last.t_end is not None else "no completion recorded"
        text = (
            f"rank {summary.rank} died at #{last.seq} ({how}): last {last.describe} at {last.site.short} "
            f"({_where(last)}), {state}"
        )
        found.append((summary.rank, code, text))
    return found


def _deaths_text(died: list[tuple[int, int | None, str]]) -> str:
    """The deaths that caused the others first: a launcher (torchrun) stops the remaining workers
    with SIGTERM once one failed, so those are mentioned after the cause, in one clause."""
    causes = [text for _, code, text in died if code != -signal.SIGTERM]
    if not causes:
        return "; ".join(text for _, _, text in died)
    return "; ".join(causes) + _stopped_clause(died)


def _stopped_clause(died: list[tuple[int, int | None, str]]) -> str:
    """`; then the launcher stopped rank 1 (SIGTERM)`, or "" when it stopped none."""
    stopped = [rank for rank, code, _ in died if code == -signal.SIGTERM]
    if not stopped:
        return ""
    who = ("ranks " if len(stopped) > 1 else "rank ") + ", ".join(map(str, stopped))
    return f"; then the launcher stopped {who} (SIGTERM)"


ABORTED = 86  # verify.ABORT_EXIT_CODE: collcheck itself stopped the rank, after a report


def _where(event: CollectiveEvent) -> str:
    from collcheck.runtime.groups import numbered

    return numbered(event.group, event.seq)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return ""


def _received(exit_status: int) -> str:
    """`SIGTERM received` for collcheck run's status 143."""
    if exit_status <= 128:
        return "interrupt received"
    return f"{_signal_name(exit_status - 128) or f'signal {exit_status - 128}'} received"


def rank_exit_codes(trace_dir: str, by_pid: dict[int, int], single: int | None) -> dict[int, int]:
    """rank -> exit code: failed workers' codes by pid (exits.py) mapped through the trace headers;
    `single`, the command's own status, for a job of one traced process started directly."""
    pids = _header_pids(trace_dir)
    codes = {rank: by_pid[pid] for rank, pid in pids.items() if pid in by_pid}
    if single is not None and len(pids) == 1:
        codes.setdefault(next(iter(pids)), single)
    return codes


def _header_pids(trace_dir: str) -> dict[int, int]:
    """rank -> pid from each trace's header line (the first line; nothing else is read)."""
    found: dict[int, int] = {}
    try:
        names = os.listdir(trace_dir)
    except OSError:
        return found
    for name in names:
        if not name.startswith(TRACE_PREFIX):
            continue
        try:
            if name.endswith(BINARY_SUFFIX):  # written live (`--trace-format binary`)
                header = json.loads(header_line(os.path.join(trace_dir, name)) or b"null")
            elif name.endswith(TRACE_SUFFIX):
                with open(os.path.join(trace_dir, name), encoding="utf-8", errors="replace") as handle:
                    header = json.loads(handle.readline(1 << 16))
            else:
                continue
            found[int(header["rank"])] = int(header["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found
