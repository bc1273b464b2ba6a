"""What the offline analysis of collcheck traces finds, as data: the sides of a divergence, missing
collectives, point-to-point findings, swapped pairs, per-rank summaries, unreadable parts, one
rank's trace as read, and the Analysis that holds them all.

Shared by the reading (trace_read.py), the analysis (analyze.py, stream.py), the rendering
(trace_render.py) and the verdict; it computes nothing but a few properties, and never imports torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from collcheck.runtime.groups import numbered
from collcheck.runtime.operand import Use, swap_text
from collcheck.runtime.p2p import pair_text
from collcheck.runtime.record import (
    CollectiveEvent,
)

PROBLEMS_SHOWN = 10  # per file; the rest are counted


@dataclass(frozen=True)
class Side:
    """One rank's view of one collective."""

    rank: int
    describe: str
    site: str
    stack: tuple[str, ...] = ()
    completed: bool | None = None
    library: bool = False  # no frame was the user's: `site` and `stack` are a library's (CallSite)

    @property
    def text(self) -> str:
        return f"rank {self.rank} {self.describe} at {self.site}"

    @property
    def stack_text(self) -> str:
        """The innermost frames, `train.py:13 in step <- train.py:40 in main`, else the site."""
        stack = " <- ".join(_short_frame(frame) for frame in self.stack[:3])
        if not stack:
            return self.site
        return f"{stack} (library)" if self.library else stack

    @classmethod
    def of(cls, event: CollectiveEvent) -> Side:
        completed = event.t_end is not None if event.observable else None
        site = event.site
        return cls(event.rank, event.describe, site.short, site.stack, completed, site.library)


@dataclass(frozen=True)
class Divergence:
    """The first sequence number of a group where ranks disagree.

    kind "mismatch": different collectives (op, shapes, dtypes, reduce op, root);
    kind "callsite": the same collective issued from different lines (a warning).
    `sides` is the reference first, then one side per other variant; `ranks` lists every rank per
    variant in the same order.
    """

    group: str
    seq: int
    kind: str
    sides: tuple[Side, ...]
    ranks: tuple[tuple[int, ...], ...]

    @property
    def text(self) -> str:
        ordered = sorted(self.sides[:2], key=lambda side: side.rank)
        return f"{ordered[0].text} vs {ordered[1].text} ({numbered(self.group, self.seq)})"


@dataclass(frozen=True)
class Missing:
    """Ranks of a group that never issued a collective that another member issued."""

    group: str
    seq: int
    ranks: tuple[int, ...]
    issued_by: Side

    @property
    def text(self) -> str:
        who = ", ".join(f"rank {rank}" for rank in self.ranks)
        return (
            f"{who} never issued {self.issued_by.describe} ({numbered(self.group, self.seq)}); "
            f"rank {self.issued_by.rank} issued it at {self.issued_by.site}"
        )


@dataclass(frozen=True)
class P2PFinding:
    """The first send/recv pair of a channel whose tensors or tags differ (kind "mismatch"), or
    its first send never received or recv never sent (kind "unmatched": `sides` holds the side
    that was issued; rank `absent` never issued its `absent_op`)."""

    group: str  # the trace's group, `<name>:p2p`
    kind: str
    where: str  # `group 0, send #1 0->1`
    sides: tuple[Side, ...]
    events: tuple[tuple[int, int], ...]  # (rank, seq) of each side's event
    absent: int | None = None
    absent_op: str = ""

    @property
    def text(self) -> str:
        if self.kind == "mismatch":
            send, recv = self.sides
            return pair_text((send.rank, send.text), (recv.rank, recv.text), self.where)
        return f"rank {self.absent} never issued the {self.absent_op} for {self.sides[0].text} ({self.where})"


SWAP_WINDOW = 64  # divergences per pair of ranks searched for a swapped pair's other half


@dataclass(frozen=True)
class Swap:
    """Two collectives that two ranks issued in opposite orders: each rank's pair of call sites,
    whose operands cross (`a` then `b` on one rank, `b` then `a` on the other)."""

    group: str
    uses: tuple[Use, Use, Use, Use]  # the two ranks' sides of the first half, then of the second

    @property
    def text(self) -> str:
        return swap_text(self.group, self.uses)


RUNTIME_ERROR_KINDS = ("mismatch", "callsite", "stall", "swap")  # errors the tracer raised while the job ran

# `collcheck trace` exit statuses.
EXIT_OK = 0  # everything read, ranks consistent
EXIT_DIVERGED = 1  # ranks diverged (or, with --strict, call sites did)
EXIT_UNREADABLE = 2  # nothing could be read (or a usage error)
EXIT_INCOMPLETE = 3  # no divergence in what could be read, but lines, files or events are missing


@dataclass(frozen=True)
class RuntimeReport:
    rank: int
    kind: str
    severity: str
    text: str


@dataclass(frozen=True)
class RankSummary:
    rank: int
    source: str  # "collcheck" or "flight-recorder"
    collectives: int
    last: Side | None
    exited: bool | None  # None when the source cannot tell (Flight Recorder)
    path: str = ""

    @property
    def text(self) -> str:
        if self.last is None:
            head = "no collective recorded"
        else:
            state = {True: "completed", False: "not completed", None: "completion not observable"}[
                self.last.completed
            ]
            count = f"{self.collectives} collective{'' if self.collectives == 1 else 's'}"
            head = f"{count}; last {self.last.describe} at {self.last.site}, {state}"
        if self.exited is False:
            head += "; trace ends without an exit record (killed, crashed or aborted)"
        return head


