"""## What it does
Finds group creation (`new_group`, `new_subgroups`, `new_subgroups_by_enumeration`,
`split_group`, `init_device_mesh`) that not every rank executes, in the same order, with the same
arguments.

## Why is this bad?
Creating a process group is itself a collective over the default group: every rank must call
`new_group` for every group, even the groups it is not a member of, and with the same list of
ranks. A `new_group` called only by its members, or a `new_group([rank, peer])` where each rank
passes its own list, hangs at start-up or pairs ranks into the wrong groups.

## Example
```python
if rank in (0, 1):
    pair = dist.new_group([0, 1])   # ranks 2 and 3 never call it
```

## Use instead
```python
pair = dist.new_group([0, 1])        # every rank calls it
if rank in (0, 1):
    dist.all_reduce(x, group=pair)
```

## References
- PyTorch, `torch.distributed.new_group`: "requires that all processes in the main group enter this function"
"""

from __future__ import annotations

from collcheck.checks._describe import describe_element, ranks
from collcheck.findings import Severity
from collcheck.static.anchor import Anchor
from collcheck.static.divergence import Divergence, DivergenceKind
from collcheck.static.program import CommEvent, EventKind

CODE = "CC004"
NAME = "divergent-group-creation"
SEVERITY = Severity.ERROR
CLAIMS = frozenset({DivergenceKind.GROUP_ARGS, DivergenceKind.SEQUENCE})
PRECEDENCE = 30  # before CC003/CC001: a missing group creation is reported as such
ANCHOR = Anchor.ELEMENT
MESSAGE = (
    "group creation differs between ranks: rank {rank_x} has {what_x}, rank {rank_y} has {what_y} "
    "(world size {world})"
)
MESSAGE_ARGS = (
    "{op} gets rank-dependent ranks: ranks {rank_x} and {rank_y} would create different groups "
    "(world size {world})"
)


def applies(d: Divergence) -> bool:
    if d.kind is DivergenceKind.GROUP_ARGS:
        return True
    return any(isinstance(e, CommEvent) and e.kind is EventKind.GROUP_CREATE for e in (d.event_a, d.event_b))


def describe(d: Divergence) -> tuple[str, dict[str, str]]:
    low, high, at_low, at_high = ranks(d)
    world = str(d.model.world)
    if d.kind is DivergenceKind.GROUP_ARGS:
        op = at_low.op if isinstance(at_low, CommEvent) else "new_group"
        return MESSAGE_ARGS, {"op": op, "rank_x": str(low), "rank_y": str(high), "world": world}
    return MESSAGE, {
        "rank_x": str(low),
        "rank_y": str(high),
        "what_x": describe_element(at_low),
        "what_y": describe_element(at_high),
        "world": world,
    }
