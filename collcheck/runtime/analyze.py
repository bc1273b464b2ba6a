"""Offline cross-rank analysis of collcheck traces and PyTorch Flight Recorder dumps.

Collectives are aligned per (group, sequence number). Nothing trusts a particular rank: at the
first sequence number where ranks disagree the majority is the reference (ties go to the class
holding the lowest rank), and every side is shown with its own call site. Sends and recvs are
paired per channel instead (the k-th send from s to d with the k-th recv on d from s; p2p.py).
Never imports torch, and never unpickles anything but plain data: Flight Recorder dumps hold only
dicts, lists, tuples, strings, numbers, booleans and None, so a pickle that names any global (a
class, `os.system`, ...) is refused, and only files that start like a dump are unpickled at all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from collcheck.runtime.operand import Use, crosses
from collcheck.runtime.p2p import Pair, pairs
from collcheck.runtime.record import (
    CollectiveEvent,
)
from collcheck.runtime.trace_model import (
    SWAP_WINDOW,
    Analysis,
    Divergence,
    Missing,
    P2PFinding,
    Problem,
    RankSummary,
    RankTrace,
    Side,
    Swap,
    Timeline,
)

# ---------------------------------------------------------------------------------------------
# Analysis


def analyze(traces: list[RankTrace], problems: list[Problem] | tuple[Problem, ...] = ()) -> Analysis:
    """The cross-rank findings; `problems` (from load_dir) are carried into the report."""
    events = {trace.rank: trace.events for trace in traces}
    by_group: dict[str, dict[int, dict[int, CollectiveEvent]]] = {}
    members: dict[str, set[int]] = {}
    for rank, rank_events in events.items():
        for event in rank_events:
            by_group.setdefault(event.group, {}).setdefault(rank, {})[event.seq] = event
            members.setdefault(event.group, set()).update(event.group_ranks or (rank,))
            members[event.group].add(rank)
    divergences: list[Divergence] = []
    missing: list[Missing] = []
    p2p: list[P2PFinding] = []
    swaps: list[Swap] = []
    groups = []
    for group in sorted(by_group, key=group_order):
        ranks_events = by_group[group]
        groups.append(
            (group, tuple(sorted(members[group])), max(max(seqs) for seqs in ranks_events.values()))
        )
        if group.endswith(":p2p"):  # sends and receives pair up across ranks, not by sequence
            p2p.extend(_p2p_findings(group, ranks_events, set(events)))
            continue
        found_divergences = _divergences(group, ranks_events)
        divergences.extend(found_divergences)
        mismatch_at = next((d.seq for d in found_divergences if d.kind == "mismatch"), None)
        swap = _swap(group, ranks_events, mismatch_at)
        if swap is not None:
            swaps.append(swap)
        found = _missing(group, ranks_events, members[group] & set(events))
        if found is not None:
            missing.append(found)
    absent = absent_ranks(traces, (rank for ranks in members.values() for rank in ranks), problems)
    return Analysis(
        ranks=tuple(sorted(events)),
        groups=tuple(groups),
        divergences=tuple(divergences),
        missing=tuple(missing),
        summaries=tuple(_summary(trace) for trace in sorted(traces, key=lambda t: t.rank)),
        reports=tuple(report for trace in traces for report in trace.reports),
        events=events,
        p2p=tuple(p2p),
        problems=(*problems, *(problem for trace in traces for problem in trace.problems)),
        unreadable=sum(trace.unreadable for trace in traces)
        + sum(p.skipped for p in problems)
        + sum(last - first + 1 for first, last in absent),
        lost=sum(trace.lost for trace in traces),
        swaps=tuple(swaps),
        timeline=_timeline(traces, by_group, divergences, p2p),
        absent=absent,
    )


def absent_ranks(
    traces: Iterable[RankTrace], members: Iterable[int], problems: Iterable[Problem]
) -> tuple[tuple[int, int], ...]:
    """The ranks that must have left a file and left none, as (first, last) runs: every rank below
    a header's world size, every rank a dump's group configs name, every member of a group the
    events name (`members`), less the ranks read and the ranks whose file was there but refused or
    unreadable (`Problem.rank`: counted as such already). Runs, so that a header claiming a huge
    world costs nothing to answer."""
    traces = list(traces)
    world = max((trace.world_size for trace in traces), default=0)
    present = {trace.rank for trace in traces} | {p.rank for p in problems if p.rank is not None}
    named = {rank for trace in traces for rank in trace.members} | set(members)
    runs: list[tuple[int, int]] = []
    following = 0  # the lowest rank not yet placed in a run or found present
    for rank in sorted(r for r in present if 0 <= r < world):
        if rank > following:
            runs.append((following, rank - 1))
        following = rank + 1
    if following < world:
        runs.append((following, world - 1))
    for rank in sorted(r for r in named - present if r >= world and r >= 0):
        if runs and runs[-1][1] == rank - 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    return tuple(runs)


def _timeline(
    traces: list[RankTrace],
    by_group: dict[str, dict[int, dict[int, CollectiveEvent]]],
    divergences: list[Divergence],
    p2p: list[P2PFinding],
) -> Timeline:
    """The Timeline of events held in memory."""
    events = {trace.rank: trace.events for trace in traces}
    starts = [event.t_start for rank_events in events.values() for event in rank_events]
    origin = min(starts) if starts else 0.0
    latest = {
        rank: max((e.t_end or e.t_start for e in rank_events), default=origin)
        for rank, rank_events in events.items()
    }
    last = {
        rank: max(rank_events, key=lambda event: event.t_start)
        for rank, rank_events in events.items()
        if rank_events
    }
    named = [(rank, d.group, d.seq) for d in divergences for ranks in d.ranks for rank in ranks]
    named += [(rank, f.group, seq) for f in p2p for rank, seq in f.events]
    found = ((key, by_group.get(key[1], {}).get(key[0], {}).get(key[2])) for key in named)
    return Timeline(
        origin=origin,
        end=max([e.t_end or e.t_start for es in events.values() for e in es], default=origin),
        latest=latest,
        last=last,
        starts={key: event.t_start for key, event in found if event is not None},
        paths={trace.rank: trace.path for trace in traces},
    )


def group_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isascii() and name.isdigit() and len(name) < 12 else (1 << 40, name)


def _divergences(group: str, ranks_events: dict[int, dict[int, CollectiveEvent]]) -> list[Divergence]:
    """The first mismatch of the group, and the first call-site divergence before it."""
    found: list[Divergence] = []
    all_seqs = sorted({seq for seqs in ranks_events.values() for seq in seqs})
    for seq in all_seqs:
        present = {rank: seqs[seq] for rank, seqs in ranks_events.items() if seq in seqs}
        split = split_at(present, sites_too=not found)
        if split is not None:
            found.append(divergence_of(group, seq, *split, present))
            if split[0] == "mismatch":
                return found  # later sequence numbers are misaligned: the first one is the answer
    return found


def split_at(
    present: dict[int, CollectiveEvent], sites_too: bool
) -> tuple[str, list[tuple[int, ...]]] | None:
    """How the ranks' events at one sequence number (rank -> event) split: ("mismatch", variants)
    when they are different collectives, else ("callsite", variants) when `sites_too` and they come
    from different lines, else None."""
    if len(present) < 2:
        return None
    variants = _variants(present, lambda event: event.signature)
    if len(variants) > 1:
        return "mismatch", variants
    if sites_too:
        sites = _variants(present, lambda event: event.site.short)
        if len(sites) > 1:
            return "callsite", sites
    return None


def _swap(group: str, ranks_events: dict[int, dict[int, CollectiveEvent]], before: int | None) -> Swap | None:
    """The first swapped pair of the group before its first mismatch."""
    search = SwapSearch(group)
    for seq in sorted({seq for seqs in ranks_events.values() for seq in seqs}):
        if before is not None and seq >= before:
            break
        found = search.step({rank: seqs[seq] for rank, seqs in ranks_events.items() if seq in seqs})
        if found is not None:
            return found
    return None


class SwapSearch:
    """Looks for a swapped pair one sequence number at a time, in order: per pair of ranks, the
    last SWAP_WINDOW sequence numbers where their call sites and operands differ are searched for
    two that cross."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.splits: dict[tuple[int, int], deque[tuple[CollectiveEvent, CollectiveEvent]]] = {}

    def step(self, present: dict[int, CollectiveEvent]) -> Swap | None:
        """The swap completed by this sequence number's events (rank -> event), if any."""
        if len({event.site.short for event in present.values()}) < 2:
            return None
        ranks = sorted(present)
        for index, low in enumerate(ranks):
            for high in ranks[index + 1 :]:
                one, two = present[low], present[high]
                if one.site.short == two.site.short or one.site.operand == two.site.operand:
                    continue
                recent = self.splits.setdefault((low, high), deque(maxlen=SWAP_WINDOW))
                for old_one, old_two in recent:
                    if crosses(
                        (old_one.site.operand, old_two.site.operand), (one.site.operand, two.site.operand)
                    ):
                        return Swap(self.group, (_use(old_one), _use(old_two), _use(one), _use(two)))
                recent.append((one, two))
        return None