@dataclass(frozen=True)
class Problem:
    """Something in the trace folder that could not be read: a whole file (`line` 0) or one line."""

    path: str
    line: int
    text: str
    skipped: bool = False  # a whole file that could not be read: counted in `unreadable`
    rank: int | None = None  # the rank a refused or unreadable file's name gives: not absent

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


@dataclass
class RankTrace:
    rank: int
    source: str
    path: str
    events: list[CollectiveEvent] = field(default_factory=list)
    reports: list[RuntimeReport] = field(default_factory=list)
    exited: bool | None = None
    problems: list[Problem] = field(default_factory=list)  # the first PROBLEMS_SHOWN
    unreadable: int = 0  # lines (or dump entries) skipped, all of them
    lost: int = 0  # lines the tracer could not write (its `lost` line)
    lost_error: str = ""
    world_size: int = 0  # the header's (0: unknown): every rank below it must have a trace
    members: tuple[int, ...] = ()  # ranks a dump's group configs name: each must have a trace

    def note(self, line: int, text: str, skipped: bool = True) -> None:
        """Something that could not be used: a line (`line` 0: the file), skipped or not."""
        if skipped:
            self.unreadable += 1
        if len(self.problems) < PROBLEMS_SHOWN:
            self.problems.append(Problem(self.path, line, text))


@dataclass(frozen=True)
class Timeline:
    """When the traced collectives ran, for the Perfetto export and the run verdict: what is left
    of the events once a streaming analysis has passed them."""

    origin: float = 0.0  # the earliest t_start
    end: float = 0.0  # the latest t_end (or t_start where none)
    latest: dict[int, float] = field(default_factory=dict)  # rank -> its latest t_end or t_start
    last: dict[int, CollectiveEvent] = field(default_factory=dict)  # rank -> its latest-starting event
    starts: dict[tuple[int, str, int], float] = field(default_factory=dict)  # (rank, group, seq) of
    # each event a finding names -> its t_start
    paths: dict[int, str] = field(default_factory=dict)  # rank -> the trace its events were read from


@dataclass(frozen=True)
class Analysis:
    ranks: tuple[int, ...]
    groups: tuple[tuple[str, tuple[int, ...], int], ...]  # name, members, collectives issued (max)
    divergences: tuple[Divergence, ...]
    missing: tuple[Missing, ...]
    summaries: tuple[RankSummary, ...]
    reports: tuple[RuntimeReport, ...]
    events: dict[int, list[CollectiveEvent]] = field(default_factory=dict, compare=False)
    p2p: tuple[P2PFinding, ...] = ()
    problems: tuple[Problem, ...] = ()  # what could not be read (files, the first lines of each)
    unreadable: int = 0  # lines and dump entries skipped in all, and the absent ranks
    lost: int = 0  # events the tracers could not write
    # Ranks that headers or member lists name and that left no file at all (first, last), each
    # counted in `unreadable` as an unreadable dump is.
    absent: tuple[tuple[int, int], ...] = ()

    @property
    def incomplete(self) -> bool:
        """Some input could not be read: "consistent" cannot be claimed."""
        return bool(self.problems or self.unreadable or self.lost or self.absent)

    @property
    def absent_count(self) -> int:
        return sum(last - first + 1 for first, last in self.absent)

    swaps: tuple[Swap, ...] = ()
    timeline: Timeline = field(default_factory=Timeline, compare=False)
    # The pass stopped at its first divergence (`trace --first`): `divergences` holds it alone, and
    # the rest of the traces (and every finding that needs them whole) was not read.
    stopped: bool = False

    @property
    def mismatches(self) -> tuple[Divergence, ...]:
        return tuple(d for d in self.divergences if d.kind == "mismatch")

    @property
    def warnings(self) -> tuple[Divergence, ...]:
        return tuple(d for d in self.divergences if d.kind == "callsite")

    @property
    def runtime_errors(self) -> tuple[RuntimeReport, ...]:
        return tuple(r for r in self.reports if r.severity == "error" and r.kind in RUNTIME_ERROR_KINDS)

    @property
    def diverged(self) -> bool:
        return bool(self.mismatches or self.missing or self.runtime_errors or self.p2p or self.swaps)

    def exit_code(self, strict: bool = False) -> int:
        """EXIT_DIVERGED, else EXIT_INCOMPLETE when some input could not be read, else EXIT_OK."""
        if self.diverged or (strict and self.warnings):
            return EXIT_DIVERGED
        return EXIT_INCOMPLETE if self.incomplete else EXIT_OK


def _short_frame(frame: str) -> str:
    path, _, rest = frame.partition(":")
    from collcheck.runtime.record import display_path, library_path

    return f"{library_path(path) if _in_package(path) else display_path(path)}:{rest}"


def _in_package(path: str) -> bool:
    from collcheck.runtime.record import PACKAGE_FOLDERS

    return any(folder in PACKAGE_FOLDERS for folder in path.split(os.sep)[:-1])
