"""Plain data shared by the engine, the checks and the reporters.

Findings are frozen so that they can be cached, hashed, deduplicated and compared in tests
without any reporter formatting in the way (messages are templates plus arguments). What
identifies a finding across runs and line shifts is here too (`fingerprints`): the SARIF report,
the baseline and the fix verifier all compare findings by it.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import quote


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, order=True)
class Location:
    """A source span. Lines are 1-based, columns 0-based (as in `ast`); reporters add 1 to columns."""

    path: str
    line: int
    column: int = 0
    end_line: int | None = None
    end_column: int | None = None


@dataclass(frozen=True)
class TraceStep:
    """One collective in a rank's counterexample sequence.

    `chain` lists the call sites (outermost first) through which the collective was reached, so a
    report can print `save -> synchronize -> barrier@comm_utils.py:17`.
    """

    op: str
    path: str
    line: int
    chain: tuple[str, ...] = ()
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"op": self.op, "path": self.path, "line": self.line}
        if self.chain:
            data["chain"] = list(self.chain)
        if self.detail:
            data["detail"] = self.detail
        return data


class ConditionKind(Enum):
    """How a condition reads in a counterexample: a branch test, or the fact that a loop runs
    (made by static.conditions; the value is what the JSON report and the cache hold)."""

    TEST = "test"  # `if` / `elif` / `while` / a rank decorator: true or false
    LOOP = "loop"  # `for x in items` runs at least once
    CASE = "case"  # a `match` case is taken
    EXCEPTION = "exception"  # a call inside `try` raises a caught exception


# How each kind of condition reads when it holds and when it does not.
CONDITION_WORDS: dict[ConditionKind, tuple[str, str]] = {
    ConditionKind.TEST: ("true", "false"),
    ConditionKind.LOOP: ("runs", "does not run"),
    ConditionKind.CASE: ("taken", "not taken"),
    ConditionKind.EXCEPTION: ("raises", "does not raise"),
}


@dataclass(frozen=True)
class RankValue:
    """A condition on one rank of a counterexample: whether it holds, and the values it reads that
    the solver chose for that rank (`("local rank of tp_mesh", "1")`)."""

    rank: int
    holds: bool
    reads: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Reason:
    """A branch, loop or exit condition on the two ranks' paths that splits them: it holds on one
    rank and not on the other. `condition` is its source text (shortened), `kind` what kind of
    condition it is."""

    condition: str
    path: str
    line: int
    kind: ConditionKind
    ranks: tuple[RankValue, ...]
    column: int = 0  # 0-based, of the condition's expression

    def word(self, holds: bool) -> str:
        yes, no = CONDITION_WORDS[self.kind]
        return yes if holds else no

    def to_json(self) -> dict[str, Any]:
        return {
            "condition": self.condition,
            "kind": self.kind.value,
            "path": self.path,
            "line": self.line,
            "ranks": {
                str(item.rank): {"value": item.holds, "reads": dict(item.reads)} for item in self.ranks
            },
        }


@dataclass(frozen=True)
class Counterexample:
    """Two concrete ranks of a concrete world size whose collective sequences differ.

    `why` lists the conditions that split the two ranks. For a divergence among the members of a
    group (`group`, its expression in the source), `local_ranks` maps each global rank shown to its
    rank inside that group, when the solver chose one."""

    world_size: int
    ranks: tuple[tuple[int, tuple[TraceStep, ...]], ...]
    values: tuple[tuple[str, str], ...] = ()  # other model values worth showing (trip counts, ...)
    why: tuple[Reason, ...] = ()
    group: str = ""
    local_ranks: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "world_size": self.world_size,
            "ranks": {str(rank): [step.to_json() for step in steps] for rank, steps in self.ranks},
        }
        if self.values:
            data["values"] = dict(self.values)
        if self.group:
            data["group"] = {
                "name": self.group,
                "local_ranks": {str(r): local for r, local in self.local_ranks},
            }
        if self.why:
            data["why"] = [reason.to_json() for reason in self.why]
        return data


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    location: Location
    message_template: str
    message_args: tuple[tuple[str, str], ...]
    counterexample: Counterexample | None = None
    function: str = ""
    # Where the cause is read when it is not at `location` (the guard that reads a per-process
    # value): a suppression comment there covers the finding too.
    cause: Location | None = None

    @property
    def message(self) -> str:
        return self.message_template.format(**dict(self.message_args))

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.location.path, self.location.line, self.location.column, self.code)


@dataclass(frozen=True)
class FileError:
    """A file that could not be analysed; the run goes on without it."""

    path: str
    message: str
    line: int | None = None
    # Caused by this run rather than by the file (the safety clock ran out, a worker died): never cached.
    transient: bool = False


class Budget(str, Enum):
    """The work budgets that can cut a function's analysis short (config keys in parentheses)."""

    STEPS = "max-steps"  # statements executed by the interpreter, helpers included
    PATHS = "max-paths"  # paths followed at once
    Z3_QUERY = "z3-rlimit"  # z3 resource units of one solver query
    Z3_FUNCTION = "z3-function-rlimit"  # z3 resource units of all the queries of one function


@dataclass(frozen=True)
class BudgetCut:
    """A function (or module body: `function` is "module body") whose analysis a work budget cut
    short: part of it, or all of it, went unchecked. Work budgets count work, not time, so the
    same file cuts the same functions on every machine; a cut is a note, not an error, unless the
    run asks otherwise (`budget-exceeded = "error"`)."""

    path: str
    line: int
    function: str
    budget: Budget
    limit: int

    def message(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.function}: analysis cut short by the work budget "
            f"`{self.budget.value}` ({self.limit:,}); what it left unchecked is not reported"
        )