def _use(event: CollectiveEvent) -> Use:
    return Use(event.rank, event.seq, event.describe, event.site.operand, event.site.short)


def _variants(present: dict[int, CollectiveEvent], key: Any) -> list[tuple[int, ...]]:
    """Ranks grouped by `key`, largest group first, ties broken by lowest rank (no trusted rank)."""
    classes: dict[str, list[int]] = {}
    for rank in sorted(present):
        classes.setdefault(key(present[rank]), []).append(rank)
    return sorted((tuple(ranks) for ranks in classes.values()), key=lambda ranks: (-len(ranks), ranks[0]))


def divergence_of(
    group: str, seq: int, kind: str, variants: list[tuple[int, ...]], present: dict[int, CollectiveEvent]
) -> Divergence:
    sides = tuple(Side.of(present[ranks[0]]) for ranks in variants)
    return Divergence(group, seq, kind, sides, tuple(variants))


def _missing(
    group: str, ranks_events: dict[int, dict[int, CollectiveEvent]], members: set[int]
) -> Missing | None:
    """The earliest collective of the group that some traced member never issued."""
    counts = {rank: max(ranks_events[rank]) if rank in ranks_events else 0 for rank in members}
    if not counts:
        return None
    lowest = min(counts.values())
    if lowest == max(counts.values()):
        return None
    # lowest + 1 in a whole trace; the next one present where lines were lost or are malformed.
    seq = min(number for seqs in ranks_events.values() for number in seqs if number > lowest)
    behind = tuple(sorted(rank for rank, count in counts.items() if count == lowest))
    issuer = min(rank for rank, seqs in ranks_events.items() if seq in seqs)
    return Missing(group, seq, behind, Side.of(ranks_events[issuer][seq]))


