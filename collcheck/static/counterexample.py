"""What a finding shows of its divergence: the two ranks' calls, the values, the conditions.

In: a `Divergence` (divergence.py). Out: the `Counterexample` of its finding — each rank's
sequence up to the end (a loop step carries that rank's trip count), or for a deadlock found by
simulating point-to-point schedules, each waiting rank's last blocking calls; the values the
ranks part on and the model's own; the conditions that split them; the group and its local ranks.
"""

from __future__ import annotations

from dataclasses import replace

from collcheck.findings import Counterexample, TraceStep
from collcheck.static.divergence import Blocked, Divergence
from collcheck.static.program import Element, EventKind, LoopEvent, direction

SHOWN_CALLS = 12  # the last calls of a simulated point-to-point schedule shown per rank


def trace_step(element: Element, trips: str = "") -> TraceStep:
    """One call (or loop) of a rank's sequence, with the calls it went through."""
    chain: tuple[str, ...] = ()
    if element.chain:
        chain = (element.chain[0].caller, *(site.callee for site in element.chain))
    if isinstance(element, LoopEvent):
        return TraceStep(f"for[{','.join(element.body_ops)}]", element.path, element.line, chain, trips)
    detail = ""
    if element.operands:
        detail = ", ".join(element.operands)
    return TraceStep(element.op, element.path, element.line, chain, detail)


def _schedule_steps(blocked: Blocked) -> tuple[TraceStep, ...]:
    """A rank's simulated blocking calls up to the one it waits in (all of them if it finished)."""
    end = min(blocked.at + 1, len(blocked.calls))
    steps = []
    for index in range(max(0, end - SHOWN_CALLS), end):
        event, peer = blocked.calls[index]
        step = trace_step(event)
        towards = f"to rank {peer}" if direction(event) is EventKind.P2P_SEND else f"from rank {peer}"
        waits = ", waits here" if index == blocked.at else ""
        steps.append(
            replace(step, detail=f"{step.detail}; {towards}{waits}" if step.detail else towards + waits)
        )
    return tuple(steps)


def counterexample(d: Divergence) -> Counterexample:
    model = d.model
    values = d.shown_values()
    if d.blocked:
        shown = sorted((b.rank, _schedule_steps(b)) for b in d.blocked)
        return Counterexample(world_size=model.world, ranks=tuple(shown), values=values, why=d.why)
    trips_a, trips_b = (d.trips.on_a, d.trips.on_b) if d.trips is not None else ("", "")
    steps_a = tuple(
        trace_step(e, trips_a if isinstance(e, LoopEvent) and e is d.event_a else "") for e in d.sequence_a
    )
    steps_b = tuple(
        trace_step(e, trips_b if isinstance(e, LoopEvent) and e is d.event_b else "") for e in d.sequence_b
    )
    ranks = [(model.rank_a, steps_a), (model.rank_b, steps_b)]
    ranks.sort(key=lambda item: item[0])
    return Counterexample(
        world_size=model.world,
        ranks=tuple(ranks),
        values=values,
        why=d.why,
        group=d.group,
        local_ranks=tuple(sorted(d.local_ranks)),
    )