@dataclass(frozen=True)
class UnusedSuppression:
    location: Location
    codes: tuple[str, ...]


class Applicability(str, Enum):
    """Whether a fix keeps what the program does (safe) or changes what runs (unsafe)."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True)
class Edit:
    """Replace the text from (line, column) to (end_line, end_column) by `content`.

    Lines are 1-based and columns 0-based, in characters, as for `Location`.
    """

    line: int
    column: int
    end_line: int
    end_column: int
    content: str


@dataclass(frozen=True)
class Fix:
    """A verified rewrite that removes one finding (see collcheck.adopt.fixes)."""

    applicability: Applicability
    description: str
    edits: tuple[Edit, ...]


@dataclass(frozen=True)
class BaselineEntry:
    """A finding recorded in a baseline file, identified by its line-independent fingerprint."""

    fingerprint: str
    code: str
    path: str
    message: str


@dataclass
class FileResult:
    """What one file produced: findings, or the error that stopped it (never both needed)."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    error: FileError | None = None
    notes: list[str] = field(default_factory=list)  # verbose-only remarks (the reduced mode, z3 unknowns)
    budget_cuts: list[BudgetCut] = field(default_factory=list)  # functions a work budget cut short
    unused_suppressions: list[UnusedSuppression] = field(default_factory=list)
    # Work of this run (a result read from the cache asked nothing): z3 queries, and pairs of paths
    # the solver stage decided in Python without asking z3. Shown by `-v`, never stored.
    z3_queries: int = 0
    settled_pairs: int = 0
    # The other files of the run the answer was computed from, by real path, each with the
    # index's digest of the text read (static/reads.py): the cache serves the answer again only
    # while each still has it. Stored with the answer, never reported.
    reads: dict[str, str] = field(default_factory=dict)


@dataclass
class RunResult:
    files: list[FileResult] = field(default_factory=list)
    # Filled only when a fix was asked for (computing fixes loads libcst): `fixes_computed` says
    # whether a finding missing from `fixes` has no fix or was not looked at.
    fixes: dict[Finding, Fix] = field(default_factory=dict)
    fixes_computed: bool = False
    stale_baseline: list[BaselineEntry] = field(default_factory=list)  # baseline entries gone
    # The summaries of installed packages the run read (docs/summaries.md), by name: `-v` says them.
    summaries: tuple[str, ...] = ()
    summary_notes: tuple[str, ...] = ()  # installed packages imported but not read, and why

    @property
    def findings(self) -> list[Finding]:
        found = [finding for result in self.files for finding in result.findings]
        return sorted(found, key=Finding.sort_key)

    @property
    def z3_queries(self) -> int:
        return sum(result.z3_queries for result in self.files)

    @property
    def settled_pairs(self) -> int:
        return sum(result.settled_pairs for result in self.files)

    @property
    def errors(self) -> list[FileError]:
        return [result.error for result in self.files if result.error is not None]

    @property
    def notes(self) -> list[str]:
        return [note for result in self.files for note in result.notes]

    @property
    def unused_suppressions(self) -> list[UnusedSuppression]:
        return [item for result in self.files for item in result.unused_suppressions]

    @property
    def budget_cuts(self) -> list[BudgetCut]:
        cuts = [cut for result in self.files for cut in result.budget_cuts]
        return sorted(cuts, key=lambda cut: (cut.path, cut.line, cut.function, cut.budget.value))

    @property
    def exit_code(self) -> int:
        """1 for findings or files that could not be analysed; budget cuts are notes (`gate`)."""
        return 1 if self.findings or self.errors else 0

    def gate(self, budget_cuts_fail: bool) -> int:
        """The exit code of a check; with `budget_cuts_fail`, a function a work budget cut short
        fails it too (`budget-exceeded = "error"`)."""
        return 1 if self.exit_code or (budget_cuts_fail and self.budget_cuts) else 0


# --- what identifies a finding -------------------------------------------------------------------

# Messages cite places (`barrier at utils.py:17`); the fingerprint must not move with them.
_LINE_NUMBERS = re.compile(r"(\.pyi?):\d+(?::\d+)?|\b(line) \d+")


def line_free_message(finding: Finding) -> str:
    """The message with the line numbers it cites taken out (what identifies a finding)."""
    return _LINE_NUMBERS.sub(lambda match: match.group(1) or match.group(2), finding.message)


def path_uri(path: str, root: Path) -> tuple[str, bool]:
    """A URI for `path` (as SARIF writes it) and whether it is relative to `root`."""
    candidate = Path(path)
    if not candidate.is_absolute():
        return quote(candidate.as_posix()), True
    try:
        return quote(candidate.relative_to(root).as_posix()), True
    except ValueError:
        return candidate.as_uri(), False


def _fingerprint(finding: Finding, uri: str, occurrence: int) -> str:
    """Stable across runs and line shifts: no line numbers, only what identifies the finding."""
    parts = (finding.code, uri, finding.function, line_free_message(finding), str(occurrence))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def fingerprints(findings: list[Finding], root: Path) -> list[str]:
    """Each finding's partial fingerprint, in order; `findings` sorted as `RunResult.findings` is.

    Identical findings in one function are told apart by their occurrence number, so the
    fingerprint survives lines moving but not the findings swapping places. The SARIF report
    (`partialFingerprints`) and the baseline (collcheck.adopt.baseline) use these.
    """
    seen: Counter[tuple[str, str, str, str]] = Counter()
    prints = []
    for finding in findings:
        identity = (finding.code, finding.location.path, finding.function, line_free_message(finding))
        prints.append(_fingerprint(finding, path_uri(finding.location.path, root)[0], seen[identity]))
        seen[identity] += 1
    return prints