def _p2p_findings(
    group: str, ranks_events: dict[int, dict[int, CollectiveEvent]], traced: set[int]
) -> list[P2PFinding]:
    """Per channel, the first pair that disagrees and the first send or recv left unmatched."""
    found: list[P2PFinding] = []
    channels = pairs(event for seqs in ranks_events.values() for event in seqs.values())
    for channel_pairs in channels.values():
        mismatch = next((pair for pair in channel_pairs if not pair.agrees), None)
        lone = next((pair for pair in channel_pairs if pair.send is None or pair.recv is None), None)
        found.extend(channel_findings(group, mismatch, lone, traced))
    return found


def channel_findings(
    group: str, mismatch: Pair | None, lone: Pair | None, traced: set[int]
) -> list[P2PFinding]:
    """The findings of one channel: its first pair that disagrees (`mismatch`), and its first send
    or recv left unmatched (`lone`)."""
    found: list[P2PFinding] = []
    if mismatch is not None and mismatch.send is not None and mismatch.recv is not None:
        sides = (Side.of(mismatch.send), Side.of(mismatch.recv))
        found.append(P2PFinding(group, "mismatch", _where(mismatch), sides, _ranks_seqs(mismatch)))
    if lone is not None:
        found.extend(_unmatched(group, lone, traced))
    return found


def _unmatched(group: str, pair: Pair, traced: set[int]) -> list[P2PFinding]:
    """A send never received or a recv never sent; only when the peer was traced (an untraced
    rank's sends and recvs are unknown, not missing)."""
    if pair.recv is None and pair.send is not None:
        issued, absent, absent_op = pair.send, pair.channel.dst, "recv"
    elif pair.send is None and pair.recv is not None:
        issued, absent, absent_op = pair.recv, pair.channel.src, "send"
    else:
        return []
    if absent not in traced:
        return []
    sides = (Side.of(issued),)
    return [P2PFinding(group, "unmatched", _where(pair), sides, _ranks_seqs(pair), absent, absent_op)]


def _where(pair: Pair) -> str:
    return pair.channel.where(pair.k)


def _ranks_seqs(pair: Pair) -> tuple[tuple[int, int], ...]:
    return tuple((event.rank, event.seq) for event in (pair.send, pair.recv) if event is not None)


def _summary(trace: RankTrace) -> RankSummary:
    last = max(trace.events, key=lambda event: event.t_start) if trace.events else None
    return RankSummary(
        trace.rank, trace.source, len(trace.events), Side.of(last) if last else None, trace.exited, trace.path
    )
